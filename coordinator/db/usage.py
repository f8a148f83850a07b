"""Usage receipts as the nodes signed them (migration 0012): the newest of each share, recorded
before the worker's ack, then settled, refused or left pending by the settlement loop."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from solders.pubkey import Pubkey
from solders.signature import Signature

from coordinator.db.connection import Connection
from coordinator.keys import NodeKey
from coordinator.settlement import Outcome, SignedUsage
from gpunet.protocol import UsageReceiptMessage
from gpunet.usage import Receipt

__all__ = [
    "PendingReceipt",
    "pending_count",
    "pending_receipts",
    "pending_summary",
    "record_receipt",
    "settle_outcomes",
]


_SAME_CLAIM = "excluded.gpu_seconds = usage_receipts.gpu_seconds AND excluded.through = usage_receipts.through"


async def record_receipt(conn: Connection, node_key: NodeKey, message: UsageReceiptMessage) -> bool:
    """Durable before the worker's ack, and only of a share the node holds or held: the ledger's
    assignment of the node to the lease has the receipt's epoch, active or not (a share that just
    moved away keeps its row and epoch, so the receipts of the time it held it are still taken and
    paid); False, and nothing stored, for any other (a lease the node was never placed on, an epoch
    not its own). A receipt replaces the share's stored one when it is newer (runs through a later
    instant), or when it is the node's final one (its billing ended, maybe before receipts it sent
    earlier: that one is the one to settle); a final one is replaced by nothing. A re-sent receipt
    changes nothing, and a final one claiming what the stored one claims (the worker signs one at
    the lease's end, then the final one at its cancel) keeps what settlement decided of it: that
    claim is settled already, and pending again it would meet a lease finalized meanwhile."""
    held = await conn.fetchval(
        "SELECT EXISTS (SELECT 1 FROM assignments WHERE lease = $1 AND node_key = $2 AND epoch = $3)",
        message.lease,
        str(node_key),
        message.epoch,
    )
    if not held:
        return False
    await conn.execute(
        f"""INSERT INTO usage_receipts (lease, node_key, epoch, gpu_seconds, through, final, signature, simulated)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
           ON CONFLICT (lease, node_key, epoch) DO UPDATE
           SET gpu_seconds = excluded.gpu_seconds, through = excluded.through, final = excluded.final,
               signature = excluded.signature, simulated = excluded.simulated,
               status = CASE WHEN {_SAME_CLAIM} THEN usage_receipts.status ELSE 'pending' END,
               reason = CASE WHEN {_SAME_CLAIM} THEN usage_receipts.reason ELSE '' END,
               received_at = clock_timestamp()
           WHERE NOT usage_receipts.final AND (excluded.final OR excluded.through > usage_receipts.through)""",
        message.lease,
        str(node_key),
        message.epoch,
        message.gpu_seconds,
        message.through,
        message.final,
        message.signature,
        message.simulated,
    )
    return True


@dataclass(frozen=True)
class PendingReceipt:
    """A share's newest receipt not yet settled, with what the ledger (the indexer) knows of the
    share and its lease, to decide whether it is worth a transaction now."""

    usage: SignedUsage
    price_per_gpu_hour: int | None  # None: the share is not indexed (only receipts of indexed shares are read)
    settled_until: int | None
    receipt_gpu_seconds: int | None  # of the last settled receipt
    paid_gpu_seconds: int | None
    escrow_left: int | None


# A receipt joined to the share it is of: one the ledger has no share for (stored before the gateway
# checked, for a lease the node was never on or an epoch not its own) is never read, so it neither
# takes a place in settlement's window nor counts as pending anywhere.
_OF_A_SHARE = "JOIN assignments a ON a.lease = r.lease AND a.node_key = r.node_key AND a.epoch = r.epoch"


async def pending_receipts(conn: Connection, node_key: NodeKey | None = None, limit: int = 500) -> list[PendingReceipt]:
    """Up to `limit` pending receipts (of one node, or of all), taken in turns across the nodes
    (every node's first, then every node's second, ...): no node's receipts, however many, fill the
    window and keep the others' from being settled."""
    rows = await conn.fetch(
        f"""SELECT * FROM (
              SELECT r.*, a.price_per_gpu_hour, a.settled_until, a.receipt_gpu_seconds AS settled_receipt,
                     a.gpu_seconds AS paid_gpu_seconds,
                     l.deposited - l.paid - l.fees - l.refunded AS escrow_left,
                     row_number() OVER (PARTITION BY r.node_key ORDER BY r.lease, r.epoch) AS turn
              FROM usage_receipts r {_OF_A_SHARE}
              LEFT JOIN leases l ON l.lease = r.lease
              WHERE r.status = 'pending' AND ($1::text IS NULL OR r.node_key = $1)) p
            ORDER BY turn, lease, node_key, epoch LIMIT $2""",
        None if node_key is None else str(node_key),
        limit,
    )

    def maybe(value: Any) -> int | None:
        return None if value is None else int(value)

    return [
        PendingReceipt(
            SignedUsage(
                Pubkey.from_string(r["lease"]),
                Pubkey.from_string(r["node_key"]),
                Receipt(int(r["epoch"]), int(r["gpu_seconds"]), r["through"]),
                bytes(Signature.from_string(r["signature"])),
            ),
            maybe(r["price_per_gpu_hour"]),
            maybe(r["settled_until"]),
            maybe(r["settled_receipt"]),
            maybe(r["paid_gpu_seconds"]),
            maybe(r["escrow_left"]),
        )
        for r in rows
    ]


async def pending_summary(conn: Connection) -> tuple[int, int | None]:
    """The receipts pending settlement, and the oldest instant their shares are paid up to (None:
    none pending, or none the ledger knows the share of yet): the settlement queue and its lag."""
    row = await conn.fetchrow(
        f"""SELECT count(*) AS pending, min(a.settled_until) AS oldest FROM usage_receipts r {_OF_A_SHARE}
            WHERE r.status = 'pending'"""
    )
    assert row is not None
    return int(row["pending"]), None if row["oldest"] is None else int(row["oldest"])


async def pending_count(conn: Connection, lease: str, node_key: NodeKey | None = None) -> int:
    """The lease's shares whose newest receipt is still pending (of one node, or of all)."""
    return await conn.fetchval(
        f"SELECT count(*) FROM usage_receipts r {_OF_A_SHARE} WHERE r.status = 'pending' AND r.lease = $1 "
        "AND ($2::text IS NULL OR r.node_key = $2)",
        lease,
        None if node_key is None else str(node_key),
    )


async def settle_outcomes(conn: Connection, outcomes: list[Outcome]) -> None:
    """Records what settlement decided of each receipt (unless a newer one came meanwhile); receipts
    still waiting stay pending."""
    for o in outcomes:
        if o.status.value == "waiting":
            continue
        r = o.usage.receipt
        await conn.execute(
            "UPDATE usage_receipts SET status = $6, reason = $7, settled_by = coalesce($8, settled_by) "
            "WHERE lease = $1 AND node_key = $2 AND epoch = $3 AND gpu_seconds = $4 AND through = $5",
            str(o.usage.lease),
            str(o.usage.node_key),
            r.epoch,
            r.gpu_seconds,
            r.through,
            o.status.value,
            o.reason,
            str(o.signature) if o.signature else None,
        )
