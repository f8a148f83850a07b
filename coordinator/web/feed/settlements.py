"""The settlements feed (/web/settlements): every settlement, newest first, a page at a time.

Pages are keyed by the settlement event's ledger id (coordinator.db.feed), not by offset: the feed
grows at the top while it is read, and an offset would then show a row twice or skip one as the
reader moves to older pages. `before=ID` is the page of older rows, `after=ID` the page of newer
ones; the newest page (neither) updates itself live (live.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from coordinator.api.params import Param
from coordinator.db import feed as ledger
from coordinator.db.connection import Connection
from coordinator.web.feed.pages import settlements

__all__ = ["FEED_PAGE", "FeedPage", "feed_page"]

FEED_PAGE = (
    Param("limit", "integer", minimum=1, maximum=500, default=50, description="rows per page"),
    Param("before", "integer", minimum=1, description="rows older than this settlement id"),
    Param("after", "integer", minimum=0, description="rows newer than this settlement id"),
)


@dataclass(frozen=True)
class FeedPage:
    rows: list[dict[str, Any]]  # newest first, each with its `id`
    limit: int
    older: int | None  # the `before` of the next older page (None: this is the oldest)
    newer: int | None  # the `after` of the next newer page (None: this is the newest)
    live_after: int  # the newest settlement id the page shows: where the live feed takes over
    live: bool  # the newest page: new settlements appear on top as they land


async def feed_page(conn: Connection, limit: int, before: int | None, after: int | None) -> FeedPage:
    if after is not None:
        found = await ledger.settlements_after(conn, after, limit)
        rows = await settlements(conn, reversed(found[:limit]))
        has_newer, has_older = len(found) > limit, bool(rows) and await _older_exists(conn, rows[-1]["id"])
    else:
        found = await ledger.settlements_before(conn, before, limit)
        rows = await settlements(conn, found[:limit])
        has_older = len(found) > limit
        has_newer = before is not None and bool(await ledger.settlements_after(conn, rows[0]["id"] if rows else 0, 0))
    return FeedPage(
        rows=rows,
        limit=limit,
        older=rows[-1]["id"] if has_older and rows else None,
        newer=rows[0]["id"] if has_newer and rows else None,
        live_after=rows[0]["id"] if rows else after or 0,
        live=before is None and (after is None or not has_newer),
    )


async def _older_exists(conn: Connection, id_: int) -> bool:
    return bool(await ledger.settlements_before(conn, id_, 0))
