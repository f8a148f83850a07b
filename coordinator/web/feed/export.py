"""CSV export of settlements (/web/settlements.csv?provider=&lease=&from=&to=), in chain order, for
a spreadsheet or an accountant: amounts and GPU-seconds as integers in base units (never a float or a
rounded IO figure), a header row, streamed from a server-side cursor however large the range.

`from` and `to` are each either a slot (digits only) or a UTC date or time in ISO 8601 (2026-12-01,
2026-12-01T13:00:00Z): a slot bounds the settlement's slot, a date or time its block time. Both
bounds are inclusive; a `to` date takes in the whole of that day. A settlement whose block time the
node did not give is in no date range (a slot range takes it)."""

from __future__ import annotations

import csv
import io
from collections.abc import AsyncIterator
from datetime import UTC, date, datetime, timedelta
from typing import Any

import asyncpg
from starlette.datastructures import QueryParams

from coordinator.api.params import BadRequest, Param, parse_query
from coordinator.db import feed as ledger
from coordinator.db.connection import Connection
from coordinator.web.feed.pages import settlements

__all__ = ["COLUMNS", "EXPORT_PARAMS", "csv_rows", "period"]

EXPORT_PARAMS = (
    Param("provider", "pubkey", description="only this provider's settlements"),
    Param("lease", "pubkey", description="only this lease's settlements"),
)
COLUMNS = (
    "signature",
    "event_index",
    "slot",
    "block_time",
    "time_utc",
    "lease",
    "node",
    "provider",
    "epoch",
    "receipt_gpu_seconds",
    "through",
    "gpu_seconds",
    "amount",
    "fee",
    "payout",
    "escrow_left",
    "simulated",  # the node's GPUs are simulated: no real GPU earned this
)
_MAX_SLOT = 2**63 - 1
_BOUNDS = ("from", "to")
_BATCH = 500  # rows read from the cursor, and lines sent, at a time


def _bound(name: str, raw: str, end: bool) -> tuple[str, int]:
    """("slot", n) or ("time", unix seconds) for one of from/to."""
    raw = raw.strip()
    if raw.isascii() and raw.isdigit():
        slot = int(raw)
        if slot > _MAX_SLOT:
            raise BadRequest(f"{name}: slot {raw[:30]} is out of range")
        return "slot", slot
    try:
        if len(raw) == 10:  # a date: from its first second, or (to) through its last
            day = date.fromisoformat(raw)
            start = datetime(day.year, day.month, day.day, tzinfo=UTC)
            return "time", int((start + timedelta(days=1)).timestamp()) - 1 if end else int(start.timestamp())
        moment = datetime.fromisoformat(raw)
    except ValueError:
        raise BadRequest(
            f"{name}: {raw[:40]!r} is neither a slot (digits) nor an ISO 8601 UTC date or time"
            " (2026-12-01 or 2026-12-01T13:00:00Z)"
        ) from None
    moment = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    return "time", int(moment.timestamp())


def period(query: QueryParams) -> ledger.Period:
    """The export's filter from its query string (BadRequest: what is wrong with it)."""
    items = query.multi_items()
    bounds = {k: v for k, v in items if k in _BOUNDS}
    for name in _BOUNDS:
        if sum(1 for k, _ in items if k == name) > 1:
            raise BadRequest(f"{name}: given more than once")
    values = parse_query(QueryParams([(k, v) for k, v in items if k not in _BOUNDS]), EXPORT_PARAMS)
    limits: dict[str, int] = {}
    for name, raw in bounds.items():
        kind, value = _bound(name, raw, end=name == "to")
        limits[f"{name}_{kind}"] = value
    return ledger.Period(provider=values.get("provider"), lease=values.get("lease"), **limits)


def _line(values: list[Any]) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator="\r\n").writerow(values)
    return out.getvalue()


async def csv_rows(pool: asyncpg.Pool, chosen: ledger.Period) -> AsyncIterator[str]:
    """The CSV, a header row then one line per settlement, a batch of lines at a time."""
    yield _line(list(COLUMNS))
    async with pool.acquire() as conn, conn.transaction(readonly=True):
        batch: list[asyncpg.Record] = []
        async for record in ledger.settlement_rows(conn, chosen, _BATCH):
            batch.append(record)
            if len(batch) == _BATCH:
                yield await _lines(conn, batch)
                batch = []
        if batch:
            yield await _lines(conn, batch)


async def _lines(conn: Connection, batch: list[asyncpg.Record]) -> str:
    lines = []
    for row in await settlements(conn, batch):
        bt = row["block_time"]
        row["time_utc"] = datetime.fromtimestamp(bt, UTC).isoformat()[:19] + "Z" if bt else ""
        row["simulated"] = "true" if row["simulated"] else "false"
        lines.append(_line([row[c] if row[c] is not None else "" for c in COLUMNS]))
    return "".join(lines)
