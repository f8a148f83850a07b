"""GPU verification's records (migrations 0010_gpu_verifications, 0013_memory_checks,
0018_identity_holder, 0023_calibrations): every challenge (a GPU's compute check and its memory check) and its verdict,
and the GPU identities seen on each node, with when it was last verified with them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import asyncpg
from solders.pubkey import Pubkey

from coordinator.db.connection import Connection
from coordinator.keys import NodeKey

__all__ = ["Duplicate", "Verdict", "claim_identities", "mark_verified", "of_node", "record"]


@dataclass(frozen=True)
class Verdict:
    """One row of evidence: a GPU's challenge (or, with no GPU, a verdict on the node's inventory)."""

    node_key: NodeKey
    model: str
    simulated: bool
    verdict: str  # passed, failed, refused, unfit, unverified or too_slow
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
    flops: int | None = None  # the compute check's
    calibration: int | None = None  # the model calibration its deadline rested on (None: the catalog's assumption)


async def record(conn: Connection, v: Verdict) -> None:
    await conn.execute(
        """INSERT INTO verifications (node_key, gpu_index, gpu_uuid, model, simulated, challenge, seed, n, depth,
                                      products, expected_seconds, deadline_seconds, committed_seconds, verdict, reason,
                                      kind, lanes, blocks, block_bytes, answer_deadline_seconds, answered_seconds,
                                      flops, calibration)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21,
                   $22, $23)""",
        str(v.node_key), v.gpu_index, v.gpu_uuid, v.model, v.simulated, v.challenge, v.seed, v.n, v.depth,
        v.products, v.expected_seconds, v.deadline_seconds, v.committed_seconds, v.verdict, v.reason,
        v.kind, v.lanes, v.blocks, v.block_bytes, v.answer_deadline_seconds, v.answered_seconds,
        v.flops, v.calibration,
    )  # fmt: skip


async def of_node(conn: Connection, node_key: str, limit: int = 100, offset: int = 0) -> list[asyncpg.Record]:
    """The node's latest verification records, newest first, after skipping `offset` of them."""
    return await conn.fetch(
        "SELECT * FROM verifications WHERE node_key = $1 ORDER BY id DESC LIMIT $2 OFFSET $3", node_key, limit, offset
    )


@dataclass(frozen=True)
class Duplicate:
    """An identity another node claims too, and which of the two keeps it: the one verified with it
    the latest ("this", "other"), or neither ("none": neither was verified with it, both unfit)."""

    identity: str
    other: NodeKey
    holder: str


async def claim_identities(
    conn: Connection, node_key: NodeKey, identities: list[str], fresh_seconds: float
) -> list[Duplicate]:
    """Records that these GPU identities are on this node now (and no others it claimed before);
    the identities another node claimed too within `fresh_seconds`, each with who keeps it. The one
    that loses it stays unverified until one of them stops claiming it (its next verification) or
    its claim goes stale."""
    async with conn.transaction():
        await conn.execute(
            "DELETE FROM gpu_identities WHERE node_key = $1 AND NOT identity = ANY($2::text[])",
            str(node_key), identities,
        )  # fmt: skip
        rows = await conn.fetch(
            """SELECT o.identity, o.node_key, o.verified_at AS theirs, m.verified_at AS ours
               FROM gpu_identities o LEFT JOIN gpu_identities m ON m.identity = o.identity AND m.node_key = $2
               WHERE o.identity = ANY($1::text[]) AND o.node_key <> $2
                 AND o.seen_at > clock_timestamp() - make_interval(secs => $3)
               ORDER BY o.identity, o.node_key""",
            identities, str(node_key), fresh_seconds,
        )  # fmt: skip
        await conn.executemany(
            "INSERT INTO gpu_identities (identity, node_key) VALUES ($1, $2) "
            "ON CONFLICT (identity, node_key) DO UPDATE SET seen_at = clock_timestamp()",
            [(i, str(node_key)) for i in identities],
        )

    def holder(ours: datetime | None, theirs: datetime | None) -> str:
        if ours is None and theirs is None:
            return "none"
        return "other" if ours is None or (theirs is not None and theirs > ours) else "this"

    return [Duplicate(r["identity"], Pubkey.from_string(r["node_key"]), holder(r["ours"], r["theirs"])) for r in rows]


async def mark_verified(conn: Connection, node_key: NodeKey) -> None:
    """The node passed its verification with the identities it claims now: it keeps them."""
    await conn.execute("UPDATE gpu_identities SET verified_at = clock_timestamp() WHERE node_key = $1", str(node_key))
