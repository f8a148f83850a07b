"""What the explorer's network page, settlements feed, search, CSV export and transaction page read
from the ledger (coordinator.web.feed).

A settlement's place in the feed is its UsageSettled event's ledger id (events.id): ids follow chain
order, and the indexer's one writer at a time (write_batch's advisory lock) commits them in that
order, so "every settlement after id N" never skips a row that commits later with a smaller id.
That id pages the feed (keyset: a page stays the same while new rows land on top) and feeds the
live updates."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import asyncpg

from coordinator.db.connection import Connection

__all__ = [
    "SETTLED",
    "Period",
    "latest_settlement_id",
    "matches",
    "network_nodes",
    "settlement_rows",
    "settlement_totals",
    "settlements_after",
    "settlements_before",
    "transaction",
    "transaction_events",
]

SETTLED = "UsageSettled"  # the event each settlements row is derived from, one for one

# A settlement with its event's ledger id (`id`): the feed's order and cursor; and its node's key.
_FEED = f"""SELECT e.id, s.*, n.node_key
            FROM events e JOIN settlements s USING (signature, event_index) LEFT JOIN nodes n ON n.node = s.node
            WHERE e.name = '{SETTLED}'"""


async def network_nodes(conn: Connection) -> list[asyncpg.Record]:
    """Every registered node's offer and state as the chain has it (model, GPUs, region, price, GPUs
    leased, standing, verification)."""
    return await conn.fetch(
        """SELECT node, node_key, provider, gpu_model, gpu_count, vram_gb, region, price_per_gpu_hour,
                  gpus_leased, jailed, draining, verification_tier, verified_until
           FROM nodes WHERE registered ORDER BY gpu_model, region, node"""
    )


async def settlement_totals(conn: Connection) -> asyncpg.Record:
    """How many settlements the ledger holds, and what they paid for (GPU-seconds, amount)."""
    row = await conn.fetchrow(
        "SELECT count(*) AS count, coalesce(sum(gpu_seconds), 0) AS gpu_seconds,"
        " coalesce(sum(amount), 0) AS amount FROM settlements"
    )
    assert row is not None  # an aggregate always answers one row
    return row


async def settlements_before(conn: Connection, before: int | None, limit: int) -> list[asyncpg.Record]:
    """A page of the feed, newest first: the `limit` + 1 settlements before event id `before` (None:
    the newest), so the caller knows whether an older page follows."""
    sql = _FEED + (" AND e.id < $2" if before is not None else "") + " ORDER BY e.id DESC LIMIT $1"
    return await conn.fetch(sql, limit + 1, *([before] if before is not None else []))


async def settlements_after(conn: Connection, after: int, limit: int) -> list[asyncpg.Record]:
    """The `limit` + 1 settlements right after event id `after`, oldest first: the page before a
    feed page (reversed by the caller), and what the live feed sends."""
    return await conn.fetch(_FEED + " AND e.id > $1 ORDER BY e.id LIMIT $2", after, limit + 1)


async def latest_settlement_id(conn: Connection) -> int:
    """The newest settlement's event id (0: none yet)."""
    return int(await conn.fetchval("SELECT coalesce(max(id), 0) FROM events WHERE name = $1", SETTLED))


@dataclass(frozen=True)
class Period:
    """Which settlements an export takes: a provider's, a lease's, within slots and/or block times
    (unix seconds), every bound inclusive; None: no bound."""

    provider: str | None = None
    lease: str | None = None
    from_slot: int | None = None
    to_slot: int | None = None
    from_time: int | None = None
    to_time: int | None = None

    def where(self) -> tuple[str, list[Any]]:
        conditions, args = [], []
        for column, op, value in (
            ("s.provider", "=", self.provider),
            ("s.lease", "=", self.lease),
            ("s.slot", ">=", self.from_slot),
            ("s.slot", "<=", self.to_slot),
            ("s.block_time", ">=", self.from_time),
            ("s.block_time", "<=", self.to_time),
        ):
            if value is not None:
                args.append(value)
                conditions.append(f"{column} {op} ${len(args)}")
        return "".join(f" AND {c}" for c in conditions), args


async def settlement_rows(conn: Connection, period: Period, batch: int = 1000) -> AsyncIterator[asyncpg.Record]:
    """The settlements of `period` in chain order, read through a server-side cursor `batch` rows at
    a time (the caller holds `conn` in a transaction): an export of any size in bounded memory."""
    where, args = period.where()
    async for row in conn.cursor(_FEED + where + " ORDER BY e.id", *args, prefetch=batch):
        yield row


async def matches(conn: Connection, address: str) -> list[tuple[str, str]]:
    """What an address is in the ledger, as (kind, the key of its page): a lease, a lease's client, a
    node (by its account or its node key), a provider, or a provider's authority (its wallet)."""
    rows = await conn.fetch(
        """SELECT 'lease' AS kind, lease AS key FROM leases WHERE lease = $1
           UNION ALL SELECT 'client', lease FROM leases WHERE client = $1
           UNION ALL SELECT 'node', node FROM nodes WHERE node = $1
           UNION ALL SELECT 'node_key', node FROM nodes WHERE node_key = $1
           UNION ALL SELECT 'provider', provider FROM providers WHERE provider = $1
           UNION ALL SELECT 'authority', provider FROM providers WHERE authority = $1
           LIMIT 101""",
        address,
    )
    return [(r["kind"], r["key"]) for r in rows]


async def transaction(conn: Connection, signature: str) -> asyncpg.Record | None:
    """The indexed transaction (slot, block time, how many events), or None."""
    return await conn.fetchrow(
        "SELECT signature, slot, block_time, failed, event_count FROM transactions WHERE signature = $1", signature
    )


async def transaction_events(conn: Connection, signature: str) -> list[asyncpg.Record]:
    """The transaction's gpunet events as the indexer decoded them, in log order."""
    return await conn.fetch(
        "SELECT event_index, name, data FROM events WHERE signature = $1 ORDER BY event_index", signature
    )
