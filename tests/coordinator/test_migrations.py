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


async def test_receipts_and_job_lines_of_shares_never_held_go_and_the_held_ones_stay(database_url, monkeypatch):
    """0020: what a node said of shares it never held, stored before the gateway checked, is deleted;
    the rows of an assignment the ledger has (the control) are kept."""
    module = importlib.import_module("coordinator.db.migrate")
    everything = migrations()
    monkeypatch.setattr(module, "migrations", lambda: [m for m in everything if m.version < 20])
    conn = await asyncpg.connect(database_url)
    try:
        await migrate(conn)
        await conn.execute(
            """INSERT INTO assignments (lease, node, node_key, provider, gpus, price_per_gpu_hour, settled_until,
                 gpu_seconds, active, signature, epoch)
               VALUES ('lease', 'node', 'held', 'p', 2, 1, 0, 0, true, 's', 1)"""
        )
        for node_key, epoch, lease in (("held", 1, "lease"), ("held", 2, "lease"), ("stranger", 1, "lease")):
            await conn.execute(
                "INSERT INTO usage_receipts (lease, node_key, epoch, gpu_seconds, through, final, signature, "
                "simulated) VALUES ($1, $2, $3, 1, 1, false, 's', true)",
                lease,
                node_key,
                epoch,
            )
        for node_key in ("held", "stranger"):
            await conn.execute(
                "INSERT INTO job_events (lease, node_key, kind, line) VALUES ('lease', $1, 'log', 'a line')", node_key
            )
        monkeypatch.setattr(module, "migrations", lambda: everything)
        assert 20 in await migrate(conn)
        receipts = await conn.fetch("SELECT node_key, epoch FROM usage_receipts")
        assert [(r["node_key"], int(r["epoch"])) for r in receipts] == [("held", 1)]
        assert [r["node_key"] for r in await conn.fetch("SELECT node_key FROM job_events")] == ["held"]
    finally:
        await conn.close()
