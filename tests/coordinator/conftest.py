"""Coordinator fixtures: one embedded PostgreSQL per session, a fresh database per test, a
gpunet-localnet node with the program, and the indexer running against both."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import asyncpg
import pytest
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed

from coordinator.db import connect_pool
from coordinator.db.embedded import EmbeddedPostgres
from coordinator.db.migrate import migrate
from coordinator.indexer import Indexer
from coordinator.indexer.decode import plain
from coordinator.leader import Election, Fence
from coordinator.metrics import Metrics
from coordinator.service import Coordinator
from coordinator.settings import Settings
from gpunet.events import decode_events
from gpunet.testbed import Market, funded_wallet

from .chain import Cluster


@pytest.fixture(scope="session")
def pg_server() -> str:
    """The session's PostgreSQL; its admin database URL."""
    # Not under pytest's tmp_path: when we are root, PostgreSQL runs as its own user and must
    # traverse every parent, and any concurrent pytest run resets /tmp/pytest-of-root to 0700.
    root = Path(tempfile.mkdtemp(prefix="gpunet-coordinator-pg-"))
    server = EmbeddedPostgres(root, database="postgres")
    url = asyncio.run(server.start())
    yield url
    asyncio.run(server.stop())
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
async def database_url(pg_server) -> AsyncIterator[str]:
    """A fresh, empty database for one test."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(pg_server)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    yield pg_server.replace("/postgres?", f"/{name}?")
    admin = await asyncpg.connect(pg_server)
    try:
        await admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
    finally:
        await admin.close()


@pytest.fixture
async def pool(database_url) -> AsyncIterator[asyncpg.Pool]:
    pool = await connect_pool(database_url)
    async with pool.acquire() as conn:
        await migrate(conn)
    yield pool
    await pool.close()


async def _nothing(*_: object) -> None:
    pass


async def elected(pool, name: str, metrics: Metrics, on_lead=_nothing) -> Election:
    """`name` elected leader of the test's database (a real election, a lease long enough for any test)."""
    election = Election(
        pool,
        name,
        ttl_seconds=3600,
        renew_seconds=600,
        gateway_url="",
        api_url="",
        metrics=metrics,
        on_lead=on_lead,
        on_lose=_nothing,
    )
    await election.step()
    assert election.fence is not None, "another replica leads this database"
    return election


@pytest.fixture
async def fence(pool) -> Fence:
    """This test's process as the elected leader: what the coordinator's decision loops decide through."""
    election = await elected(pool, "test", Metrics())
    assert election.fence is not None
    return election.fence


async def leading_without_loops(coordinator: Coordinator) -> Coordinator:
    """A coordinator not started, elected leader of its database with its term's state built, but
    none of its loops running: the test steps what it looks at itself."""

    async def term(fence: Fence) -> None:
        coordinator._term(fence)

    coordinator.election = await elected(coordinator.pool, coordinator.replica, coordinator.metrics, term)
    return coordinator


@pytest.fixture
def settings(node, database_url) -> Settings:
    return Settings(rpc_url=node.url, ws_url=node.ws_url, database_url=database_url, poll_seconds=2.0)


@pytest.fixture
async def chain(node) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(node.url, commitment=Confirmed) as client:
        yield client


@pytest.fixture
async def market(chain) -> Market:
    """An attester of its own (the coordinator's key in these tests), and neither jail nor unbonding
    waits, so every kind of event can happen in one test."""
    return await Market.create(
        chain, attester=await funded_wallet(chain, 100), usage_period_seconds=60, jail_seconds=0, unbonding_seconds=0
    )


@pytest.fixture
async def cluster(chain) -> Cluster:
    """Two 2-GPU nodes sharing a client's active 4-GPU lease (the settlement tests' world)."""
    return await Cluster().build(chain)


@pytest.fixture
async def indexer(settings, pool) -> AsyncIterator[Indexer]:
    """The indexer running in this process for the test's duration."""
    indexer = Indexer(settings, pool)
    task = asyncio.create_task(indexer.run())
    yield indexer
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def eventually(check: Callable[[], Awaitable[object]], timeout: float = 60.0, what: str = "condition") -> object:
    """Polls `check` until it returns something truthy (generous deadline for a loaded machine)."""
    deadline = time.monotonic() + timeout
    while True:
        result = await check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


async def chain_events(node, signatures) -> list[tuple[str, int, str, dict]]:
    """(signature, index, name, data) of every event of `signatures`, read from the chain, in order."""
    out = []
    for sig in signatures:
        tx = node.call("getTransaction", [str(sig), {"encoding": "json", "commitment": "confirmed"}])["result"]
        for i, e in enumerate(decode_events(tx["meta"]["logMessages"])):
            out.append((str(sig), i, e.name, plain(e.data)))
    return out


async def indexed_events(pool: asyncpg.Pool) -> list[tuple[str, int, str, dict]]:
    async with pool.acquire() as conn:
        rows = await conn.fetch("SELECT signature, event_index, name, data FROM events ORDER BY id")
    return [(r["signature"], r["event_index"], r["name"], json.loads(r["data"])) for r in rows]


async def state(pool: asyncpg.Pool) -> dict:
    async with pool.acquire() as conn:
        return dict(await conn.fetchrow("SELECT * FROM indexer_state"))


@pytest.fixture
def spawned():
    """The processes a test starts, killed at teardown whatever happened: a failed test must not
    leave workers running (they reconnect forever)."""
    procs: list[subprocess.Popen] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
