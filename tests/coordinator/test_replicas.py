"""Two coordinator replicas (`gpunet coordinator run` processes) on one PostgreSQL, with real
workers given both gateways and a running cluster lease.

The leader is paused (SIGSTOP) past its lease: the other takes over; resumed (SIGCONT), the old
leader writes no decision and follows. Then the new leader is SIGKILLed: the first takes the lead
back, the workers reconnect to it, the lease's usage keeps settling, and a worker killed after the
takeover is failed over exactly once. Throughout, the ledger and the chain show no decision twice:
one assignment of the lease, one slash and one move of the lost node's share, no receipt settled twice,
and no decision of a term recorded after a later term's."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solders.pubkey import Pubkey

from coordinator.db import leader as leader_db
from gpunet.accounts import fetch
from gpunet.demo.processes import CoordinatorProcess
from gpunet.history import transactions_of
from gpunet.keys import create_keypair_file
from gpunet.pda import node_pda
from gpunet.reach import ReachError, open_access, reach_info
from gpunet.tunnel import EXIT, AccessRequest, read_frame
from worker.session import CLOSE_TIMEOUT_SECONDS, PING_SECONDS, PING_TIMEOUT_SECONDS

from .conftest import eventually
from .world import World, checkpointed, resumed_on, running_lease, settlement_events, start_worker


@pytest.fixture
async def chain(node):
    async with AsyncClient(node.url, commitment=Confirmed) as client:
        yield client


def replica(name: str, node, database_url: str, tmp_path, attester) -> CoordinatorProcess:
    home = tmp_path / name
    home.mkdir()
    return CoordinatorProcess(
        home,
        node.url,
        node.ws_url,
        attester,
        database_url=database_url,
        replica_id=name,
        poll_seconds=1,
        heartbeat_seconds=0.5,
        lost_after_seconds=3,
        settle_seconds=1,
        settle_interval_seconds=0,  # every receipt as it comes: settling is seen to go on
        settle_min_amount=0,
        leader_ttl_seconds=3,
        leader_renew_seconds=1,
    )


@contextlib.asynccontextmanager
async def two_replicas(
    world: World, node, database_url: str, tmp_path: Path, pool
) -> AsyncIterator[tuple[CoordinatorProcess, CoordinatorProcess]]:
    """Replicas r1 and r2 of the world's coordinator (its admin the attester), r1 leading and r2
    ready; at the end both stopped (woken first: a frozen one cannot stop) and their logs named."""
    attester = tmp_path / "attester.json"
    create_keypair_file(attester, world.admin)
    r1, r2 = (replica(name, node, database_url, tmp_path, attester) for name in ("r1", "r2"))
    try:
        r1.start()
        await eventually(lambda: leads(pool, "r1"), what=f"r1 leading (log: {r1.log})")
        r2.start()
        await asyncio.to_thread(r2.wait_ready)
        yield r1, r2
    finally:
        for proc in (r1, r2):
            if proc.proc is not None and proc.alive():
                proc.proc.send_signal(signal.SIGCONT)
            proc.stop(60)
        print(f"replica logs: {r1.log} {r2.log}", file=sys.stderr)


async def leader(pool) -> leader_db.Leader:
    async with pool.acquire() as conn:
        return await leader_db.current(conn)


async def leads(pool, name: str) -> bool:
    lead = await leader(pool)
    return lead.live and lead.holder.rsplit("-", 1)[0] == name  # the name, then the process's suffix


async def decisions(pool) -> list[tuple[int, str, str, str]]:
    async with pool.acquire() as conn:
        return await leader_db.decisions(conn)


async def metric(api: str, name: str) -> float | None:
    """A sample of the replica's /metrics, read with Prometheus' own text parser."""
    async with httpx.AsyncClient(timeout=5) as http:
        text = (await http.get(f"{api}/metrics")).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                return sample.value
    return None


async def workers_online(api: str, count: int) -> bool:
    """`count` workers connected to the leader (a follower's API redirects there)."""
    try:
        async with httpx.AsyncClient(timeout=5, follow_redirects=True) as http:
            response = await http.get(f"{api}/workers")
    except httpx.HTTPError:
        return False
    return response.status_code == 200 and sum(w["connected"] for w in response.json()["items"]) >= count


async def settled(chain, lease) -> int:
    return len(await settlement_events(chain, lease))


async def slashes_of(chain, node_key: str) -> int:
    node = node_pda(Pubkey.from_string(node_key))
    return sum(e.name == "ProviderSlashed" for tx in await transactions_of(chain, node) for e in tx.events)


@pytest.mark.timeout(480)
async def test_replicas_hand_over_the_lead_without_losing_or_doubling_work(
    node, chain, pool, database_url, tmp_path, spawned
) -> None:
    world = await World().build(chain, tmp_path)
    async with two_replicas(world, node, database_url, tmp_path, pool) as (r1, r2):
        assert await leads(pool, "r1")  # a live lead is not taken
        gateways = f"{r1.gateway_url},{r2.gateway_url}"
        workers = {
            key: start_worker(world, i, gateways, tmp_path / f"worker{i}.log", {"GPUNET_WORKER_RPC_URL": node.url})
            for i, key in enumerate(world.node_keys())
        }
        spawned.extend(workers.values())
        await eventually(lambda: workers_online(r2.api_url, 3), what="the workers on the leader")
        # the client speaks to the follower: its API serves the ledger and redirects what the leader knows
        lease, placed = await running_lease(world, r2.api_url, chain, 600)
        # and any replica relays: each worker links its data plane to both, the follower's reaches the job
        assert (
            await eventually(lambda: _exit_through(r2.api_url, chain, world, lease), what="the follower's relay") == 5
        )
        assert (await reach_info(r2.api_url, world.client, lease))["relay"].startswith(r2.gateway_url.rsplit("/", 1)[0])
        await eventually(lambda: settled(chain, lease), what="a first settlement")

        # --- the leader paused past its lease: the other takes over, the old one cannot decide
        r1.proc.send_signal(signal.SIGSTOP)
        await eventually(lambda: leads(pool, "r2"), what="r2 leading while r1 is paused")
        term2 = (await leader(pool)).term
        before = [d for d in await decisions(pool) if d[0] < term2]  # r1 is stopped: it can add none
        r1.proc.send_signal(signal.SIGCONT)
        await eventually(
            lambda: _equals(metric(r1.api_url, "gpunet_coordinator_leader"), 0.0), what="r1 following again"
        )
        await eventually(lambda: workers_online(r2.api_url, 3), what="the workers on r2")
        settled_by_2 = await eventually(lambda: _settled_in(pool, term2), what="r2 settling usage")
        assert [d for d in await decisions(pool) if d[0] < term2] == before  # r1 decided nothing after waking
        assert await metric(r1.api_url, "gpunet_coordinator_leader_term") == 1  # it did not lead again

        # --- the leader SIGKILLed mid-lease: the first takes the lead back
        r2.kill()
        await eventually(lambda: leads(pool, "r1"), what="r1 leading after r2's kill")
        term3 = (await leader(pool)).term
        assert term3 == term2 + 1
        await eventually(lambda: workers_online(r1.api_url, 3), what="the workers reconnected to r1")
        count = await settled(chain, lease)
        await eventually(lambda: _more(settled(chain, lease), count), what="usage settling on after the takeover")
        assert await _settled_in(pool, term3) and settled_by_2

        # --- a worker lost after the takeover is failed over exactly once
        victim, spare = placed[0], next(k for k in world.node_keys() if k not in placed)
        await eventually(lambda: checkpointed(pool, lease, 0), what="rank 0's checkpoint")  # what the spare resumes
        workers[victim].send_signal(signal.SIGKILL)
        await eventually(lambda: resumed_on(r1.api_url, world.client, lease, spare), timeout=120, what="the failover")
        account = await fetch(chain, lease, "Lease")
        assert {str(a.node_key) for a in list(account.assignments)[: account.node_count]} == {placed[1], spare}
        assert await slashes_of(chain, victim) == 1
        for other in (placed[1], spare):
            assert await slashes_of(chain, other) == 0  # nobody else is punished for the handovers

        # --- no decision twice (each by one term only: a send retried after a transport error is
        # recorded again, by the same term), and none of a term after a later term's
        made = await decisions(pool)

        def terms_of(kind: str, subject: str) -> set[int]:
            return {d[0] for d in made if d[2] == kind and d[3].startswith(subject)}

        assert len(terms_of("assign", str(lease))) == 1 and {d[2] for d in made if d[3] == str(lease)} == {"assign"}
        assert terms_of("slash", victim) == {term3}
        assert terms_of("reassign", f"{lease} {victim}") == {term3}
        assert [d[0] for d in made] == sorted(d[0] for d in made)
        events = await settlement_events(chain, lease)
        assert len({(e.node, e.epoch, e.receipt_gpu_seconds) for e in events}) == len(events)
        for share in {(e.node, e.epoch) for e in events}:
            mine = [e.receipt_gpu_seconds for e in events if (e.node, e.epoch) == share]
            assert mine == sorted(mine)


async def _exit_through(api: str, chain, world: World, lease) -> int | None:
    """The exit code of `sh -c 'exit 5'` in rank 0's job, through `api`'s replica's relay."""
    request = AccessRequest(kind="exec", lease=str(lease), command=["sh", "-c", "exit 5"])
    try:
        access = await open_access(api, chain, world.client, lease, request, direct=False)
    except ReachError as e:
        if "no data-plane link" in str(e):
            return None  # the worker's link to this replica is not up yet
        raise
    while (frame := await read_frame(access.channel)) is not None:
        if frame[0] == EXIT:
            return int.from_bytes(frame[1], "big", signed=True)
    return None


async def _equals(value, expected) -> bool:
    try:
        return await value == expected
    except httpx.HTTPError:
        return False


async def _more(value, than: int) -> bool:
    return await value > than


async def _settled_in(pool, term: int) -> int:
    return sum(d[0] == term and d[2] == "settle" for d in await decisions(pool))


FROZEN_SECONDS = 12.0
# A silent gateway is left within a ping interval and its timeout; a try of the follower (which names
# the leader) and the leader's welcome fit in the rest.
PING_BOUND = PING_SECONDS + PING_TIMEOUT_SECONDS + CLOSE_TIMEOUT_SECONDS + 2


@pytest.mark.timeout(300)
async def test_a_frozen_leader_s_workers_reach_the_new_leader_within_the_keepalive_bound(
    node, chain, pool, database_url, tmp_path, spawned
) -> None:
    """The leader freezes (SIGSTOP) for 9 s with its workers on it: the other replica takes over, and
    the workers reach it within PING_BOUND of the freeze (their keepalive leaves a silent gateway,
    the follower they try names the leader), not when the frozen one wakes; the woken one then
    steps down and keeps no worker."""
    world = await World().build(chain, tmp_path)
    async with two_replicas(world, node, database_url, tmp_path, pool) as (r1, r2):
        gateways = f"{r1.gateway_url},{r2.gateway_url}"
        workers = [start_worker(world, i, gateways, tmp_path / f"worker{i}.log") for i in range(len(world.suppliers))]
        spawned.extend(workers)
        await eventually(lambda: workers_online(r1.api_url, 3), what="the workers on r1")

        r1.proc.send_signal(signal.SIGSTOP)
        frozen = time.monotonic()
        await eventually(lambda: leads(pool, "r2"), what="r2 leading while r1 is frozen")
        await eventually(lambda: workers_online(r2.api_url, 3), timeout=PING_BOUND + 5, what="the workers on r2")
        reached = time.monotonic() - frozen
        assert reached <= PING_BOUND < FROZEN_SECONDS, f"the workers reached the new leader {reached:.1f} s in"
        await asyncio.sleep(max(0.0, FROZEN_SECONDS - (time.monotonic() - frozen)))
        r1.proc.send_signal(signal.SIGCONT)
        await eventually(
            lambda: _equals(metric(r1.api_url, "gpunet_coordinator_leader"), 0.0), what="r1 following again"
        )
        assert await workers_online(r2.api_url, 3) and await leads(pool, "r2")
