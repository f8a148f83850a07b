"""The coordinator end to end with real parts: gpunet-localnet with the program, embedded
PostgreSQL, the coordinator in this process (indexer, gateway, scheduler, failover, settlement,
API) and three `gpunet worker run` processes with simulated GPUs.

A client opens a 4-GPU lease as a 2-node cluster and attaches a checkpointing job; the lease is
placed on two nodes and runs; one worker is SIGKILLed; its provider is slashed with evidence,
its share moves to the spare node, and the job resumes there from its checkpoint; usage is
settled each period; the coordinator closes the lease at its end; every token is accounted for.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import uvicorn
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from coordinator.api import create_app
from coordinator.api.work import work_routes
from coordinator.indexer.rpc import ChainRpc
from coordinator.service import Coordinator
from coordinator.settings import Settings
from gpunet import instructions as ix
from gpunet.accounts import fetch
from gpunet.amounts import IO
from gpunet.audit import audit_lease
from gpunet.client import send_and_confirm
from gpunet.history import transactions_of
from gpunet.jobs import CoordinatorError, job_view, submit_job
from gpunet.keys import create_keypair_file
from gpunet.localnet import free_ports
from gpunet.pda import lease_pda, lease_vault_pda, node_pda
from gpunet.protocol import JobSpec
from gpunet.testbed import Market

from .conftest import eventually

JOB = str(Path(__file__).resolve().parents[1] / "worker" / "jobs" / "steps.py")
PRICE = 36 * IO  # per GPU-hour: 0.01 IO per GPU-second, so each settlement moves whole units
PERIOD = 3


class World:
    """Config (admin = the coordinator's attester), three suppliers with a 2-GPU H100 node each, a client."""

    async def build(self, chain: AsyncClient, home: Path) -> World:
        self.chain, self.home = chain, home
        market = await Market.create(chain, usage_period_seconds=PERIOD)
        self.admin, self.mint = market.admin, market.mint
        self.suppliers: list[tuple[Keypair, Keypair]] = []
        for i in range(3):
            s = await market.supplier(2, PRICE, 50 * IO)
            create_keypair_file(home / f"node{i}.json", s.node_key)
            self.suppliers.append((s.wallet, s.node_key))
        self.client, self.client_tokens = await market.client(100 * IO)
        return self

    def node_keys(self) -> list[str]:
        return [str(k.pubkey()) for _, k in self.suppliers]


@contextlib.asynccontextmanager
async def running(settings: Settings, pool, attester: Keypair):
    coordinator = await Coordinator(settings, pool, attester).start()
    rpc = ChainRpc(settings.rpc_url, settings.commitment)
    server = uvicorn.Server(uvicorn.Config(create_app(pool, rpc, settings, work_routes(coordinator)),
                                           host="127.0.0.1", port=settings.api_port, log_level="warning", lifespan="off"))
    api = asyncio.create_task(server.serve())
    try:
        yield coordinator
    finally:
        server.should_exit = True
        await api
        await rpc.close()
        await coordinator.stop()


def start_worker(world: World, i: int, gateway: str, log: Path) -> subprocess.Popen:
    gpunet = Path(sys.executable).with_name("gpunet")
    with log.open("ab") as out:
        return subprocess.Popen([str(gpunet), "worker", "run", "--keypair", str(world.home / f"node{i}.json"),
                                 "--simulate-gpus", "H100:2:80", "--gateway", gateway,
                                 "--state-dir", str(world.home / f"worker{i}")],
                                stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "GPUNET_WORKER_STOP_GRACE_SECONDS": "2"})


@pytest.fixture
async def chain(node):
    async with AsyncClient(node.url, commitment=Confirmed) as client:
        yield client


@pytest.mark.timeout(300)
async def test_a_cluster_lease_survives_a_lost_worker_and_every_token_is_accounted_for(node, chain, pool, database_url,
                                                                                      tmp_path) -> None:
    world = await World().build(chain, tmp_path)
    settings = Settings(rpc_url=node.url, ws_url=node.ws_url, database_url=database_url, poll_seconds=1.0,
                        api_port=free_ports(1)[0], gateway_port=0, heartbeat_seconds=0.5, lost_after_seconds=3,
                        settle_seconds=1, close_grace_seconds=4)
    api = f"http://127.0.0.1:{settings.api_port}"
    workers: dict[str, subprocess.Popen] = {}
    async with running(settings, pool, world.admin) as coordinator:
        for i, key in enumerate(world.node_keys()):
            workers[key] = start_worker(world, i, coordinator.gateway.url, tmp_path / f"worker{i}.log")
        await eventually(lambda: _true(len(coordinator.gateway.sessions) == 3), what="three workers connected")

        lease = lease_pda(world.client.pubkey(), 1)
        await send_and_confirm(chain, world.client, [ix.open_lease(
            world.client.pubkey(), world.client_tokens, world.mint, 1, ix.LeaseTerms(1, 80, 4, 0, 2 * PRICE, 40))])
        spec = JobSpec(command=[sys.executable, JOB], env={"STEPS": "100000", "STEP_SECONDS": "0.2"})
        await eventually(lambda: _submitted(api, world.client, lease, spec), what="the job accepted")

        view = await eventually(lambda: _placed(api, lease), what="the lease placed")
        placed = view["placement"]["nodes"]
        assert len(placed) == 2 and set(placed) < set(world.node_keys())
        await eventually(lambda: _all_running(api, lease, placed), what="the job running on both nodes")
        await eventually(lambda: _settled_count(pool, placed[0]), what="a first settlement")

        # A worker dies mid-lease: no goodbye, no more heartbeats.
        victim, spare = placed[0], next(k for k in world.node_keys() if k not in placed)
        workers[victim].send_signal(signal.SIGKILL)
        resumed = await eventually(lambda: _resumed_on(api, lease, spare), timeout=90, what="the job resumed on the spare")
        assert int(resumed.split()[-1]) > 0  # from its checkpoint, not from scratch
        account = await fetch(chain, lease, "Lease")
        assert {str(a.node_key) for a in list(account.assignments)[: account.node_count]} == {placed[1], spare}
        assert (await fetch(chain, node_pda(Pubkey.from_string(victim)), "Node")).jailed
        # The gateway's keepalive pings (every 5 s) give the scheduler each live worker's latency.
        await eventually(lambda: _true(coordinator.placer.scheduler.nodes[spare].latency_ms is not None),
                         what="the spare's measured latency")
        async with pool.acquire() as conn:
            fault = await conn.fetchrow("SELECT * FROM faults WHERE node_key = $1", victim)
        assert fault["kind"] == "MissedHeartbeats" and fault["slash_signature"]

        # The coordinator closes the lease after its end, once the last periods are settled.
        await eventually(lambda: _closed(chain, lease), timeout=120, what="the lease closed by the coordinator")

    for proc in workers.values():
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)

    closed = await fetch(chain, lease, "Lease")
    assert closed.deposited == closed.paid + closed.fees + closed.refunded  # conservation, to the base unit
    assert (await chain.get_account_info(lease_vault_pda(lease))).value is None  # the vault is closed, empty

    # Each settlement paid exactly its GPU-seconds at the node's price, and no seq twice.
    settled = await _settlement_events(chain, lease)
    assert len({(e.node, e.seq) for e in settled}) == len(settled)
    assert all(e.payout + e.fee == e.gpu_seconds * PRICE // 3600 for e in settled)
    assert sum(e.payout for e in settled) == closed.paid and sum(e.fee for e in settled) == closed.fees
    paid_nodes = {str(e.node) for e in settled}
    assert str(node_pda(Pubkey.from_string(spare))) in paid_nodes  # the spare was paid for its part
    report = await audit_lease(chain, lease)
    assert report.ok, report.differences()


async def _true(value: bool) -> bool:
    return value


async def _submitted(api: str, client: Keypair, lease: Pubkey, spec: JobSpec) -> bool:
    try:
        await submit_job(api, client, lease, spec, gpus_per_node=2)
    except CoordinatorError as e:
        if "not indexed" in str(e) or "cannot reach" in str(e):
            return False
        raise
    return True


async def _placed(api: str, lease: Pubkey):
    view = await job_view(api, lease)
    return view if view["placement"] and view["placement"]["state"] == "placed" else None


async def _all_running(api: str, lease: Pubkey, nodes: list[str]) -> bool:
    view = await job_view(api, lease)
    states = {n["node_key"]: n["state"] for n in view["nodes"]}
    return all(states.get(n) == "running" for n in nodes)


async def _resumed_on(api: str, lease: Pubkey, node_key: str) -> str | None:
    after = 0
    while logs := (await job_view(api, lease, after))["logs"]:
        for line in logs:
            if line["node_key"] == node_key and line["line"].startswith("resumed from"):
                return line["line"]
        after = logs[-1]["id"]
    return None


async def _settled_count(pool, node_key: str) -> int:
    async with pool.acquire() as conn:
        return await conn.fetchval("SELECT count(*) FROM usage_reports WHERE node_key = $1 AND status = 'settled'",
                                   node_key)


async def _closed(chain: AsyncClient, lease: Pubkey) -> bool:
    return type((await fetch(chain, lease, "Lease")).status).__name__ == "Closed"


async def _settlement_events(chain: AsyncClient, lease: Pubkey) -> list:
    return [e.data for tx in await transactions_of(chain, lease) for e in tx.events if e.name == "UsageSettled"]
