"""Cluster networking with real parts (gpunet-localnet, embedded PostgreSQL, the coordinator, three
`gpunet worker run` processes): each worker advertises its own address (127.0.0.2, ...: not the
127.0.0.1 its gateway session comes from) and cluster ports; a 2-node cluster job rendezvouses through
what the coordinator handed its nodes: rank 0 listens on MASTER_ADDR:MASTER_PORT, rank 1 connects
there (tests/worker/jobs/rendezvous.py: torch.distributed's TCP rendezvous, without torch)."""

from __future__ import annotations

import sys

import pytest
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed

from gpunet.jobs import job_view
from gpunet.protocol import JobSpec
from tests.worker.sandboxes import JOBS

from .conftest import eventually
from .world import World, cluster_env, live_settings, placed_lease, running, start_workers


@pytest.fixture
async def chain(node):
    async with AsyncClient(node.url, commitment=Confirmed) as client:
        yield client


async def all_lines(api: str, world: World, lease) -> list[dict]:
    lines, after = [], 0
    while page := (await job_view(api, world.client, lease, after))["logs"]:
        lines += page
        after = page[-1]["id"]
    return lines


@pytest.mark.timeout(240)
async def test_a_two_node_cluster_job_rendezvouses_through_the_advertised_addresses(
    node, chain, pool, database_url, tmp_path, spawned
) -> None:
    world = await World().build(chain, tmp_path)
    settings = live_settings(node, database_url)
    api = f"http://127.0.0.1:{settings.api_port}"
    async with running(settings, pool, world.admin) as coordinator:
        await start_workers(world, coordinator, tmp_path, spawned)
        spec = JobSpec(command=[sys.executable, str(JOBS / "rendezvous.py")], restart_policy="never")
        lease, placed = await placed_lease(world, api, chain, 600, spec)

        async def met() -> list[dict] | None:
            lines = await all_lines(api, world, lease)
            return lines if sum(x["line"].startswith("met ranks") for x in lines) == 2 else None

        lines = await eventually(met, timeout=90, what="both ranks met")

    # rank 0 is the first node of the placement: MASTER_ADDR:MASTER_PORT is its advertised address
    # and first cluster port, never the gateway's view of it (127.0.0.1)
    env = {key: cluster_env(world.node_keys().index(key)) for key in placed}
    addr, first = env[placed[0]]["GPUNET_WORKER_ADVERTISE_ADDR"], env[placed[0]]["GPUNET_WORKER_CLUSTER_PORTS"][:5]
    assert {x["node_key"]: x["line"] for x in lines if x["line"].startswith("met ranks")} == {
        key: f"met ranks 0,1 at {addr}:{first}" for key in placed
    }
    assert {x["node_key"]: x["line"] for x in lines if x["line"].startswith("RANK=")} == {
        key: f"RANK={rank} WORLD_SIZE=2 NODE_RANK={rank} LOCAL_WORLD_SIZE=1 PET_NNODES=2 PET_NODE_RANK={rank} "
        f"PET_MASTER_ADDR={addr} PET_MASTER_PORT={first} GPUNET_CLUSTER_PORTS={env[key]['GPUNET_WORKER_CLUSTER_PORTS']}"
        for rank, key in enumerate(placed)
    }
