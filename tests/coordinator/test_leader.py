"""The election of one leader among coordinator replicas (a lease row in PostgreSQL with a term) and
the fencing of its decisions, on the real database: each rule with its honest control."""

from __future__ import annotations

import asyncio
import contextlib
import time

import asyncpg
import pytest
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed

from coordinator.attester import Attester
from coordinator.db import leader as leader_db
from coordinator.leader import Election, Fenced
from coordinator.metrics import Metrics
from coordinator.service import Coordinator
from coordinator.settings import Settings
from gpunet.accounts import fetch

from .chain import Cluster
from .conftest import eventually, leading_without_loops


class Clock:
    """A monotonic clock the test moves (a paused process sees it jump)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Replica:
    def __init__(self, pool, name: str, *, ttl: float = 30.0, clock=time.monotonic) -> None:
        self.name, self.events, self.metrics = name, [], Metrics()

        async def lead(fence) -> None:
            self.events.append(f"lead {fence.term}")

        async def lose() -> None:
            self.events.append("lose")

        self.election = Election(
            pool,
            name,
            ttl_seconds=ttl,
            renew_seconds=ttl / 3,
            gateway_url=f"ws://{name}:8910/worker",
            api_url=f"http://{name}:8080",
            metrics=self.metrics,
            on_lead=lead,
            on_lose=lose,
            clock=clock,
        )

    def gauge(self, name: str) -> float:
        return self.metrics.registry.get_sample_value(name)

    @property
    def fence(self):
        assert self.election.fence is not None
        return self.election.fence


async def take_from(pool, holder: Replica, taker: Replica) -> None:
    """The lead passes to `taker` while `holder` does not know (as when it is paused)."""
    async with pool.acquire() as conn:
        await leader_db.release(conn, holder.name, holder.fence.term)
    await taker.election.step()
    assert taker.election.leading()


async def test_the_first_replica_leads_and_another_waits_while_the_lead_is_live(pool) -> None:
    a, b = Replica(pool, "a"), Replica(pool, "b")
    await a.election.step()
    await b.election.step()
    assert a.events == ["lead 1"] and a.election.leading() and a.gauge("gpunet_coordinator_leader") == 1
    assert b.events == [] and not b.election.leading() and b.gauge("gpunet_coordinator_leader") == 0
    assert a.gauge("gpunet_coordinator_leader_term") == 1
    async with pool.acquire() as conn:
        lead = await leader_db.current(conn)
    assert (lead.holder, lead.term, lead.live, lead.gateway_url) == ("a", 1, True, "ws://a:8910/worker")


async def test_an_expired_lead_is_taken_with_the_next_term(pool) -> None:
    a, b = Replica(pool, "a", ttl=0.3), Replica(pool, "b")
    await a.election.step()
    assert a.events == ["lead 1"]
    # a renews no more (killed): once its lease has expired by the database's clock, b takes it
    await eventually(lambda: _leads_after_step(b), what="b leading")
    assert b.events == ["lead 2"] and b.gauge("gpunet_coordinator_leader_term") == 2
    await a.election.step()  # a wakes: by its own clock too its lease is over
    assert a.events == ["lead 1", "lose"] and a.gauge("gpunet_coordinator_leader") == 0
    await a.election.step()  # and it does not take the lead back from a live leader
    assert a.events == ["lead 1", "lose"] and b.election.leading()


async def _leads_after_step(replica: Replica) -> bool:
    await replica.election.step()
    return replica.election.leading()


async def test_renewals_keep_the_lead_and_their_absence_loses_it(pool) -> None:
    a, b = Replica(pool, "a", ttl=2.0), Replica(pool, "b")
    await a.election.step()
    until = time.monotonic() + 5.0  # two and a half lease lengths of renewals every 0.2 s
    while time.monotonic() < until:
        await a.election.step()
        await b.election.step()
        assert a.election.leading() and not b.election.leading()
        await asyncio.sleep(0.2)
    assert a.events == ["lead 1"] and b.events == []
    # the control: a stops renewing, and b takes over
    await eventually(lambda: _leads_after_step(b), what="b leading")
    assert b.events == ["lead 2"]


async def test_a_failed_renewal_steps_down_at_once(pool) -> None:
    a, b = Replica(pool, "a"), Replica(pool, "b")
    await a.election.step()
    await a.election.step()  # the control: a renewal that succeeds keeps the lead
    assert a.events == ["lead 1"] and a.election.leading()
    await take_from(pool, a, b)
    await a.election.step()  # its renewal of term 1 fails
    assert a.events == ["lead 1", "lose"] and not a.election.leading()
    await b.election.step()
    assert b.events == ["lead 2"] and b.election.leading()


async def test_a_paused_leader_steps_down_by_its_own_clock(pool) -> None:
    clock = Clock()
    a = Replica(pool, "a", clock=clock)
    await a.election.step()
    clock.now += 5  # a short gap: the lease (30 s) holds
    await a.election.step()
    assert a.events == ["lead 1"] and a.election.leading()
    clock.now += 31  # a pause longer than the lease since its last renewal
    assert not a.election.leading()  # no decision passes from here on
    async with pool.acquire() as conn:
        assert (await leader_db.current(conn)).live  # the database still has it (its clock did not jump)
    await a.election.step()
    assert a.events == ["lead 1", "lose"] and a.gauge("gpunet_coordinator_leader") == 0


async def test_fencing_refuses_a_stale_term_that_still_believes_it_leads(pool) -> None:
    a, b = Replica(pool, "a"), Replica(pool, "b")
    await a.election.step()
    await a.fence.intend("assign", "lease-1")  # the control: the current term decides
    stale = a.fence
    await take_from(pool, a, b)
    assert a.election.leading()  # a has not noticed (its clock says its lease holds): the database refuses
    with pytest.raises(Fenced):
        await stale.intend("assign", "lease-2")
    with pytest.raises(Fenced):
        async with pool.acquire() as conn, stale.decision(conn):
            pass
    assert a.gauge("gpunet_coordinator_fenced_decisions_total") == 2
    assert not a.election.leading()  # a refusal makes it step down at once
    await a.election.step()
    assert a.events == ["lead 1", "lose"]
    # following, it tries for the lead at its pace again (every renewal interval), not in a spin
    rounds, step = [], a.election.step

    async def counted() -> None:
        rounds.append(1)
        await step()

    a.election.step = counted  # type: ignore[method-assign]
    running = asyncio.create_task(a.election.run())
    await asyncio.sleep(0.5)
    running.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await running
    assert 1 <= len(rounds) <= 2
    await b.fence.intend("assign", "lease-2")
    async with pool.acquire() as conn:
        assert await leader_db.decisions(conn) == [(1, "a", "assign", "lease-1"), (2, "b", "assign", "lease-2")]


@pytest.fixture
async def three_nodes(node):
    async with AsyncClient(node.url, commitment=Confirmed) as client:
        yield await Cluster().build(client, nodes=3, assign=False)


async def test_a_stale_leader_is_refused_before_the_chain(pool, three_nodes) -> None:
    c = three_nodes
    a, b = Replica(pool, "a"), Replica(pool, "b")
    await a.election.step()
    stale = Attester(c.client, c.admin, intend=a.fence.intend)
    await take_from(pool, a, b)
    with pytest.raises(Fenced):
        await stale.assign(c.lease, [c.share(0), c.share(1)])
    assert type((await fetch(c.client, c.lease, "Lease")).status).__name__ != "Active"  # nothing was sent
    # the control: the current leader's assign lands, recorded under its term first
    await Attester(c.client, c.admin, intend=b.fence.intend).assign(c.lease, [c.share(0), c.share(1)])
    assert type((await fetch(c.client, c.lease, "Lease")).status).__name__ == "Active"
    async with pool.acquire() as conn:
        assert await leader_db.decisions(conn) == [(2, "b", "assign", str(c.lease))]


async def test_a_leader_paused_inside_a_decision_does_not_keep_the_lead(pool) -> None:
    a, b = Replica(pool, "a", ttl=1.0), Replica(pool, "b")
    await a.election.step()
    conn = await pool.acquire()
    try:
        with pytest.raises((asyncpg.PostgresError, asyncpg.InterfaceError)):
            async with a.fence.decision(conn):
                # a is paused here, holding the leader row's share lock: once its lease has expired, b's
                # takeover waits on that lock only until the server ends a's idle transaction
                await eventually(lambda: _leads_after_step(b), timeout=30, what="b leading")
                await conn.execute("SELECT 1")  # a wakes and goes on with its decision: its session is gone
    finally:
        await pool.release(conn)
    assert b.events == ["lead 2"]


async def test_replicas_given_one_name_are_still_two(node, database_url, pool, market) -> None:
    """One configuration for every replica (the same GPUNET_REPLICA_ID): the follower must still see
    the leader as another replica, and send its workers there, rather than take its lead for its own."""
    settings = Settings(rpc_url=node.url, ws_url=node.ws_url, database_url=database_url, replica_id="coordinator")
    first, second = Coordinator(settings, pool, market.admin), Coordinator(settings, pool, market.admin)
    try:
        await leading_without_loops(first)
        assert first.replica != second.replica and first.replica.startswith("coordinator-")
        lead = await second.other_leader()
        assert lead is not None and lead.holder == first.replica  # the control: the leader sees none other
        assert await first.other_leader() is None
    finally:
        for coordinator in (first, second):
            await coordinator.chain.close()


async def test_the_decisions_log_forgets_what_is_older_than_its_retention(pool) -> None:
    async with pool.acquire() as conn:
        for kind, days_ago in (("settle", 40), ("assign", 31), ("slash", 2), ("settle", 0)):
            await conn.execute(
                "INSERT INTO decisions (term, holder, kind, subject, at) "
                "VALUES (1, 'r', $1, 'x', now() - make_interval(days => $2))",
                kind,
                days_ago,
            )
        assert await leader_db.forget_decisions(conn, 30 * 86_400) == 2
        assert [kind for _, _, kind, _ in await leader_db.decisions(conn)] == ["slash", "settle"]  # the recent kept
        assert await leader_db.forget_decisions(conn, 30 * 86_400) == 0
