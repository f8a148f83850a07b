"""The coordinator's PostgreSQL: embedded by default or any server given by GPUNET_DATABASE_URL,
migrated at start-up."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg

from coordinator.db.embedded import EmbeddedPostgres
from coordinator.db.migrate import SchemaTooNew, migrate
from coordinator.settings import Settings

__all__ = ["SchemaTooNew", "connect_pool", "open_database"]


async def connect_pool(url: str, **kwargs: object) -> asyncpg.Pool:
    pool = await asyncpg.create_pool(url, min_size=1, max_size=8, **kwargs)
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
            await pool.close()
    finally:
        if embedded is not None:
            await embedded.stop()
