"""The coordinator's PostgreSQL: embedded by default or any server given by GPUNET_DATABASE_URL,
migrated at start-up."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg

from coordinator.db.embedded import EmbeddedPostgres
from coordinator.db.migrate import SchemaTooNew, migrate
from coordinator.settings import Settings

__all__ = ["SchemaTooNew", "connect_pool", "open_database", "ping"]

CLOSE_SECONDS = 10.0


async def connect_pool(url: str, **kwargs: Any) -> asyncpg.Pool:
    # A loop step may hold a connection while the leader records a decision on another (the fence):
    # room for every loop to do so at once, with the API and the worker sessions beside them.
    pool = await asyncpg.create_pool(url, min_size=1, max_size=16, **kwargs)
    assert pool is not None
    return pool


@asynccontextmanager
async def open_database(settings: Settings) -> AsyncIterator[asyncpg.Pool]:
    """A migrated connection pool; an embedded server is started first and stopped after."""
    embedded = None if settings.database_url else EmbeddedPostgres(settings.state_dir)
    url = settings.database_url or await embedded.start()  # type: ignore[union-attr]
    try:
        pool = await connect_pool(url)
        try:
            async with pool.acquire() as conn:
                await migrate(conn)
            yield pool
        finally:
            # A connection stuck in a query (a lock wait, a dead peer) must not keep a stopping
            # coordinator alive: close gracefully for a while, then cut the connections.
            try:
                await asyncio.wait_for(pool.close(), CLOSE_SECONDS)
            except TimeoutError:
                pool.terminate()
    finally:
        if embedded is not None:
            await embedded.stop()


async def ping(pool: asyncpg.Pool) -> None:
    """Raises unless the database answers a query now."""
    async with pool.acquire() as conn:
        await conn.fetchval("SELECT 1")
