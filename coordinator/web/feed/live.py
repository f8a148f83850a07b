"""The live settlements feed: /web/settlements/live, server-sent events, one per settlement the
indexer writes, each carrying the feed table's row for it.

Why polling, and one poller: the indexer's ledger is the source (what the page shows is what the
indexer wrote, never what the coordinator merely sent). One task per process asks it for settlements
after the last id it saw every 200 ms, but only while a page listens, and fans each new row out to
every open page: the database sees one cheap indexed query (events (name, id)) per 200 ms however many
pages are open. LISTEN/NOTIFY would save that query but needs the indexer's write path to notify (and a
connection held outside the pool per process); polling by id needs no change to the indexer, works the
same on a replica that does not lead (all read one database), and loses nothing across a NOTIFY's
absence. A page that reconnects sends Last-Event-ID (EventSource does) and is caught up from the
ledger first."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import asyncpg

from coordinator.db import feed as ledger
from coordinator.web.feed.pages import settlement_row_html, settlements
from gpunet.logs import get_logger

__all__ = ["CATCH_UP", "SettlementHub", "stream"]

log = get_logger("gpunet.coordinator.web.live")

POLL_SECONDS = 0.2
KEEPALIVE_SECONDS = 15.0  # a comment line, so a proxy keeps the stream open and a gone page is noticed
# A stream ends after this long and the page reconnects (EventSource does, in a second, sending the last
# id it saw, and is caught up): the API server waits for open responses when it stops, and a stream
# that never ended would hold the coordinator's shutdown for as long as a page stays open.
STREAM_SECONDS = 30.0
CATCH_UP = 500  # the most rows a (re)connecting page is sent; further behind, it is told to reload
_BATCH = 500
_QUEUE = 1000  # rows a page may fall behind before it is dropped (it reconnects and catches up)


class SettlementHub:
    """One poller of the ledger's settlements for all the pages listening in this process."""

    def __init__(self, pool: asyncpg.Pool, poll_seconds: float = POLL_SECONDS) -> None:
        self.pool, self.poll_seconds = pool, poll_seconds
        self.pages: set[asyncio.Queue[dict[str, Any] | None]] = set()
        self.cursor = 0  # the newest settlement id sent to the pages
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    @contextlib.asynccontextmanager
    async def listen(self) -> AsyncIterator[asyncio.Queue[dict[str, Any] | None]]:
        """A queue of every settlement written from now on (None: the page fell behind). The poller's
        cursor is read before the queue is handed out, so a page that then catches up from the ledger
        misses nothing between the two: what the ledger has up to the cursor, it reads; the rest
        comes through the queue."""
        queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue(maxsize=_QUEUE)
        async with self._lock:
            if self._task is None or self._task.done():
                async with self.pool.acquire() as conn:
                    self.cursor = await ledger.latest_settlement_id(conn)
                self._task = asyncio.create_task(self._poll(), name="web.settlements.live")
            self.pages.add(queue)
        try:
            yield queue
        finally:
            self.pages.discard(queue)
            if not self.pages and self._task is not None:
                self._task.cancel()  # nobody listens: no query until a page opens again
                self._task = None

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.poll_seconds)
            try:
                async with self.pool.acquire() as conn:
                    rows = await settlements(conn, await ledger.settlements_after(conn, self.cursor, _BATCH))
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as e:
                log.warning("web.live.poll_failed", error=str(e))  # the database is back by the next poll
                continue
            for row in rows:
                self.cursor = row["id"]
                for queue in list(self.pages):
                    try:
                        queue.put_nowait(row)
                    except asyncio.QueueFull:
                        self.pages.discard(queue)
                        with contextlib.suppress(asyncio.QueueFull):
                            queue.get_nowait()
                            queue.put_nowait(None)


def _event(row: dict[str, Any]) -> str:
    data = json.dumps({"id": row["id"], "signature": row["signature"], "html": settlement_row_html(row)})
    return f"id: {row['id']}\nevent: settlement\ndata: {data}\n\n"


async def stream(hub: SettlementHub, pool: asyncpg.Pool, after: int) -> AsyncIterator[str]:
    """The events for a page that shows every settlement up to id `after`: first the ones it missed
    (from the ledger; more than CATCH_UP and it is told to reload), then each new one as it lands."""
    yield "retry: 1000\n\n"
    async with hub.listen() as queue:
        async with pool.acquire() as conn:
            missed = await ledger.settlements_after(conn, after, CATCH_UP)
            if len(missed) > CATCH_UP:
                yield "event: reload\ndata: {}\n\n"
                return
            rows = await settlements(conn, missed)
        sent = after
        for row in rows:
            sent = row["id"]
            yield _event(row)
        ends = asyncio.get_running_loop().time() + STREAM_SECONDS
        while (left := ends - asyncio.get_running_loop().time()) > 0:
            try:
                new = await asyncio.wait_for(queue.get(), min(KEEPALIVE_SECONDS, left))
            except TimeoutError:
                yield ": keepalive\n\n"
                continue
            if new is None:
                return  # fell behind: the page reconnects with Last-Event-ID and catches up
            if new["id"] > sent:  # the catch-up may have sent it already
                sent = new["id"]
                yield _event(new)
