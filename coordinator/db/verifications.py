"""GPU verification's records (migrations 0010_gpu_verifications, 0013_memory_checks): every
challenge (a GPU's compute check and its memory check) and its verdict, and the GPU identities seen
on each node."""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg
from solders.pubkey import Pubkey

from coordinator.db.connection import Connection
from coordinator.keys import NodeKey

__all__ = ["Verdict", "claim_identities", "of_node", "record"]


@dataclass(frozen=True)
class Verdict:
    """One row of evidence: a GPU's challenge (or, with no GPU, a verdict on the node's inventory)."""

    node_key: NodeKey
    model: str
    simulated: bool
    verdict: str  # passed, failed, refused or unfit
    reason: str = ""
    gpu_index: int | None = None
    gpu_uuid: str | None = None
    challenge: str | None = None
    seed: str | None = None
    n: int | None = None
    depth: int | None = None
    products: int | None = None
    expected_seconds: float | None = None
    deadline_seconds: float | None = None
    committed_seconds: float | None = None
    kind: str | None = None  # compute or memory (None: a verdict on the node)
    lanes: int | None = None  # the memory check's
    blocks: int | None = None
    block_bytes: int | None = None
    answer_deadline_seconds: float | None = None
    answered_seconds: float | None = None


async def record(conn: Connection, v: Verdict) -> None:
    await conn.execute(
        """INSERT INTO verifications (node_key, gpu_index, gpu_uuid, model, simulated, challenge, seed, n, depth,
                                      products, expected_seconds, deadline_seconds, committed_seconds, verdict, reason,
                                      kind, lanes, blocks, block_bytes, answer_deadline_seconds, answered_seconds)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21)""",
        str(v.node_key), v.gpu_index, v.gpu_uuid, v.model, v.simulated, v.challenge, v.seed, v.n, v.depth,
        v.products, v.expected_seconds, v.deadline_seconds, v.committed_seconds, v.verdict, v.reason,
        v.kind, v.lanes, v.blocks, v.block_bytes, v.answer_deadline_seconds, v.answered_seconds,
    )  # fmt: skip


async def of_node(conn: Connection, node_key: str, limit: int = 100) -> list[asyncpg.Record]:
    """The node's latest verification records, newest first."""
    return await conn.fetch(
        "SELECT * FROM verifications WHERE node_key = $1 ORDER BY id DESC LIMIT $2", node_key, limit
    )


async def claim_identities(
    conn: Connection, node_key: NodeKey, identities: list[str], fresh_seconds: float
) -> dict[str, NodeKey]:
    """Records that these GPU identities are on this node now (and no others it claimed before);
    the identities that another node claimed too within `fresh_seconds`, with that node. Both stay
    unverified until one of them stops claiming it (its next verification) or its claim goes stale."""
    async with conn.transaction():
        await conn.execute(
            "DELETE FROM gpu_identities WHERE node_key = $1 AND NOT identity = ANY($2::text[])",
            str(node_key), identities,
        )  # fmt: skip
        rows = await conn.fetch(
            "SELECT identity, node_key FROM gpu_identities WHERE identity = ANY($1::text[]) AND node_key <> $2 "
            "AND seen_at > clock_timestamp() - make_interval(secs => $3)",
            identities, str(node_key), fresh_seconds,
        )  # fmt: skip
        await conn.executemany(
            "INSERT INTO gpu_identities (identity, node_key) VALUES ($1, $2) "
            "ON CONFLICT (identity, node_key) DO UPDATE SET seen_at = clock_timestamp()",
            [(i, str(node_key)) for i in identities],
        )
    return {r["identity"]: Pubkey.from_string(r["node_key"]) for r in rows}
