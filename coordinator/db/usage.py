"""Usage reports as the nodes signed them (migration 0003): recorded once each before the worker's
ack, then settled, refused or left waiting by the settlement loop."""

from __future__ import annotations

from solders.pubkey import Pubkey
from solders.signature import Signature

from coordinator.db.connection import Connection
from coordinator.keys import NodeKey
from coordinator.settlement import Outcome, SignedUsage
from gpunet.protocol import UsageReportMessage
from gpunet.usage import UsageReport

__all__ = ["pending_count", "pending_usage", "record_usage", "refused_usage", "settle_outcomes"]


async def record_usage(conn: Connection, node_key: NodeKey, report: UsageReportMessage) -> None:
    """Durable before the worker's ack; a re-sent report is the same row (never a second one)."""
    await conn.execute(
        """INSERT INTO usage_reports (lease, node_key, seq, period_start, period_end, gpu_seconds, signature, simulated)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (lease, node_key, seq) DO NOTHING""",
        report.lease,
        str(node_key),
        report.seq,
        report.period_start,
        report.period_end,
        report.gpu_seconds,
        report.signature,
        report.simulated,
    )


async def pending_usage(conn: Connection, node_key: NodeKey | None = None, limit: int = 500) -> list[SignedUsage]:
    rows = await conn.fetch(
        "SELECT * FROM usage_reports WHERE status = 'pending' AND ($1::text IS NULL OR node_key = $1) "
        "ORDER BY lease, node_key, seq LIMIT $2",
        None if node_key is None else str(node_key),
        limit,
    )
    return [
        SignedUsage(
            Pubkey.from_string(r["lease"]),
            Pubkey.from_string(r["node_key"]),
            UsageReport(int(r["seq"]), r["period_start"], r["period_end"], int(r["gpu_seconds"])),
            bytes(Signature.from_string(r["signature"])),
        )
        for r in rows
    ]


async def refused_usage(conn: Connection, batch: list[SignedUsage]) -> set[tuple[Pubkey, NodeKey, int]]:
    """(lease, node key, seq) of the refused reports of the batch's shares: later ones need not wait for them."""
    shares = {(str(u.lease), str(u.node_key)) for u in batch}
    if not shares:
        return set()
    leases, nodes = zip(*shares, strict=True)
    rows = await conn.fetch(
        "SELECT lease, node_key, seq FROM usage_reports WHERE status = 'refused' "
        "AND (lease, node_key) IN (SELECT * FROM unnest($1::text[], $2::text[]))",
        list(leases),
        list(nodes),
    )
    return {(Pubkey.from_string(r["lease"]), Pubkey.from_string(r["node_key"]), int(r["seq"])) for r in rows}


async def pending_count(conn: Connection, lease: str, node_key: NodeKey | None = None) -> int:
    """The lease's reports still pending (of one node, or of all)."""
    return await conn.fetchval(
        "SELECT count(*) FROM usage_reports WHERE status = 'pending' AND lease = $1 "
        "AND ($2::text IS NULL OR node_key = $2)",
        lease,
        None if node_key is None else str(node_key),
    )


async def settle_outcomes(conn: Connection, outcomes: list[Outcome]) -> None:
    """Records what settlement decided; reports still waiting stay pending."""
    for o in outcomes:
        if o.status.value == "waiting":
            continue
        await conn.execute(
            "UPDATE usage_reports SET status = $4, reason = $5, settled_by = $6 "
            "WHERE lease = $1 AND node_key = $2 AND seq = $3",
            str(o.usage.lease),
            str(o.usage.node_key),
            o.usage.report.seq,
            o.status.value,
            o.reason,
            str(o.signature) if o.signature else None,
        )
