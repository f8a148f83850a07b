"""Real processes for the coordinator's end-to-end and fault tests: a gpunet market (admin = the
coordinator's attester, three suppliers with a 2-GPU H100 node each, a client), the coordinator
in this process with its API, `gpunet worker run` processes with simulated GPUs, and the waits
the tests poll with."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import uvicorn
from solana.rpc.async_api import AsyncClient
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from coordinator.api import create_app
from coordinator.api.work import work_routes
from coordinator.db import jobs
from coordinator.indexer.rpc import ChainRpc
from coordinator.service import Coordinator
from coordinator.settings import Settings
from gpunet import instructions as ix
from gpunet.accounts import fetch
from gpunet.amounts import IO
from gpunet.client import send_and_confirm
from gpunet.history import transactions_of
from gpunet.jobs import CoordinatorError, job_view, submit_job
from gpunet.keys import create_keypair_file
from gpunet.localnet import free_ports
from gpunet.pda import lease_pda
from gpunet.protocol import JobSpec
from gpunet.testbed import Market
from tests.worker.sandboxes import HOST_JOBS_ENV
from worker.simulate import SimulatedGpus

from .conftest import eventually

JOB = str(Path(__file__).resolve().parents[1] / "worker" / "jobs" / "steps.py")
PRICE = 36 * IO  # per GPU-hour: 0.01 IO per GPU-second, so each settlement moves whole units
PERIOD = 3


class World:
    """Config (admin = the coordinator's attester), three suppliers (or one per `inventories`) with a
    2-GPU H100 node each, a client."""

    async def build(
        self,
        chain: AsyncClient,
        home: Path,
        *,
        min_verification_tier: int = 0,
        inventories: list[int] | None = None,
        nodes: int = 3,
    ) -> World:
        """`inventories`: per node, register the inventory hash of its worker's simulated H100s (this
        many of them; GPU verification checks it against the worker's), else none (for `nodes` nodes)."""
        self.chain, self.home = chain, home
        market = await Market.create(chain, usage_period_seconds=PERIOD, min_verification_tier=min_verification_tier)
        self.admin, self.mint = market.admin, market.mint
        self.suppliers: list[tuple[Keypair, Keypair]] = []
        for i in range(nodes if inventories is None else len(inventories)):
            node_key = Keypair()
            registered = bytes(32)
            if inventories is not None:
                registered = SimulatedGpus("H100", inventories[i], 80, str(node_key.pubkey())).inventory().hash()
            s = await market.supplier(2, PRICE, 50 * IO, inventory_hash=registered, node_key=node_key)
            create_keypair_file(home / f"node{i}.json", s.node_key)
            self.suppliers.append((s.wallet, s.node_key))
        client = await market.client(100 * IO)
        self.market, self.lessee = market, client
        self.client, self.client_tokens = client.wallet, client.tokens
        return self

    def node_keys(self) -> list[str]:
        return [str(k.pubkey()) for _, k in self.suppliers]


def live_settings(node, database_url: str, **overrides: object) -> Settings:
    """A coordinator's settings for a test with real workers: its API on a free port, the gateway on
    any, and the chain polled and heartbeats sent fast enough for a test to watch them."""
    defaults: dict[str, object] = {
        "poll_seconds": 1.0,
        "api_port": free_ports(1)[0],
        "gateway_port": 0,
        "heartbeat_seconds": 0.5,
    }
    return Settings(rpc_url=node.url, ws_url=node.ws_url, database_url=database_url, **{**defaults, **overrides})


@contextlib.asynccontextmanager
async def running(settings: Settings, pool, attester: Keypair):
    coordinator = await Coordinator(settings, pool, attester).start()
    rpc = ChainRpc(settings.rpc_url, settings.commitment)
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(pool, rpc, settings, work_routes(coordinator), coordinator),
            host="127.0.0.1",
            port=settings.api_port,
            log_level="warning",
            lifespan="off",
        )
    )
    api = asyncio.create_task(server.serve())
    try:
        yield coordinator
    finally:
        server.should_exit = True
        await api
        await rpc.close()
        await coordinator.stop()


def start_worker(
    world: World, i: int, gateway: str, log: Path, env: dict[str, str] | None = None, gpus: int = 2
) -> subprocess.Popen:
    """Worker i with `gpus` simulated H100s (its node is registered with 2: fewer is a node short of its
    registration)."""
    gpunet = Path(sys.executable).with_name("gpunet")
    with log.open("ab") as out:
        return subprocess.Popen(
            [
                str(gpunet),
                "worker",
                "run",
                "--keypair",
                str(world.home / f"node{i}.json"),
                "--simulate-gpus",
                f"H100:{gpus}:80",
                "--gateway",
                gateway,
                "--state-dir",
                str(world.home / f"worker{i}"),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "GPUNET_WORKER_STOP_GRACE_SECONDS": "2", **HOST_JOBS_ENV, **(env or {})},
        )


def cluster_env(i: int) -> dict[str, str]:
    """Worker i's cluster networking as a supplier sets it: its own advertised address (127.0.0.2,
    127.0.0.3, ...: not the 127.0.0.1 its gateway session comes from, so a test sees which one peers
    were given) and its own 40 cluster ports (several nodes share this host)."""
    first = 29500 + 40 * i
    return {"GPUNET_WORKER_ADVERTISE_ADDR": f"127.0.0.{2 + i}", "GPUNET_WORKER_CLUSTER_PORTS": f"{first}-{first + 39}"}


async def start_workers(
    world: World,
    coordinator: Coordinator,
    home: Path,
    spawned: list[subprocess.Popen],
    env: Callable[[int], dict[str, str]] = cluster_env,
    gpus: Callable[[int], int] = lambda i: 2,
) -> dict[str, subprocess.Popen]:
    """A worker per node of the world, connected to the coordinator's gateway; by node key. Each is
    also added to `spawned` (the `spawned` fixture kills what is left at teardown). `env(i)`: worker
    i's extra environment; `gpus(i)`: the simulated GPUs it runs."""
    workers = {
        key: start_worker(world, i, coordinator.gateway.url, home / f"worker{i}.log", env(i), gpus(i))
        for i, key in enumerate(world.node_keys())
    }
    spawned.extend(workers.values())
    deadline = asyncio.get_running_loop().time() + 60
    while len(coordinator.gateway.sessions) < len(workers):
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError(f"{len(coordinator.gateway.sessions)} of {len(workers)} workers connected in 60 s")
        await asyncio.sleep(0.1)
    return workers


async def running_lease(
    world: World, api: str, chain: AsyncClient, seconds: int, spec: JobSpec | None = None
) -> tuple[Pubkey, list[str]]:
    """The world's client opens a 4-GPU lease (two nodes) for `seconds` and gives it `spec` (by
    default the steps job, long enough to outlast any test); returns it once the job runs on both."""
    lease, placed = await placed_lease(world, api, chain, seconds, spec)
    await eventually(lambda: all_running(api, world.client, lease, placed), what="the job running on both nodes")
    return lease, placed


async def open_lease(world: World, chain: AsyncClient, seconds: int, *, gpus: int = 4, lease_id: int = 1) -> Pubkey:
    """The world's client opens a lease of `gpus` H100s for `seconds`, at twice the nodes' price."""
    lease = lease_pda(world.client.pubkey(), lease_id)
    terms = ix.LeaseTerms(1, 80, gpus, 0, 2 * PRICE, seconds)
    await send_and_confirm(
        chain,
        world.client,
        [ix.open_lease(world.client.pubkey(), world.client_tokens, world.mint, lease_id, terms)],
    )
    return lease


def steps_job() -> JobSpec:
    """The steps job, long enough to outlast any test."""
    return JobSpec(command=[sys.executable, JOB], env={"STEPS": "100000", "STEP_SECONDS": "0.2"})


async def placed_lease(
    world: World, api: str, chain: AsyncClient, seconds: int, spec: JobSpec | None = None, *, gpus: int = 4
) -> tuple[Pubkey, list[str]]:
    """As `running_lease`, returning once the lease is placed (its nodes by rank); `gpus` 2 per node."""
    lease = await open_lease(world, chain, seconds, gpus=gpus)
    spec = spec or steps_job()
    await eventually(lambda: submitted(api, world.client, lease, spec), what="the job accepted")
    placed = (await eventually(lambda: placed_view(api, world.client, lease), what="the lease placed"))["placement"][
        "nodes"
    ]
    return lease, placed


async def truly(value: bool) -> bool:
    return value


async def submitted(api: str, client: Keypair, lease: Pubkey, spec: JobSpec) -> bool:
    try:
        await submit_job(api, client, lease, spec, gpus_per_node=2)
    except CoordinatorError as e:
        if "not indexed" in str(e) or "cannot reach" in str(e):
            return False
        raise
    return True


async def placed_view(api: str, client: Keypair, lease: Pubkey):
    view = await job_view(api, client, lease)
    return view if view["placement"] and view["placement"]["state"] == "placed" else None


async def all_running(api: str, client: Keypair, lease: Pubkey, nodes: list[str]) -> bool:
    view = await job_view(api, client, lease)
    states = {n["node_key"]: n["state"] for n in view["nodes"]}
    return all(states.get(n) == "running" for n in nodes)


async def checkpointed(pool, lease: Pubkey, rank: int) -> bool:
    """Whether the coordinator holds a checkpoint of the lease's rank (sent through the gateway):
    what a node taking that rank over resumes from (a rank that sent none starts afresh)."""
    async with pool.acquire() as conn:
        return await jobs.latest_checkpoint(conn, str(lease), rank) is not None


async def resumed_on(api: str, client: Keypair, lease: Pubkey, node_key: str) -> str | None:
    after = 0
    while logs := (await job_view(api, client, lease, after))["logs"]:
        for line in logs:
            if line["node_key"] == node_key and line["line"].startswith("resumed from"):
                return line["line"]
        after = logs[-1]["id"]
    return None


async def settled_count(pool, node_key: str) -> int:
    """The settlements of the node's usage the indexer has seen on chain."""
    async with pool.acquire() as conn:
        return await conn.fetchval(
            "SELECT count(*) FROM settlements s JOIN nodes n ON n.node = s.node WHERE n.node_key = $1", node_key
        )


async def closed(chain: AsyncClient, lease: Pubkey) -> bool:
    return type((await fetch(chain, lease, "Lease")).status).__name__ == "Closed"


async def settlement_events(chain: AsyncClient, lease: Pubkey) -> list:
    return [e.data for tx in await transactions_of(chain, lease) for e in tx.events if e.name == "UsageSettled"]
