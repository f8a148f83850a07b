"""Leases as the coordinator places and ends them: the indexer's projection of leases and their
assignments (read here, written by the indexer), and the coordinator's own placement record of
each lease (migration 0002)."""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg
from solders.pubkey import Pubkey

from coordinator.db.connection import Connection
from coordinator.keys import NodeKey
from gpunet import instructions as ix

__all__ = [
    "ActiveShare",
    "active_shares",
    "closed_unended",
    "closing_leases",
    "draining_shares",
    "lease_row",
    "leases_due",
    "set_placement",
    "tolerances",
    "waiting_leases",
]


async def lease_row(conn: Connection, lease: str) -> asyncpg.Record | None:
    """Who opened the lease, where it stands and its GPUs (a job submission's checks)."""
    return await conn.fetchrow("SELECT client, status, gpu_count FROM leases WHERE lease = $1", lease)


async def set_placement(
    conn: Connection,
    lease: str,
    state: str,
    reason: str = "",
    nodes: list[NodeKey] | None = None,
    signature: str | None = None,
) -> None:
    await conn.execute(
        """INSERT INTO placements (lease, state, reason, nodes, signature)
           VALUES ($1, $2, $3, coalesce($4, '{}'::text[]), $5)
           ON CONFLICT (lease) DO UPDATE SET state = $2, reason = $3,
             nodes = coalesce($4, placements.nodes), signature = coalesce($5, placements.signature),
             updated_at = clock_timestamp()""",
        lease,
        state,
        reason,
        None if nodes is None else [str(k) for k in nodes],
        signature,
    )


@dataclass(frozen=True)
class ActiveShare:
    """A node's active assignment of an active lease, with the lease's terms and the node's rank."""

    lease: str
    node_key: NodeKey
    node: str
    gpus: int
    price_per_gpu_hour: int
    assigned_by: str | None  # the assignment's transaction: its epoch
    epoch: int  # the same assignment as the chain numbers it (its receipts name it)
    rank: int
    world_size: int
    started_at: int
    duration_seconds: int
    downtime_tolerance_seconds: int
    terms: ix.LeaseTerms

    @property
    def ends_at(self) -> int:
        return self.started_at + self.duration_seconds


async def active_shares(
    conn: Connection, *, lease: str | None = None, node_key: NodeKey | None = None
) -> list[ActiveShare]:
    """Active assignments of active leases, by lease or by node, in each lease's rank order."""
    rows = await conn.fetch(
        """SELECT a.*, l.started_at, l.duration_seconds, l.gpu_model, l.min_vram_gb, l.gpu_count, l.region,
                  l.max_price_per_gpu_hour, l.downtime_tolerance_seconds,
                  array_position(l.nodes, a.node) - 1 AS rank, cardinality(l.nodes) AS world_size
           FROM assignments a JOIN leases l USING (lease)
           WHERE a.active AND l.status = 'active' AND ($1::text IS NULL OR a.lease = $1)
             AND ($2::text IS NULL OR a.node_key = $2)
           ORDER BY a.lease, array_position(l.nodes, a.node)""",
        lease,
        None if node_key is None else str(node_key),
    )
    return [
        ActiveShare(
            lease=r["lease"],
            node_key=Pubkey.from_string(r["node_key"]),
            node=r["node"],
            gpus=r["gpus"],
            price_per_gpu_hour=int(r["price_per_gpu_hour"]),
            assigned_by=r["assigned_by"],
            epoch=int(r["epoch"]),
            rank=r["rank"],
            world_size=r["world_size"],
            started_at=r["started_at"],
            duration_seconds=r["duration_seconds"],
            downtime_tolerance_seconds=r["downtime_tolerance_seconds"] or 0,
            terms=ix.LeaseTerms(
                r["gpu_model"],
                r["min_vram_gb"],
                r["gpu_count"],
                r["region"],
                int(r["max_price_per_gpu_hour"]),
                r["duration_seconds"],
            ),
        )
        for r in rows
    ]


async def waiting_leases(conn: Connection) -> list[asyncpg.Record]:
    """Open leases not placed yet, with their job's per-node split (`has_job` false: no job yet)."""
    return await conn.fetch(
        """SELECT l.*, j.gpus_per_node, j.lease IS NOT NULL AS has_job FROM leases l
           LEFT JOIN jobs j USING (lease) LEFT JOIN placements p USING (lease)
           WHERE l.status = 'open' AND coalesce(p.state, 'waiting') = 'waiting'"""
    )


async def draining_shares(conn: Connection) -> set[tuple[str, NodeKey]]:
    """(lease, node key) of every active share held by a draining node."""
    rows = await conn.fetch(
        """SELECT a.lease, a.node_key FROM assignments a JOIN nodes n USING (node) JOIN leases l USING (lease)
           WHERE a.active AND n.draining AND l.status = 'active'"""
    )
    return {(r["lease"], Pubkey.from_string(r["node_key"])) for r in rows}


async def refused_shares(conn: Connection) -> list[tuple[str, NodeKey]]:
    """(lease, node) of each active share its node refused since it was assigned (a FailedVerification
    fault naming the lease: the node lacks the GPUs), so a new term neither gives the share to it
    again nor leaves it there: it is moved."""
    rows = await conn.fetch(
        """SELECT DISTINCT a.lease, a.node_key FROM assignments a JOIN leases l USING (lease)
           JOIN faults f ON f.node_key = a.node_key AND f.lease = a.lease AND f.kind = 'FailedVerification'
           WHERE a.active AND l.status = 'active' AND f.recorded_at >= to_timestamp(a.assigned_at)"""
    )
    return [(r["lease"], Pubkey.from_string(r["node_key"])) for r in rows]


async def leases_due(conn: Connection, now: int) -> list[tuple[str, int]]:
    """(lease, its end) of active leases whose end has passed."""
    rows = await conn.fetch(
        "SELECT lease, started_at + duration_seconds AS ends_at FROM leases "
        "WHERE status = 'active' AND started_at + duration_seconds <= $1",
        now,
    )
    return [(r["lease"], r["ends_at"]) for r in rows]


async def closing_leases(conn: Connection) -> list[str]:
    return [r["lease"] for r in await conn.fetch("SELECT lease FROM leases WHERE status = 'closing'")]


async def closed_unended(conn: Connection) -> list[str]:
    """Closed leases whose placement is not marked ended yet."""
    rows = await conn.fetch(
        "SELECT l.lease FROM leases l JOIN placements p USING (lease) WHERE l.status = 'closed' AND p.state <> 'ended'"
    )
    return [r["lease"] for r in rows]


async def tolerances(conn: Connection, leases: list[str]) -> dict[str, int]:
    """Each lease's downtime tolerance (its client's choice at open)."""
    rows = await conn.fetch(
        "SELECT lease, downtime_tolerance_seconds FROM leases WHERE lease = ANY($1::text[])", leases
    )
    return {r["lease"]: r["downtime_tolerance_seconds"] or 0 for r in rows}
