"""The chain's record in PostgreSQL (migration 0001 on): transactions, events, the accounts they
project (providers, nodes, leases, assignments) and the histories (stake changes, settlements,
slashes), and the indexer's own state. The indexer writes it (`write_batch`: a batch's events,
derived rows and the cursor in one database transaction, so a crash at any point leaves either
all of a batch or none of it); the read API and the audit read it through the functions below."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import asyncpg

from coordinator.db.connection import Connection
from coordinator.indexer.decode import DecodedTransaction
from coordinator.indexer.projection import TABLE_KEYS, IndexedEvent, Ledger

__all__ = [
    "LEDGER_TABLES",
    "count_reconnect",
    "indexed_events",
    "indexer_state",
    "known_signatures",
    "lease_assignments",
    "load_rows",
    "mark_synced",
    "page",
    "plain_row",
    "row",
    "rows",
    "set_genesis",
    "write_batch",
]

_COLUMNS = {
    "providers": (
        "provider",
        "authority",
        "staked",
        "bonded",
        "unbonding",
        "unbonding_ends_at",
        "slashed",
        "earned",
        "node_count",
        "signature",
    ),
    "nodes": (
        "node",
        "provider",
        "node_key",
        "gpu_model",
        "gpu_count",
        "vram_gb",
        "region",
        "price_per_gpu_hour",
        "inventory_hash",
        "bonded_stake",
        "gpus_leased",
        "jailed",
        "jail_ends_at",
        "registered",
        "draining",
        "verification_tier",
        "verified_until",
        "verification_evidence",
        "signature",
    ),
    "leases": (
        "lease",
        "client",
        "lease_id",
        "gpu_model",
        "min_vram_gb",
        "gpu_count",
        "region",
        "max_price_per_gpu_hour",
        "duration_seconds",
        "status",
        "started_at",
        "deposited",
        "paid",
        "fees",
        "fees_swept",
        "refunded",
        "donations",
        "nodes",
        "downtime_tolerance_seconds",
        "signature",
    ),
    "assignments": (
        "lease",
        "node",
        "node_key",
        "provider",
        "gpus",
        "price_per_gpu_hour",
        "epoch",
        "assigned_at",
        "settled_until",
        "receipt_gpu_seconds",
        "gpu_seconds",
        "active",
        "assigned_by",
        "signature",
    ),
    "stake_changes": ("signature", "event_index", "provider", "kind", "amount", "staked", "unbonding", "slot"),
    "settlements": (
        "signature",
        "event_index",
        "lease",
        "node",
        "provider",
        "epoch",
        "receipt_gpu_seconds",
        "through",
        "gpu_seconds",
        "amount",
        "payout",
        "fee",
        "escrow_left",
        "slot",
        "block_time",
    ),
    "slashes": (
        "signature",
        "event_index",
        "provider",
        "node",
        "attester",
        "fault",
        "evidence_hash",
        "amount",
        "to_treasury",
        "to_client",
        "lease",
        "jail_ends_at",
        "slot",
        "block_time",
    ),
}


def _insert_sql(table: str) -> str:
    cols = _COLUMNS[table]
    sql = f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join(f'${i + 1}' for i in range(len(cols)))})"
    if table in TABLE_KEYS:
        keys = TABLE_KEYS[table]
        sql += f" ON CONFLICT ({', '.join(keys)}) DO UPDATE SET " + ", ".join(
            f"{c} = EXCLUDED.{c}" for c in cols if c not in keys
        )
    return sql


_SQL = {table: _insert_sql(table) for table in _COLUMNS}
_WRITER_LOCK = 0x6770756E6574_01


def plain_row(record: asyncpg.Record | dict[str, Any]) -> dict[str, Any]:
    """A row with numeric(20, 0) amounts as ints and arrays as lists."""
    return {
        k: int(v) if isinstance(v, Decimal) else list(v) if isinstance(v, tuple) else v for k, v in dict(record).items()
    }


async def load_rows(conn: Connection, ledger: Ledger, events: list[IndexedEvent]) -> None:
    """Preloads into `ledger` every derived row the events may change."""
    keys: dict[str, set[str]] = {"providers": set(), "nodes": set(), "leases": set()}
    for e in events:
        d = e.data
        for field, table in (("provider", "providers"), ("node", "nodes"), ("from_node", "nodes"), ("lease", "leases")):
            if isinstance(d.get(field), str):
                keys[table].add(d[field])
        for a in d.get("assignments") or ([d["assignment"]] if "assignment" in d else []):
            keys["nodes"].add(a["node"])
    if keys["leases"]:
        # A close or a settlement touches the lease's assignments and, through them, its nodes.
        for r in await conn.fetch("SELECT * FROM assignments WHERE lease = ANY($1::text[])", list(keys["leases"])):
            row = plain_row(r)
            ledger.assignments[(row["lease"], row["node"])] = row
            keys["nodes"].add(row["node"])
    for table, wanted in keys.items():
        if wanted:
            key = TABLE_KEYS[table][0]
            for r in await conn.fetch(f"SELECT * FROM {table} WHERE {key} = ANY($1::text[])", list(wanted)):
                getattr(ledger, table)[r[key]] = plain_row(r)


def _args(table: str, row: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(row[c] for c in _COLUMNS[table])


async def write_batch(conn: Connection, txs: list[DecodedTransaction]) -> int:
    """Writes the transactions not yet indexed (oldest first) and moves the cursor past the
    last one; the number of events written. Runs in one database transaction."""
    if not txs:
        return 0
    async with conn.transaction():
        # One writer at a time per database, so "not yet indexed" below cannot race.
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _WRITER_LOCK)
        seen = {
            r["signature"]
            for r in await conn.fetch(
                "SELECT signature FROM transactions WHERE signature = ANY($1::text[])", [t.signature for t in txs]
            )
        }
        fresh = [t for t in txs if t.signature not in seen]
        # COPY keeps the rows' order, so the serial ids (transactions.seq, events.id) follow chain order.
        await conn.copy_records_to_table(
            "transactions",
            columns=("signature", "slot", "block_time", "failed", "event_count", "lines_skipped"),
            records=[(t.signature, t.slot, t.block_time, t.failed, len(t.events), t.lines_skipped) for t in fresh],
        )
        events = [
            IndexedEvent(t.signature, i, t.slot, t.block_time, name, data)
            for t in fresh
            for i, (name, data) in enumerate(t.events)
        ]
        await conn.copy_records_to_table(
            "events",
            columns=("signature", "event_index", "slot", "block_time", "name", "data", "lease", "provider"),
            records=[
                (
                    e.signature,
                    e.event_index,
                    e.slot,
                    e.block_time,
                    e.name,
                    json.dumps(e.data),
                    e.data.get("lease"),
                    e.data.get("provider"),
                )
                for e in events
            ],
        )

        ledger = Ledger()
        await load_rows(conn, ledger, events)
        for e in events:
            ledger.apply(e)
        for table in TABLE_KEYS:
            rows = [getattr(ledger, t)[k] for t, k in ledger.dirty if t == table]
            if rows:
                await conn.executemany(_SQL[table], [_args(table, r) for r in rows])
        for table in ("stake_changes", "settlements", "slashes"):
            if rows := getattr(ledger, table):
                await conn.copy_records_to_table(
                    table, columns=_COLUMNS[table], records=[_args(table, r) for r in rows]
                )

        if not fresh:
            return 0  # another writer got there first; its cursor is at least as far
        last = txs[-1]
        await conn.execute(
            "UPDATE indexer_state SET cursor_signature = $1, cursor_slot = $2,"
            " events_indexed = events_indexed + $3, transactions_indexed = transactions_indexed + $4,"
            " failed_transactions_skipped = failed_transactions_skipped + $5, lines_skipped = lines_skipped + $6",
            last.signature,
            last.slot,
            len(events),
            len(fresh),
            sum(t.failed for t in fresh),
            sum(t.lines_skipped for t in fresh),
        )
    return len(events)


# The tables the read API and the audit may select from, and the columns they may select by.
LEDGER_TABLES = {
    "providers": {"provider", "authority"},
    "nodes": {"node", "provider", "node_key"},
    "leases": {"lease", "client"},
    "assignments": {"lease", "node", "provider"},
    "settlements": {"lease", "node", "provider"},
    "slashes": {"provider", "node", "lease"},
    "stake_changes": {"provider"},
    "events": {"lease", "provider"},
}


def _checked(table: str, column: str) -> None:
    if column not in LEDGER_TABLES.get(table, ()):
        raise ValueError(f"{table}.{column} is not a ledger key")  # a programming error, never user input


async def row(conn: Connection, table: str, column: str, value: str) -> asyncpg.Record | None:
    """The row of `table` whose `column` is `value` (a key column)."""
    _checked(table, column)
    return await conn.fetchrow(f"SELECT * FROM {table} WHERE {column} = $1", value)


async def rows(conn: Connection, table: str, column: str, value: str) -> list[asyncpg.Record]:
    """Every row of `table` whose `column` is `value`."""
    _checked(table, column)
    return await conn.fetch(f"SELECT * FROM {table} WHERE {column} = $1", value)


# How a page of each table is ordered: accounts by address, histories in chain order.
_CHAIN_ORDER = "(SELECT seq FROM transactions t WHERE t.signature = r.signature), r.event_index"
_PAGE_ORDER = {
    "providers": "r.provider",
    "nodes": "r.node",
    "leases": "r.lease",
    "settlements": _CHAIN_ORDER,
    "slashes": _CHAIN_ORDER,
    "stake_changes": _CHAIN_ORDER,
    "events": "r.id",
    # a lease's as its item lists them (the active ones first), so that its pages go on from there
    "assignments": "r.lease, r.active DESC, r.node",
}


async def page(
    conn: Connection, table: str, filters: list[tuple[str, str, Any]], limit: int, offset: int
) -> list[asyncpg.Record]:
    """A page of `table` under `filters` ((column, operator, value), all of them): `limit` + 1 rows,
    so the caller knows whether another page follows."""
    where = [f"r.{column} {op} ${i}" for i, (column, op, _) in enumerate(filters, 1)]
    sql = f"SELECT r.* FROM {table} r" + (" WHERE " + " AND ".join(where) if where else "")
    sql += f" ORDER BY {_PAGE_ORDER[table]} LIMIT {int(limit) + 1} OFFSET {int(offset)}"
    return await conn.fetch(sql, *(value for _, _, value in filters))


async def lease_assignments(conn: Connection, lease: str, limit: int) -> list[asyncpg.Record]:
    """A lease's first `limit` + 1 assignments, the active ones first (as /assignments?lease= pages them)."""
    return await page(conn, "assignments", [("lease", "=", lease)], limit, 0)


async def indexed_events(conn: Connection, column: str, subject: str) -> list[asyncpg.Record]:
    """The events of a lease or provider (`column`), in the order they were indexed (`id`)."""
    _checked("events", column)
    return await conn.fetch(
        f"SELECT id, signature, event_index, slot, block_time, name, data FROM events WHERE {column} = $1 ORDER BY id",
        subject,
    )


async def known_signatures(conn: Connection, signatures: list[str]) -> set[str]:
    """Which of these transactions are indexed."""
    found = await conn.fetch("SELECT signature FROM transactions WHERE signature = ANY($1::text[])", signatures)
    return {r["signature"] for r in found}


async def indexer_state(conn: Connection) -> asyncpg.Record:
    """The indexer's one state row (from the first migration on), with `synced_age`: seconds since
    it last proved itself caught up with the chain head."""
    state = await conn.fetchrow("SELECT *, extract(epoch FROM now() - synced_at) AS synced_age FROM indexer_state")
    assert state is not None, "indexer_state has its one row from the first migration on"
    return state


async def set_genesis(conn: Connection, genesis: str) -> None:
    await conn.execute("UPDATE indexer_state SET genesis_hash = $1", genesis)


async def mark_synced(conn: Connection, head: int) -> None:
    """Every program transaction up to slot `head` is indexed (one more backfill pass done)."""
    await conn.execute(
        "UPDATE indexer_state SET synced_slot = greatest(coalesce(synced_slot, 0), $1),"
        " synced_at = now(), backfill_runs = backfill_runs + 1",
        head,
    )


async def count_reconnect(conn: Connection) -> None:
    await conn.execute("UPDATE indexer_state SET reconnects = reconnects + 1")
