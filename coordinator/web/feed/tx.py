"""A transaction's page (/web/tx/{signature}): its gpunet events as the indexer decoded them from the
chain's logs (the ledger's events table), every amount in IO with its base units, every address
linking its page; and /web/tx/{signature}/raw, the node's own record of it (getTransaction), for
whoever would rather decode the logs themselves."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from coordinator.db import feed as ledger
from coordinator.db.connection import Connection

__all__ = ["AMOUNT_FIELDS", "LINKED_FIELDS", "Transaction", "transaction"]

# The events' u64 fields that are IO in base units (the IDL types them all u64, GPU-seconds and ids too).
AMOUNT_FIELDS = frozenset(
    {
        "amount",
        "bonded_stake",
        "deposit",
        "deposited",
        "donations",
        "escrow_left",
        "fee",
        "fees",
        "fees_swept",
        "fees_to_treasury",
        "from_delegated",
        "from_own",
        "from_rewards",
        "funded",
        "income",
        "max_price_per_gpu_hour",
        "min_stake_per_gpu",
        "paid",
        "payout",
        "price_per_gpu_hour",
        "refund",
        "refunded",
        "released_stake",
        "retained",
        "returned",
        "staked",
        "to_client",
        "to_delegators",
        "to_pool",
        "to_supplier",
        "to_treasury",
        "total",
        "unbonding",
    }
)
# Address fields with a page of their own.
LINKED_FIELDS = {
    "lease": "leases",
    "node": "nodes",
    "from_node": "nodes",
    "node_key": "nodes",
    "provider": "providers",
}


@dataclass(frozen=True)
class Event:
    index: int
    name: str
    data: dict[str, Any]


@dataclass(frozen=True)
class Transaction:
    signature: str
    slot: int
    block_time: int | None
    events: list[Event]


async def transaction(conn: Connection, signature: str) -> Transaction | None:
    """The indexed transaction with its events; None if the ledger does not hold it."""
    tx = await ledger.transaction(conn, signature)
    if tx is None:
        return None
    events = [
        Event(r["event_index"], r["name"], json.loads(r["data"]) if isinstance(r["data"], str) else r["data"])
        for r in await ledger.transaction_events(conn, signature)
    ]
    return Transaction(signature, tx["slot"], tx["block_time"], events)
