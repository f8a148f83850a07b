"""Schema migrations: applied once, all or nothing, and a newer database stops the coordinator."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import asyncpg
import pytest

from coordinator.db.migrate import Migration, SchemaTooNew, migrate, migrations

REPO = Path(__file__).resolve().parents[2]


async def test_migrations_apply_once_and_are_recorded(database_url):
    conn = await asyncpg.connect(database_url)
    try:
        assert await migrate(conn) == [m.version for m in migrations()]
        assert await migrate(conn) == []  # a restart applies nothing
        recorded = await conn.fetch("SELECT version, name FROM schema_migrations ORDER BY version")
        assert [(r["version"], r["name"]) for r in recorded] == [(m.version, m.name) for m in migrations()]
        assert await conn.fetchval("SELECT count(*) FROM indexer_state") == 1
    finally:
        await conn.close()


async def test_a_database_newer_than_the_code_is_refused_and_left_alone(database_url):
    conn = await asyncpg.connect(database_url)
    try:
        await migrate(conn)
        newer = len(migrations()) + 1
        await conn.execute("INSERT INTO schema_migrations (version, name) VALUES ($1, 'from_the_future.sql')", newer)
        with pytest.raises(SchemaTooNew, match=f"schema is at version {newer}.*upgrade the coordinator"):
            await migrate(conn)
        assert await conn.fetchval("SELECT max(version) FROM schema_migrations") == newer
    finally:
        await conn.close()

    # The command line says so and exits non-zero, without a traceback.
    env = {**os.environ, "GPUNET_DATABASE_URL": database_url}
    out = subprocess.run(
        [sys.executable, "-m", "coordinator", "migrate"], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2
    assert f"schema is at version {newer}" in out.stderr and "Traceback" not in out.stderr


async def test_a_failing_migration_changes_nothing(database_url, monkeypatch):
    module = importlib.import_module("coordinator.db.migrate")  # the package re-exports a function of that name
    broken = [
        *migrations(),
        Migration(
            len(migrations()) + 1, "9999_broken.sql", "CREATE TABLE half_done (x int); SELECT no_such_function();"
        ),
    ]
    monkeypatch.setattr(module, "migrations", lambda: broken)
    conn = await asyncpg.connect(database_url)
    try:
        with pytest.raises(asyncpg.UndefinedFunctionError):
            await migrate(conn)
        assert await conn.fetchval("SELECT to_regclass('schema_migrations')") is None
        assert await conn.fetchval("SELECT to_regclass('events')") is None
    finally:
        await conn.close()
