"""Placement trusts what runs, not what was registered, with real processes (gpunet-localnet,
embedded PostgreSQL, the coordinator, simulated workers): a node registered with 2 H100s whose
worker reports 1 is not placed for the GPU it lacks, and `quote` says so (an honest node is placed,
the control); a node that refuses a share it was given (its worker came back with a GPU fewer) is
slashed and its share moves at once, not after the lease's duration, and it is not given that
lease again when it reconnects (the other node of the lease, reconnecting, is: the control).

The config requires no verification here: these tests are about what placement and dispatch do
with a node's live inventory (verification, which also finds such a node unfit, is tested apart).
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
from pathlib import Path

import pytest
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solders.pubkey import Pubkey

from gpunet.accounts import fetch
from gpunet.jobs import job_view, quote
from gpunet.pda import node_pda

from .conftest import eventually
from .world import (
    World,
    all_running,
    live_settings,
    open_lease,
    placed_view,
    running,
    running_lease,
    start_worker,
    start_workers,
    steps_job,
    submitted,
)

LEASE_SECONDS = 600  # far longer than any wait here: a share that waits for the lease's end fails the test


@pytest.fixture
async def chain(node):
    async with AsyncClient(node.url, commitment=Confirmed) as client:
        yield client


async def _assigned(chain: AsyncClient, lease: Pubkey) -> list[str]:
    """The node keys the chain has the lease assigned to (none while it waits)."""
    account = await fetch(chain, lease, "Lease")
    return [str(a.node_key) for a in list(account.assignments)[: account.node_count]]


async def _faults(pool, node_key: str) -> list[str]:
    async with pool.acquire() as conn:
        return [r["kind"] for r in await conn.fetch("SELECT kind FROM faults WHERE node_key = $1", node_key)]


@pytest.mark.timeout(300)
async def test_a_node_short_of_its_registered_gpus_is_not_placed_for_them(
    node, chain, pool, database_url, tmp_path, spawned
) -> None:
    world = await World().build(chain, tmp_path, nodes=2)
    cheat, honest = world.node_keys()
    settings = live_settings(node, database_url)
    api = f"http://127.0.0.1:{settings.api_port}"
    async with running(settings, pool, world.admin) as coordinator:
        await start_workers(world, coordinator, tmp_path, spawned, gpus=lambda i: 1 if i == 0 else 2)

        async def quoted(count: int):
            answer = await quote(api, count, gpu_model="H100", gpus_per_node=2)
            by_node = {c["node_key"]: c for c in answer["candidates"]}
            return answer if by_node.keys() == {cheat, honest} and by_node[honest]["online"] else None

        # The cheat registered 2 H100s and runs 1: quoted with 1 free and 1 missing, never chosen for 2.
        both = await eventually(lambda: quoted(4), what="both nodes quoted online")
        by_node = {c["node_key"]: c for c in both["candidates"]}
        assert (by_node[cheat]["free_gpus"], by_node[cheat]["missing_gpus"], by_node[cheat]["gpu_count"]) == (1, 1, 2)
        assert (by_node[honest]["free_gpus"], by_node[honest]["missing_gpus"]) == (2, 0)
        assert (
            not both["placeable"]
            and "2 qualify (1 running fewer GPUs than it registered), 1 with >= 2 free" in both["reason"]
        ), both["reason"]

        # A lease needing both nodes' 2 GPUs waits: the cheat is not placed.
        waiting = await open_lease(world, chain, LEASE_SECONDS, gpus=4, lease_id=1)
        await eventually(lambda: submitted(api, world.client, waiting, steps_job()), what="the job accepted")
        # The control: a lease of 2 GPUs, opened after it, is placed on the honest node, runs there.
        placed = await open_lease(world, chain, LEASE_SECONDS, gpus=2, lease_id=2)
        await eventually(lambda: submitted(api, world.client, placed, steps_job()), what="the job accepted")
        view = await eventually(lambda: placed_view(api, world.client, placed), what="the 2-GPU lease placed")
        assert view["placement"]["nodes"] == [honest]
        await eventually(lambda: all_running(api, world.client, placed, [honest]), what="its job running")
        assert await _assigned(chain, placed) == [honest]
        assert await _assigned(chain, waiting) == [], "the cheat was placed for a GPU it does not run"
        waited = await job_view(api, world.client, waiting)
        assert waited["placement"]["state"] != "placed", waited["placement"]


@pytest.mark.timeout(300)
async def test_a_refused_share_moves_at_once_and_its_node_is_not_given_it_again(
    node, chain, pool, database_url, tmp_path, spawned
) -> None:
    world = await World().build(chain, tmp_path, nodes=3)
    settings = live_settings(node, database_url, lost_after_seconds=30)  # the restarts below are no loss
    api = f"http://127.0.0.1:{settings.api_port}"
    async with running(settings, pool, world.admin) as coordinator:
        keys = world.node_keys()
        workers: dict[str, subprocess.Popen] = {}

        async def start(key: str, gpus: int = 2) -> None:
            """The node's worker starts with `gpus` GPUs (fewer than registered: a GPU pulled, a driver lost)."""
            i = keys.index(key)
            workers[key] = start_worker(world, i, coordinator.gateway.url, tmp_path / f"worker{i}.log", gpus=gpus)
            spawned.append(workers[key])
            await eventually(lambda: _online(coordinator, key), what=f"worker {i} connected")

        async def restart(key: str, gpus: int = 2) -> None:
            workers[key].send_signal(signal.SIGTERM)
            await asyncio.to_thread(workers[key].wait, 30)  # the coordinator runs in this event loop
            await eventually(lambda: _offline(coordinator, key), what="the worker disconnected")
            await start(key, gpus)

        # Two nodes online (the third is not: no spare yet) take a 4-GPU lease, 2 GPUs each.
        for key in keys[:2]:
            await start(key)
        lease, placed = await running_lease(world, api, chain, LEASE_SECONDS)
        refusing, kept = placed
        [spare] = set(keys) - set(placed)

        # The first node comes back with 1 GPU: given its 2-GPU share again, it refuses it, is slashed
        # (jailed) once; no node can take its share yet.
        await restart(refusing, gpus=1)
        await eventually(lambda: _jailed(chain, refusing), what="the refusing node slashed, so jailed")
        assert await _faults(pool, refusing) == ["FailedVerification"]
        # Reconnecting, it is not given the lease again (it would refuse again); the other node of the
        # lease, reconnecting, is given it again and runs it (the control).
        await restart(refusing, gpus=1)
        await restart(kept)
        await eventually(lambda: all_running(api, world.client, lease, [kept]), what="the job again on the kept node")
        await eventually(lambda: _settled_dispatch(coordinator, str(lease), kept), what="the kept node given its share")
        assert await _faults(pool, refusing) == ["FailedVerification"], "the refusing node was given the lease again"
        assert _refusals(tmp_path, keys.index(refusing)) == 1
        assert await _assigned(chain, lease) == [refusing, kept]

        # A spare comes online: the refused share moves to it at once (not at the lease's end) and runs.
        await start(spare)
        moved = await eventually(lambda: _moved_to(chain, lease, refusing), timeout=30, what="the share moved")
        assert sorted(moved) == sorted([kept, spare])
        await eventually(lambda: all_running(api, world.client, lease, [kept, spare]), what="the job on the spare")
        assert await _faults(pool, kept) == [] and await _faults(pool, spare) == []


def _refusals(home: Path, i: int) -> int:
    """The dispatches worker i refused, from its log (each of its sessions' log is appended)."""
    return (home / f"worker{i}.log").read_text().count("coordinator.refused")


async def _settled_dispatch(coordinator, lease: str, key: str) -> bool:
    return Pubkey.from_string(key) in coordinator.shared.dispatched.get(lease, set())


async def _jailed(chain: AsyncClient, key: str) -> bool:
    return (await fetch(chain, node_pda(Pubkey.from_string(key)), "Node")).jailed


async def _online(coordinator, key: str) -> bool:
    return coordinator.gateway.online(Pubkey.from_string(key))


async def _offline(coordinator, key: str) -> bool:
    return not coordinator.gateway.online(Pubkey.from_string(key))


async def _moved_to(chain: AsyncClient, lease: Pubkey, away: str) -> list[str] | None:
    nodes = await _assigned(chain, lease)
    return nodes if away not in nodes and len(nodes) == 2 else None
