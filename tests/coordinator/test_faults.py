"""The coordinator never punishes the innocent, with real processes (gpunet-localnet, embedded
PostgreSQL, the coordinator, three workers): its own stall slashes nobody while a worker really
lost in the same run is slashed once; a correlated outage of every worker pauses slashing, which
resumes with the fleet, and the lease goes on."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solders.pubkey import Pubkey

from coordinator.settings import Settings
from gpunet.accounts import fetch
from gpunet.audit import audit_provider
from gpunet.pda import node_pda, provider_pda
from gpunet.protocol import JobSpec
from tests.worker.sandboxes import job_pid
from worker.journal import Journal

from .conftest import eventually
from .world import (
    JOB,
    World,
    all_running,
    checkpointed,
    live_settings,
    resumed_on,
    running,
    running_lease,
    settled_count,
    start_workers,
    truly,
)

LOST_AFTER = 2.0


@pytest.fixture
async def chain(node):
    async with AsyncClient(node.url, commitment=Confirmed) as client:
        yield client


async def _slashed(chain: AsyncClient, world: World) -> dict[str, int]:
    return {
        str(key.pubkey()): (await fetch(chain, provider_pda(wallet.pubkey()), "Provider")).slashed
        for wallet, key in world.suppliers
    }


async def _refused_reports(pool) -> list[str]:
    async with pool.acquire() as conn:
        return [r["reason"] for r in await conn.fetch("SELECT reason FROM usage_receipts WHERE status = 'refused'")]


def _settings(node, database_url: str) -> Settings:
    return live_settings(
        node,
        database_url,
        lost_after_seconds=LOST_AFTER,
        settle_seconds=1,
        settle_interval_seconds=0,  # every receipt as it comes (production: hourly)
        settle_min_amount=0,
        close_grace_seconds=4,
        reconnect_grace_seconds=2,
    )


@contextlib.asynccontextmanager
async def _a_lease_billing(
    node, chain: AsyncClient, pool, database_url: str, tmp_path: Path, spawned
) -> AsyncIterator[tuple[World, str, dict[str, subprocess.Popen], Pubkey, list[str]]]:
    """The world with its coordinator (API at `api`) and a worker per node, and a 120 s lease running
    on two of them, settled once; every worker killed at the end (woken first, if it was stopped)."""
    world = await World().build(chain, tmp_path)
    settings = _settings(node, database_url)
    api = f"http://127.0.0.1:{settings.api_port}"
    async with running(settings, pool, world.admin) as coordinator:
        workers = await start_workers(world, coordinator, tmp_path, spawned)
        lease, placed = await running_lease(world, api, chain, 120)
        await eventually(lambda: settled_count(pool, placed[0]), what="a first settlement")
        yield world, api, workers, lease, placed
    for proc in workers.values():
        proc.send_signal(signal.SIGCONT)
        proc.kill()
        proc.wait(timeout=30)


async def _every_worker_stops(workers: dict[str, subprocess.Popen], api: str) -> None:
    """Every worker stops at once (a network partition, a power cut): the coordinator pauses slashing."""
    for proc in workers.values():
        proc.send_signal(signal.SIGSTOP)
    await eventually(lambda: _slashing_paused(api, True), timeout=30, what="slashing paused")


@pytest.mark.timeout(300)
async def test_the_coordinator_s_own_stall_slashes_nobody_and_a_real_loss_is_slashed_once(
    node, chain, pool, database_url, tmp_path, spawned
) -> None:
    world = await World().build(chain, tmp_path)
    settings = _settings(node, database_url)
    api = f"http://127.0.0.1:{settings.api_port}"
    async with running(settings, pool, world.admin) as coordinator:
        workers = await start_workers(world, coordinator, tmp_path, spawned)
        _, placed = await running_lease(world, api, chain, 120)
        survivor = placed[1]
        await eventually(lambda: settled_count(pool, survivor), what="a first settlement")

        # The control: one leased worker really dies. Then, before its silence is judged, the
        # coordinator itself stalls for 2 x lost_after (its event loop blocked, as under SIGSTOP):
        # every heartbeat of that time waits in its sockets. (Shorter than the workers' 5 s ping
        # timeout: a longer stall makes them reconnect, and the dead node's judgement can then wait
        # on repeated correlated-outage pauses; see the note.)
        lost = placed[0]
        workers[lost].send_signal(signal.SIGKILL)
        await asyncio.sleep(0.3)
        time.sleep(2 * LOST_AFTER)

        await eventually(lambda: _jailed(chain, lost), timeout=60, what="the lost worker's node jailed")
        await asyncio.sleep(3 * LOST_AFTER)  # time for a wrong judgement to show
        slashed = await _slashed(chain, world)
        assert slashed[lost] > 0, "the worker that really died is slashed"
        assert [k for k, amount in slashed.items() if amount] == [lost], "nobody else is slashed"
        async with pool.acquire() as conn:
            assert await conn.fetchval("SELECT count(*) FROM faults") == 1
        # The evidence the coordinator recorded and serves hashes to what the slash put on chain.
        provider = (await fetch(chain, node_pda(Pubkey.from_string(lost)), "Node")).provider

        async def evidence_matches() -> bool:
            statuses = [e.status for e in (await audit_provider(chain, provider, api)).evidence]
            assert "differs" not in statuses, statuses
            return statuses == ["matches"]

        await eventually(evidence_matches, what="the slash's evidence served and checked")
        assert not (await fetch(chain, node_pda(Pubkey.from_string(survivor)), "Node")).jailed
        # the survivor's usage across the stall is paid: nothing of it was refused as an over-claim
        before = await settled_count(pool, survivor)
        await eventually(lambda: _more(settled_count(pool, survivor), before), what="settlements after the stall")
        assert await _refused_reports(pool) == []
    for proc in workers.values():
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)


@pytest.mark.timeout(300)
async def test_a_correlated_outage_pauses_slashing_and_the_lease_goes_on(
    node, chain, pool, database_url, tmp_path, spawned
) -> None:
    billing = _a_lease_billing(node, chain, pool, database_url, tmp_path, spawned)
    async with billing as (world, api, workers, lease, placed):
        await _every_worker_stops(workers, api)
        await asyncio.sleep(2 * LOST_AFTER)
        for proc in workers.values():
            proc.send_signal(signal.SIGCONT)
        await eventually(lambda: _slashing_paused(api, False), timeout=30, what="slashing resumed")

        assert not any((await _slashed(chain, world)).values()), "nobody is slashed for a correlated outage"
        account = await fetch(chain, lease, "Lease")
        assert {str(a.node_key) for a in list(account.assignments)[: account.node_count]} == set(placed)
        before = await settled_count(pool, placed[0])
        await eventually(
            lambda: _more(settled_count(pool, placed[0]), before),
            timeout=60,
            what="the lease billed again after the outage",
        )
        await eventually(
            lambda: all_running(api, world.client, lease, placed), what="the job still running on both nodes"
        )


@pytest.mark.timeout(300)
async def test_machines_back_one_by_one_after_a_correlated_outage_are_all_paid_and_none_is_slashed(
    node, chain, pool, database_url, tmp_path, spawned
) -> None:
    """Every worker stops at once; they come back one after another (the lease's two nodes last,
    1.6 s after the pause has ended, within lost_after of it): nobody is slashed or moved, and each
    share is paid every GPU-second its worker's own journal says it held, the outage included."""
    billing = _a_lease_billing(node, chain, pool, database_url, tmp_path, spawned)
    async with billing as (world, api, workers, lease, placed):
        await _every_worker_stops(workers, api)
        await asyncio.sleep(LOST_AFTER)
        spare = next(k for k in workers if k not in placed)
        for key, gap in [(spare, 0.0), (placed[0], 0.7), (placed[1], 1.6)]:  # the pause ends at the second
            await asyncio.sleep(gap)
            workers[key].send_signal(signal.SIGCONT)
        await eventually(lambda: _slashing_paused(api, False), timeout=30, what="slashing resumed")
        await asyncio.sleep(3 * LOST_AFTER)  # time for a wrong judgement to show

        assert not any((await _slashed(chain, world)).values()), "nobody is slashed for a correlated outage"
        async with pool.acquire() as conn:
            assert await conn.fetchval("SELECT count(*) FROM faults") == 0
        account = await fetch(chain, lease, "Lease")
        assert {str(a.node_key) for a in list(account.assignments)[: account.node_count]} == set(placed)

        # The client closes the lease: each worker's final receipt is its journal's whole count.
        await world.market.close_lease(world.lessee, lease)
        journals = {key: tmp_path / f"worker{i}" / "usage.jsonl" for i, key in enumerate(world.node_keys())}

        async def settled_as_journaled() -> dict[str, tuple[int, int, int]] | None:
            account = await fetch(chain, lease, "Lease")
            held: dict[str, tuple[int, int, int]] = {}
            for share in list(account.assignments)[: account.node_count]:
                key = str(share.node_key)
                newest = Journal(journals[key], read_only=True).newest(str(lease), share.epoch)
                if newest is None or not newest.final or share.receipt_gpu_seconds != newest.gpu_seconds:
                    return None
                held[key] = (newest.gpu_seconds, share.receipt_gpu_seconds, share.gpu_seconds)
            return held

        held = await eventually(settled_as_journaled, timeout=60, what="every final receipt settled")
        for key, (journaled, settled, paid) in held.items():
            assert paid == settled == journaled, f"{key}: held {journaled}, settled {settled}, paid {paid}"
        assert await _refused_reports(pool) == []


@pytest.mark.timeout(300)
async def test_a_node_that_returns_after_its_share_moved_is_stopped_within_a_bound(
    node, chain, pool, database_url, tmp_path, spawned
) -> None:
    world = await World().build(chain, tmp_path)
    settings = _settings(node, database_url)
    api = f"http://127.0.0.1:{settings.api_port}"
    # each copy traces in its own work directory (a sandboxed job writes nowhere else)
    spec = JobSpec(command=[sys.executable, JOB], env={"STEPS": "100000", "STEP_SECONDS": "0.2", "TRACE_FILE": "trace"})
    async with running(settings, pool, world.admin) as coordinator:
        workers = await start_workers(world, coordinator, tmp_path, spawned)
        lease, placed = await running_lease(world, api, chain, 120, spec)
        gone, stayed = placed
        spare = next(k for k in world.node_keys() if k not in placed)
        trace = (world.home, str(lease))
        await eventually(lambda: truly(len(_runs(*trace)) == 2), what="both ranks stepping")
        # what the spare resumes from: the lost rank's own checkpoint (never another rank's)
        await eventually(lambda: checkpointed(pool, lease, placed.index(gone)), what="the rank's checkpoint")
        old_job = job_pid(world.home / f"worker{world.node_keys().index(gone)}" / "jobs" / str(lease) / "work")
        assert old_job is not None, "the job of the node to freeze is not running"

        # The machine freezes (worker and job: a suspended VM, a partition with the job still going):
        # the node is lost, slashed, and its share moves to the spare, where the job resumes.
        frozen = [workers[gone].pid, old_job]
        for pid in frozen:
            os.kill(pid, signal.SIGSTOP)
        await eventually(
            lambda: resumed_on(api, world.client, lease, spare), timeout=60, what="the job resumed on the spare"
        )
        # It comes back: its old job runs again until the coordinator hears its worker and stops it.
        back = time.time()
        for pid in frozen:
            os.kill(pid, signal.SIGCONT)
        await eventually(lambda: truly(not _alive(old_job)), timeout=30, what="the returning job stopped")
        stopped = time.time()

        rank = placed.index(gone)

        async def copies() -> list[tuple[float, float]] | None:
            found = sorted((first, last) for r, first, last in _runs(*trace).values() if r == rank)
            return found if len(found) == 2 else None  # the old copy and the one resumed on the spare

        (_, old_last), (new_first, _) = await eventually(copies, what="the resumed copy stepping")
        # Two copies of the rank ran at once only from the return until the old one was stopped, and
        # that within a bound (a heartbeat, the coordinator's check, the worker's stop grace).
        overlap = old_last - max(new_first, back)
        assert overlap < 5.0 and stopped - back < 10.0, (overlap, stopped - back)
        assert (await _slashed(chain, world))[gone] > 0 and not (await _slashed(chain, world))[stayed]
        account = await fetch(chain, lease, "Lease")
        assert {str(a.node_key) for a in list(account.assignments)[: account.node_count]} == {stayed, spare}
    for proc in workers.values():
        proc.kill()
        proc.wait(timeout=30)


def _runs(home: Path, lease: str) -> dict[str, tuple[int, float, float]]:
    """run -> (rank, first step's time, last step's time), from the jobs' own traces (one per node)."""
    runs: dict[str, tuple[int, float, float]] = {}
    for trace in home.glob(f"worker*/jobs/{lease}/work/trace"):
        for line in trace.read_text().splitlines():
            at, run, rank = line.split()
            first = runs[run][1] if run in runs else float(at)
            runs[run] = (int(rank), first, float(at))
    return runs


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (the worker has not reaped it yet) counts as stopped
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


async def _jailed(chain: AsyncClient, node_key: str) -> bool:
    return (await fetch(chain, node_pda(Pubkey.from_string(node_key)), "Node")).jailed


async def _slashing_paused(api: str, paused: bool) -> bool:
    """Whether the API and /metrics both say slashing is `paused` (as they must agree)."""
    async with httpx.AsyncClient(timeout=10) as http:
        state = (await http.get(f"{api}/workers")).json()["slashing"]
        metrics = (await http.get(f"{api}/metrics")).text
    return state["paused"] is paused and f"gpunet_coordinator_slashing_paused {int(paused)}\n" in metrics


async def _more(count, before: int) -> bool:
    return await count > before
