"""Fencing without exception: what a node says about a lease counts only from a node that holds
its share now, under that share's epoch, about a job the lease has had. A registered node off the
lease (a real WebSocket session with the gateway, speaking gpunet.protocol with its own key) can
neither write into the client's view, nor end the lease's next job before it runs, nor make its
supplier a reader of the lease's job; the lease's own nodes (their sessions, under their epochs)
are the honest control."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from solders.keypair import Keypair

from coordinator.attester import Attester
from coordinator.db import jobs
from coordinator.service import Coordinator
from gpunet.protocol import Dispatch, Heartbeat, JobLog, JobSpec, JobStatus, encode, parse_coordinator_message

from .conftest import eventually
from .test_client_api import _body, _signed, serving
from .test_gateway import _admitted
from .test_returning_node import Gateway, three_nodes  # noqa: F401 (three_nodes: a fixture)

ORIGIN = "0123456789abcdef"


class NodeSession:
    """A node's session with the coordinator's gateway, played by the test: it heartbeats (so the
    node stays online) and keeps every message the coordinator sends it."""

    def __init__(self, ws: Any) -> None:
        self.ws, self.received, self.n = ws, asyncio.Queue[Any](), 0
        self._tasks = [asyncio.create_task(self._beat()), asyncio.create_task(self._read())]

    async def _beat(self) -> None:
        while True:
            await self.ws.send(encode(Heartbeat(simulated=True, healthy=True, gpus=[])))
            await asyncio.sleep(0.5)

    async def _read(self) -> None:
        with contextlib.suppress(Exception):
            while True:
                await self.received.put(parse_coordinator_message(await self.ws.recv()))

    async def say(self, message: JobStatus | JobLog) -> None:
        """Sends a numbered job message and waits until the gateway has handled it."""
        self.n += 1
        await self.ws.send(encode(message.model_copy(update={"origin": ORIGIN, "n": self.n})))
        await self.next(lambda m: m.type == "recorded" and m.upto == self.n)

    async def next(self, wanted: Any, timeout: float = 60.0) -> Any:
        """The next message the coordinator sends that `wanted` accepts (the others are dropped)."""
        async with asyncio.timeout(timeout):
            while not wanted(message := await self.received.get()):
                pass
        return message

    async def dispatch(self, lease: str, number: int) -> Dispatch:
        return await self.next(lambda m: isinstance(m, Dispatch) and m.lease == lease and m.job_number == number)

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await self.ws.close()


@contextlib.asynccontextmanager
async def sessions(coordinator: Coordinator, *keys: Keypair) -> AsyncIterator[list[NodeSession]]:
    opened = [NodeSession(await _admitted(coordinator.gateway, key)) for key in keys]
    try:
        yield opened
    finally:
        for session in opened:
            await session.close()


@pytest.fixture
async def three_placed(node, pool, database_url):
    """A running coordinator and its API; the client's lease assigned on chain to nodes 0 and 1 of
    three registered nodes (node 2 is registered, staked and admitted, just not on this lease)."""
    async with serving(node, pool, database_url, assign=True, nodes=3) as served:
        yield served


async def _events(pool, lease: str) -> list[tuple[str, int, str | None, str | None]]:
    async with pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT node_key, job_number, state, line FROM job_events WHERE lease = $1 ORDER BY id", lease
        )
    return [(r["node_key"], r["job_number"], r["state"], r["line"]) for r in rows]


async def test_a_node_off_the_lease_writes_nothing_into_it_ends_none_of_its_jobs_and_its_supplier_reads_nothing(
    three_placed,
) -> None:
    http, world, pool, coordinator = three_placed
    lease, path = str(world.lease), f"/leases/{world.lease}/job"
    (supplier0, key0), (_, key1), (stranger_supplier, stranger) = world.nodes
    spec = JobSpec(command=["train"], env={"PLAIN_ENV": "plain-value"})
    assert (await http.post(path, json=_body(world, spec))).status_code == 201
    async with sessions(coordinator, key0, key1, stranger) as (node0, node1, hostile):
        epochs = {0: (await node0.dispatch(lease, 1)).epoch, 1: (await node1.dispatch(lease, 1)).epoch}
        assert None not in epochs.values()

        # the stranger speaks for the lease: with no epoch (the "older worker"), with a made-up one,
        # and ahead, for the job the client has not submitted yet
        made_up = str(Keypair().sign_message(b"an epoch"))
        for epoch in (None, made_up):
            await hostile.say(JobLog(simulated=True, lease=lease, stream="stdout", line="fake line", epoch=epoch))
            await hostile.say(JobStatus(simulated=True, lease=lease, state="failed", detail="fake", epoch=epoch))
            await hostile.say(JobStatus(simulated=True, lease=lease, job_number=2, state="succeeded", epoch=epoch))
        assert await _events(pool, lease) == []  # nothing recorded
        # ...and what a coordinator recorded of it before the fence was whole is never read
        async with pool.acquire() as conn:
            for number, kind, state, line in ((1, "log", None, "stored junk"), (2, "status", "succeeded", None)):
                await conn.execute(
                    "INSERT INTO job_events (lease, job_number, node_key, kind, state, line) "
                    "VALUES ($1, $2, $3, $4, $5, $6)",
                    lease,
                    number,
                    str(stranger.pubkey()),
                    kind,
                    state,
                    line,
                )
        refused = await http.get(path, headers=_signed(stranger_supplier, path))  # its supplier reads nothing
        assert refused.status_code == 401 and "plain-value" not in refused.text, refused.text

        # the control: the lease's nodes, each under its epoch, are recorded, and their suppliers read
        await node0.say(JobLog(simulated=True, lease=lease, stream="stdout", line="step 1", epoch=epochs[0]))
        for session, i in ((node0, 0), (node1, 1)):
            await session.say(JobStatus(simulated=True, lease=lease, state="succeeded", epoch=epochs[i]))
        # a node of the lease does not speak ahead either: job 3 is not the lease's yet
        await node0.say(JobStatus(simulated=True, lease=lease, job_number=3, state="succeeded", epoch=epochs[0]))
        assert [e for e in await _events(pool, lease) if e[0] != str(stranger.pubkey())] == [
            (str(key0.pubkey()), 1, None, "step 1"),
            (str(key0.pubkey()), 1, "succeeded", None),
            (str(key1.pubkey()), 1, "succeeded", None),
        ]
        view = await http.get(path, headers=_signed(supplier0, path))
        assert view.status_code == 200 and view.json()["job"]["env"] == {"PLAIN_ENV": "plain-value"}, view.text
        client_view = (await http.get(path, headers=_signed(world.client_wallet, path))).json()
        assert [line["line"] for line in client_view["logs"]] == ["step 1"]
        assert {n["node_key"] for n in client_view["nodes"]} == {str(key0.pubkey()), str(key1.pubkey())}

        # job 2 and then job 3 run on both nodes: neither the stranger's `succeeded` for job 2 nor
        # node 0's for job 3 ends them before they ran
        for number in (2, 3):
            body = _body(world, JobSpec(command=[f"job{number}"]), number=number)
            assert (await http.post(path, json=body)).status_code == 201
            for session, i in ((node0, 0), (node1, 1)):
                dispatched = await session.dispatch(lease, number)
                assert not dispatched.job_ended, f"job {number} told ended on node {i} before it ran"
            for session, i in ((node0, 0), (node1, 1)):
                await session.say(
                    JobStatus(simulated=True, lease=lease, job_number=number, state="succeeded", epoch=epochs[i])
                )


async def test_a_supplier_reads_a_lease_s_job_while_its_node_holds_the_share_or_held_it_during_that_job(
    three_nodes,  # noqa: F811 (the fixture)
    settings,
    pool,
    indexer,
) -> None:
    c = three_nodes
    lease = str(c.lease)
    (lost_supplier, lost), (stays_supplier, _), (spare_supplier, _) = c.nodes
    attester = Attester(c.client, c.admin)
    await attester.assign(c.lease, [c.share(0), c.share(1)])

    async def reads(supplier: Keypair) -> bool:
        async with pool.acquire() as conn:
            return await jobs.supplies_lease(conn, lease, str(supplier.pubkey()))

    async def submit(number: int) -> None:  # as the API stores the client's signed job
        async with pool.acquire() as conn:
            spec = JobSpec(command=[f"job{number}"])
            assert await jobs.save_job(conn, lease, number, spec, 2, str(c.client_wallet.pubkey()), "signature")

    async def lost_epoch() -> str | None:
        async with pool.acquire() as conn:
            return await conn.fetchval(
                "SELECT assigned_by FROM assignments WHERE lease = $1 AND node_key = $2", lease, str(lost.pubkey())
            )

    epoch = await eventually(lost_epoch, what="the assignment indexed")
    await submit(1)
    assert await reads(lost_supplier) and await reads(stays_supplier) and not await reads(spare_supplier)
    await asyncio.sleep(1.1)  # the chain's clock counts whole seconds: the move comes after job 1's
    await attester.slash(lost.pubkey(), "MissedHeartbeats", {"node": str(lost.pubkey()), "lease": lease}, lease=c.lease)
    await attester.reassign(c.lease, lost.pubkey(), c.share(2))
    await eventually(lambda: reads(spare_supplier), what="the move indexed")
    # job 1 was there to run while the lost node held its share: its supplier still reads it
    assert await reads(lost_supplier) and await reads(stays_supplier)

    await asyncio.sleep(1.1)
    await submit(2)  # after the move: the lost node never held job 2's share
    coordinator = Coordinator(settings, pool, c.admin)  # not started: only what workers say is handled
    try:
        workers = coordinator.workers
        workers.link = Gateway()  # what it is told is kept, not sent
        for sent_epoch in (epoch, None):  # its old epoch, or none: neither is recorded, nor makes it a reader
            await workers.job_status(
                lost.pubkey(), JobStatus(simulated=True, lease=lease, job_number=2, state="running", epoch=sent_epoch)
            )
        assert await _events(pool, lease) == []
    finally:
        await coordinator.chain.close()
    assert not await reads(lost_supplier)
    assert await reads(stays_supplier) and await reads(spare_supplier)  # the control: the holders' suppliers
