"""Rewards (migration 0024_rewards): uptime samples, and each epoch's inputs and root."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import asyncpg

from coordinator.db.connection import Connection
from gpunet.reward_epoch import EpochInputs

__all__ = [
    "eligible_samples",
    "epoch",
    "epochs",
    "node_firsts",
    "record_epoch",
    "record_sample",
    "registered_nodes",
    "set_credited",
    "set_posted",
]


async def record_sample(conn: Connection, at: int, online: Sequence[tuple[str, int, bool]]) -> bool:
    """Records the sample at `at` (node key, tier valid then, jailed: each node seen online); False,
    changing nothing, when that instant was sampled already (by this replica or another)."""
    async with conn.transaction():
        inserted = await conn.fetchval(
            "INSERT INTO reward_samples (at) VALUES ($1) ON CONFLICT DO NOTHING RETURNING at", at
        )
        if inserted is None:
            return False
        await conn.executemany(
            "INSERT INTO reward_uptime (at, node_key, verification_tier, jailed) VALUES ($1, $2, $3, $4)",
            [(at, key, tier, jailed) for key, tier, jailed in online],
        )
    return True


async def registered_nodes(conn: Connection) -> list[asyncpg.Record]:
    """Every registered node's key, verification (tier, until) and whether it is jailed."""
    return list(
        await conn.fetch("SELECT node_key, verification_tier, verified_until, jailed FROM nodes WHERE registered")
    )


async def eligible_samples(conn: Connection, start: int, end: int, tier: int) -> tuple[int, list[asyncpg.Record]]:
    """The samples taken in [start, end), and per node (with its ledger row) the ones at which it was
    online, verified at `tier` or above and not jailed."""
    taken = await conn.fetchval("SELECT count(*) FROM reward_samples WHERE at >= $1 AND at < $2", start, end)
    rows = await conn.fetch(
        """SELECT n.node, n.provider, n.gpu_model, n.gpu_count, u.node_key, count(*) AS eligible
           FROM reward_uptime u JOIN nodes n ON n.node_key = u.node_key
           WHERE u.at >= $1 AND u.at < $2 AND u.verification_tier >= $3 AND NOT u.jailed
           GROUP BY n.node, n.provider, n.gpu_model, n.gpu_count, u.node_key
           ORDER BY n.node""",
        start, end, tier,
    )  # fmt: skip
    return taken, list(rows)


async def node_firsts(conn: Connection, nodes: Sequence[str]) -> dict[str, int]:
    """When each node account was first registered (block time of its first NodeRegistered)."""
    rows = await conn.fetch(
        "SELECT data->>'node' AS node, min(block_time) AS at FROM events "
        "WHERE name = 'NodeRegistered' AND data->>'node' = ANY($1::text[]) GROUP BY 1",
        list(nodes),
    )
    return {r["node"]: r["at"] for r in rows if r["at"] is not None}


async def record_epoch(conn: Connection, inputs: EpochInputs, root: bytes, total: int, leaves: int) -> None:
    """Keeps the epoch's inputs and tree before its root is sent (what was sent can always be shown)."""
    await conn.execute(
        "INSERT INTO reward_epochs (epoch, inputs, root, total, leaves) VALUES ($1, $2::jsonb, $3, $4, $5)",
        inputs.epoch, inputs.canonical(), root.hex(), total, leaves,
    )  # fmt: skip


async def set_posted(conn: Connection, epoch_: int, signature: str) -> None:
    await conn.execute("UPDATE reward_epochs SET posted = $2 WHERE epoch = $1", epoch_, signature)


async def set_credited(conn: Connection, epoch_: int) -> None:
    await conn.execute("UPDATE reward_epochs SET credited = true WHERE epoch = $1", epoch_)


async def epoch(conn: Connection, epoch_: int) -> dict[str, Any] | None:
    row = await conn.fetchrow("SELECT * FROM reward_epochs WHERE epoch = $1", epoch_)
    if row is None:
        return None
    return {**dict(row), "inputs": json.loads(row["inputs"]), "total": int(row["total"])}


async def epochs(conn: Connection, limit: int, offset: int) -> list[dict[str, Any]]:
    rows = await conn.fetch(
        "SELECT epoch, root, total, leaves, posted, credited, built_at FROM reward_epochs "
        "ORDER BY epoch DESC LIMIT $1 OFFSET $2",
        limit, offset,
    )  # fmt: skip
    return [{**dict(r), "total": int(r["total"])} for r in rows]
