"""Ray clusters on cluster leases with real parts: gpunet-localnet, embedded PostgreSQL, the
coordinator, four `gpunet worker run` processes with simulated GPUs (2 each) and real Ray (the `ray`
extra), several Ray nodes on this one machine: each worker advertises its own address (127.0.0.2,
...) and 40 cluster ports, and offers Ray one CPU. A 3-node lease with a `ray` job forms one Ray
cluster of its three nodes with their 6 GPUs; a Ray job submitted through the head's Jobs API (with
`gpunet lease ray`) runs a task on every node and its output comes back; a worker killed mid-lease is
replaced by the spare, whose Ray node joins the running cluster; the head killed mid-job: the cluster
re-forms on the new head and the job's driver, run again there, completes from its checkpoint. The
head admits only holders of the lease's Ray token (the client seals it to each node, and again to a
node the lease moves to, as `gpunet lease status --follow` does): a stranger's request without it,
or with another token, is refused, while the client's is answered."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed

from coordinator.settings import Settings
from gpunet.demo.ray_story import EVERY_NODE  # the demo's Ray job: a task pinned to each node
from gpunet.jobs import job_view, seal_missing_secrets
from gpunet.keys import create_keypair_file
from gpunet.protocol import RAY_AUTH_TOKEN, JobSpec
from gpunet.raycluster import alive_nodes, ray_token
from tests.worker.sandboxes import JOBS

from .conftest import eventually
from .world import World, cluster_env, live_settings, placed_lease, running, start_workers

pytestmark = pytest.mark.timeout(420)


def ray_env(i: int) -> dict[str, str]:
    return cluster_env(i) | {"GPUNET_WORKER_RAY_CPUS": "1"}


def addresses(world: World, keys: list[str]) -> set[str]:
    return {cluster_env(world.node_keys().index(k))["GPUNET_WORKER_ADVERTISE_ADDR"] for k in keys}


@contextlib.asynccontextmanager
async def sealing(api: str, chain: AsyncClient, world: World, lease) -> AsyncIterator[None]:
    """The client keeps sealing the lease's Ray token to any node of the lease without it (a node the
    lease moves to), as `gpunet lease status --follow` does."""

    async def loop() -> None:
        while True:
            await seal_missing_secrets(api, chain, world.client, lease, {})
            await asyncio.sleep(0.5)

    task = asyncio.create_task(loop())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def cluster_of(dashboard: str, ips: set[str], token: str) -> list[dict] | None:
    """The cluster's alive nodes once they are exactly those at `ips`."""
    try:
        nodes = await asyncio.to_thread(alive_nodes, dashboard, token)
    except OSError:
        return None  # the head is not up (yet, or again)
    return nodes if {n["node_ip"] for n in nodes} == ips and len(nodes) == len(ips) else None


def http_status(url: str, headers: dict[str, str]) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as answer:
            return answer.status
    except urllib.error.HTTPError as e:
        return e.code


async def ray_head(api: str, world: World, lease, head: str) -> dict | None:
    ray = (await job_view(api, world.client, lease, tail=1))["ray"]
    return ray if ray and ray["head"] == head else None


async def line_of(api: str, world: World, lease, node_key: str, start: str) -> str | None:
    after = 0
    while page := (await job_view(api, world.client, lease, after))["logs"]:
        for line in page:
            if line["node_key"] == node_key and line["line"].startswith(start):
                return line["line"]
        after = page[-1]["id"]
    return None


@pytest.fixture
async def chain(node):
    async with AsyncClient(node.url, commitment=Confirmed) as client:
        yield client


def _settings(node, database_url) -> Settings:
    return live_settings(
        node,
        database_url,
        lost_after_seconds=3,
    )


async def test_a_ray_lease_is_one_cluster_that_runs_jobs_on_every_node_and_replaces_a_lost_worker(
    node, chain, pool, database_url, tmp_path, spawned
) -> None:
    world = await World().build(chain, tmp_path, nodes=4)
    settings = _settings(node, database_url)
    api = f"http://127.0.0.1:{settings.api_port}"
    async with running(settings, pool, world.admin) as coordinator, contextlib.AsyncExitStack() as stack:
        workers = await start_workers(world, coordinator, tmp_path, spawned, ray_env)
        spec = JobSpec(ray=True, secrets=[RAY_AUTH_TOKEN])
        lease, placed = await placed_lease(world, api, chain, 600, spec, gpus=6)
        await stack.enter_async_context(sealing(api, chain, world, lease))
        token = ray_token(world.client, lease)
        assert len(placed) == 3
        ray = await eventually(lambda: ray_head(api, world, lease, placed[0]), what="the Ray head's addresses")
        head = cluster_env(world.node_keys().index(placed[0]))
        first = int(head["GPUNET_WORKER_CLUSTER_PORTS"].split("-")[0])
        assert ray["address"] == f"{head['GPUNET_WORKER_ADVERTISE_ADDR']}:{first}"
        assert ray["dashboard"] == f"http://{head['GPUNET_WORKER_ADVERTISE_ADDR']}:{first + 1}"

        # one cluster of the lease's three nodes, each with its 2 GPUs registered
        nodes = await eventually(
            lambda: cluster_of(ray["dashboard"], addresses(world, placed), token), timeout=120, what="the Ray cluster"
        )
        assert sorted(n["resources_total"].get("GPU") for n in nodes) == [2.0, 2.0, 2.0]
        await eventually(
            lambda: line_of(api, world, lease, placed[0], "[gpunet: ray] cluster ready: 3 nodes, 6 GPUs"),
            what="the head saying so in the job's log",
        )

        # the head's Jobs API refuses a stranger (no token, or another lease's), answers the client
        jobs = f"{ray['dashboard']}/api/jobs/"
        stranger = ray_token(world.client, world.client.pubkey())  # a token, not this lease's
        for bearer, status in ((None, 401), (stranger, 403), (token, 200)):
            headers = {"Authorization": f"Bearer {bearer}"} if bearer else {}
            assert await asyncio.to_thread(http_status, jobs, headers) == status, bearer

        # a Ray job through the head's Jobs API, with Ray's own CLI run by `gpunet lease ray`
        create_keypair_file(tmp_path / "client.json", world.client)
        ray_cli = str(Path(sys.executable).with_name("ray"))
        submit = await asyncio.create_subprocess_exec(
            str(Path(sys.executable).with_name("gpunet")),
            *("lease", "ray", str(lease), "--coordinator", api, "--keypair", str(tmp_path / "client.json")),
            *("--url", node.url, "--", ray_cli, "job", "submit", "--", sys.executable, "-c", EVERY_NODE),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        out = (await asyncio.wait_for(submit.communicate(), 180))[0].decode()
        assert submit.returncode == 0, out
        ran = {line.split()[4] for line in out.splitlines() if line.startswith("a task ran on ")}
        assert ran == addresses(world, placed), out
        simulated = [line.split()[-1] for line in out.splitlines() if line.startswith("a task ran on ")]
        assert all(len(gpus.split(",")) == 2 for gpus in simulated), out  # each task had its node's 2 GPUs

        # a worker (not the head) dies: the spare takes its share and its Ray node joins the cluster
        victim, spare = placed[1], next(k for k in world.node_keys() if k not in placed)
        workers[victim].send_signal(signal.SIGKILL)
        whole = [placed[0], placed[2], spare]
        await eventually(
            lambda: cluster_of(ray["dashboard"], addresses(world, whole), token),
            timeout=180,
            what="the cluster whole again",
        )
        assert (await job_view(api, world.client, lease, tail=1))["ray"] == ray  # the same head throughout


async def test_a_lost_head_is_replaced_and_the_driver_completes_from_its_checkpoint(
    node, chain, pool, database_url, tmp_path, spawned
) -> None:
    world = await World().build(chain, tmp_path, nodes=4)
    settings = _settings(node, database_url)
    api = f"http://127.0.0.1:{settings.api_port}"
    async with running(settings, pool, world.admin) as coordinator, contextlib.AsyncExitStack() as stack:
        workers = await start_workers(world, coordinator, tmp_path, spawned, ray_env)
        spec = JobSpec(
            ray=True,
            command=[sys.executable, str(JOBS / "ray_steps.py")],
            env={"STEPS": "20", "NODES": "3"},
            secrets=[RAY_AUTH_TOKEN],
        )
        lease, placed = await placed_lease(world, api, chain, 600, spec, gpus=6)
        await stack.enter_async_context(sealing(api, chain, world, lease))
        await eventually(
            lambda: line_of(api, world, lease, placed[0], "step 3 on 3 nodes"), timeout=150, what="the driver going"
        )

        # the head dies mid-job: the spare takes rank 0, the cluster re-forms on it, the driver runs again
        spare = next(k for k in world.node_keys() if k not in placed)
        workers[placed[0]].send_signal(signal.SIGKILL)
        done = await eventually(
            lambda: line_of(api, world, lease, spare, "done: 20 steps"),
            timeout=240,
            what="the driver done on the spare",
        )
        assert done == "done: 20 steps"
        resumed = await line_of(api, world, lease, spare, "resumed from ")
        assert resumed is not None and int(resumed.split()[-1]) > 0, resumed  # from its checkpoint, not from 0
        assert await line_of(api, world, lease, spare, "step 20 on 3 nodes")
        ray = await eventually(lambda: ray_head(api, world, lease, spare), what="the new head's addresses")
        await eventually(
            lambda: cluster_of(
                ray["dashboard"], addresses(world, [spare, placed[1], placed[2]]), ray_token(world.client, lease)
            ),
            what="the re-formed cluster",
        )
        for survivor in placed[1:]:
            assert await line_of(api, world, lease, survivor, "[gpunet: ray] the head moved to")
