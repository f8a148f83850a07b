"""A database crash under a running lease, with real processes (gpunet-localnet, the coordinator, a
PostgreSQL server of its own, three workers): PostgreSQL dies without a shutdown (`pg_ctl stop -m
immediate`: no checkpoint, crash recovery at the next start) while the job runs, stays down while
the job ends and the lease's end passes, and comes back. Nothing the workers sent is lost or
recorded twice, the finished job is not run again, nobody is slashed, and the lease is closed after
the outage with every second up to its end paid."""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed

from coordinator.db import connect_pool
from coordinator.db.embedded import EmbeddedPostgres
from coordinator.db.migrate import migrate
from gpunet.accounts import fetch
from gpunet.pda import provider_pda
from gpunet.protocol import JobSpec

from .conftest import eventually
from .world import JOB, World, closed, live_settings, running, running_lease, start_workers

STEPS = 60


class Postgres:
    """A PostgreSQL server of this test's own (the session's is shared by every test)."""

    def __init__(self) -> None:
        # not under tmp_path: PostgreSQL runs as its own user when we are root (see conftest)
        self.root = Path(tempfile.mkdtemp(prefix="gpunet-pg-crash-"))
        self.server = EmbeddedPostgres(self.root)

    async def start(self) -> str:
        self.url = await self.server.start()
        return self.url

    async def close(self) -> None:
        await self.server.stop()
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture
async def postgres() -> AsyncIterator[Postgres]:
    server = Postgres()
    await server.start()
    yield server
    await server.close()


@pytest.fixture
async def chain(node):
    async with AsyncClient(node.url, commitment=Confirmed) as client:
        yield client


async def _ended(lines) -> bool:
    return (await lines())[-1:] == ["done"]


async def _down(pool: asyncpg.Pool) -> bool:
    try:
        await pool.fetchval("SELECT 1")
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
        return True
    return False


async def _readyz(api: str) -> httpx.Response:
    async with httpx.AsyncClient(timeout=30) as http:
        return await http.get(f"{api}/readyz")


async def _ready(api: str) -> bool:
    return (await _readyz(api)).status_code == 200


async def _database_errors_counted(api: str) -> bool:
    async with httpx.AsyncClient(timeout=10) as http:
        text = (await http.get(f"{api}/metrics")).text
    [count] = [
        s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "gpunet_coordinator_database_errors_total"
    ]
    return count > 0


async def _metric(api: str, line: str) -> bool:
    """Whether /metrics has `line` (it answers while the database is down: that is when it matters)."""
    async with httpx.AsyncClient(timeout=10) as http:
        response = await http.get(f"{api}/metrics")
    return response.status_code == 200 and f"{line}\n" in response.text


@pytest.mark.timeout(300)
async def test_a_database_crash_loses_nothing_reruns_nothing_and_the_lease_closes_paid(
    node, chain, postgres: Postgres, tmp_path, spawned
) -> None:
    pool = await connect_pool(postgres.url)
    async with pool.acquire() as conn:
        await migrate(conn)
    world = await World().build(chain, tmp_path)
    settings = live_settings(
        node,
        postgres.url,
        lost_after_seconds=2.0,
        settle_seconds=1,
        settle_interval_seconds=0,  # every receipt as it comes (production: hourly)
        settle_min_amount=0,
        close_grace_seconds=4,
        reconnect_grace_seconds=2,
        database_outage_exit_seconds=120,
    )
    api = f"http://127.0.0.1:{settings.api_port}"
    spec = JobSpec(command=[sys.executable, JOB], env={"STEPS": str(STEPS), "STEP_SECONDS": "0.1"})
    try:
        async with running(settings, pool, world.admin) as coordinator:
            await start_workers(world, coordinator, tmp_path, spawned)
            lease, placed = await running_lease(world, api, chain, 25, spec)

            socket_dir = postgres.server.crash()  # the job has about 6 s to go, the lease at most 25 s
            assert await _down(pool)
            await eventually(lambda: _metric(api, "gpunet_coordinator_database_up 0"), what="/metrics: database down")
            # Not ready, saying it is the database (the RPC still answers); the failed calls counted.
            down = await _readyz(api)
            assert down.status_code == 503, down.text
            assert down.json()["checks"]["database"].startswith("does not answer"), down.json()
            assert down.json()["checks"]["rpc"] == "ok"
            await eventually(lambda: _database_errors_counted(api), what="/metrics: database errors counted")
            account = await fetch(chain, lease, "Lease")
            ends_at = account.started_at + account.terms.duration_seconds
            while time.time() < ends_at + 3:  # (gpunet-localnet's clock is the wall clock)
                await asyncio.sleep(0.5)  # the job ends and the lease's end passes while the database is down
            assert type((await fetch(chain, lease, "Lease")).status).__name__ == "Active"  # nothing closed it
            postgres.server.restart(socket_dir)

            await eventually(lambda: _metric(api, "gpunet_coordinator_database_up 1"), what="/metrics: database up")
            await eventually(lambda: _ready(api), what="/readyz ready again with the database back")
            await eventually(lambda: closed(chain, lease), timeout=90, what="the lease closed after the outage")
            account = await fetch(chain, lease, "Lease")
            assert account.billable_until == ends_at
            for assignment in list(account.assignments)[: account.node_count]:
                assert assignment.settled_until == ends_at, "every second of each share up to the end is paid"
            async with pool.acquire() as conn:
                reports = [
                    dict(r)
                    for r in await conn.fetch(
                        "SELECT node_key, epoch, gpu_seconds, through, status, reason FROM usage_receipts "
                        "ORDER BY node_key, epoch"
                    )
                ]
                assert {r["status"] for r in reports} <= {"settled", "already_settled"}, "\n".join(map(str, reports))
                assert await conn.fetchval("SELECT count(*) FROM faults") == 0
                for node_key in placed:

                    async def lines(node_key: str = node_key) -> list[str]:
                        rows = await conn.fetch(
                            "SELECT line FROM job_events WHERE node_key = $1 AND kind = 'log' AND stream = 'stdout' "
                            "ORDER BY id",
                            node_key,
                        )
                        return [r["line"] for r in rows]

                    # The lease may close (its final receipts settled) before the worker's held log lines
                    # come again (its backoff reaches 10 s): wait for the last one, then check them all.
                    await eventually(lambda: _ended(lines), timeout=60, what=f"{node_key}'s held log lines")
                    # every line once, in order, and one run only: the finished job was not started again
                    assert await lines() == ["fresh start", *(f"step {i}" for i in range(1, STEPS + 1)), "done"], (
                        node_key
                    )
                    states = [
                        r["state"]
                        for r in await conn.fetch(
                            "SELECT state FROM job_events WHERE node_key = $1 AND kind = 'status' ORDER BY id", node_key
                        )
                    ]
                    assert states[-1] == "succeeded" and states.count("succeeded") == 1
            for wallet, _ in world.suppliers:
                assert (await fetch(chain, provider_pda(wallet.pubkey()), "Provider")).slashed == 0
        # the control: the workers did hold messages the coordinator could not record, and sent them again
        held = [(tmp_path / f"worker{i}.log").read_text() for i in range(3)]
        assert sum("session.holding" in text for text in held) >= 1
    finally:
        await pool.close()
