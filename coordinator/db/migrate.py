"""Versioned SQL migrations (migrations/NNNN_name.sql), applied in one transaction and recorded."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

from coordinator.db.connection import Connection

__all__ = ["Migration", "SchemaTooNew", "migrate", "migrations"]

_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")
# Serialises concurrent start-ups against the same database (an arbitrary constant key).
_LOCK_KEY = 0x6770756E6574


class SchemaTooNew(Exception):
    """The database was migrated by a newer coordinator than this one."""


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def migrations() -> list[Migration]:
    """The migrations shipped with this code, by version."""
    found = []
    for entry in resources.files("coordinator.db").joinpath("migrations").iterdir():
        if match := _NAME.match(entry.name):
            found.append(Migration(int(match.group(1)), entry.name, entry.read_text()))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise RuntimeError(f"migrations must be numbered 1..n without gaps, found {versions}")
    return found


async def migrate(conn: Connection) -> list[int]:
    """Applies the missing migrations, all or none; the versions applied."""
    known = migrations()
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _LOCK_KEY)
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            " version integer PRIMARY KEY, name text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        current = await conn.fetchval("SELECT coalesce(max(version), 0) FROM schema_migrations")
        if current > len(known):
            raise SchemaTooNew(
                f"the database schema is at version {current}, but this coordinator knows only up to "
                f"{len(known)}: upgrade the coordinator (or point GPUNET_DATABASE_URL at another database)"
            )
        applied = []
        for m in known[current:]:
            await conn.execute(m.sql)
            await conn.execute("INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", m.version, m.name)
            applied.append(m.version)
        return applied
