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
from solders.pubkey import Pubkey
from solders.signature import Signature

from coordinator.attester import Attester
from coordinator.db import jobs
from coordinator.loops.workers import STALE_TOLD, WorkerMessages
from coordinator.service import Coordinator
from gpunet.protocol import (
    Checkpoint,
    CheckpointFile,
    Dispatch,
    Error,
    Heartbeat,
    JobLog,
    JobSpec,
    JobStatus,
    UsageReceiptMessage,
    encode,
    parse_coordinator_message,
)
from gpunet.usage import Receipt

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

    async def say(self, message: JobStatus | JobLog | Checkpoint) -> None:
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

        # a checkpoint too: the holder's under its own epoch is kept; none without the share's epoch
        # (nor under one no share has) replaces it
        def checkpoint(content: bytes, epoch: str | None) -> Checkpoint:
            return Checkpoint(simulated=True, lease=lease, files=[CheckpointFile.of("s", content)], epoch=epoch)

        await node0.say(checkpoint(b"7", epochs[0]))
        for session, epoch, content in ((hostile, None, b"junk"), (node0, None, b"old"), (node0, made_up, b"x")):
            await session.say(checkpoint(content, epoch))
        async with pool.acquire() as conn:
            kept = await jobs.checkpoints_of(conn, lease)
        assert {rank: [f.content() for f in files] for rank, files in kept.items()} == {0: [b"7"]}
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


def _receipt_message(lease: Pubkey, node: Keypair, epoch: int, gpu_seconds: int, through: int) -> str:
    receipt = Receipt(epoch, gpu_seconds, through)
    return encode(
        UsageReceiptMessage(
            simulated=True,
            lease=str(lease),
            epoch=epoch,
            gpu_seconds=gpu_seconds,
            through=through,
            signature=str(Signature.from_bytes(receipt.signature(lease, node))),
        )
    )


async def _receipts(pool) -> list[tuple[str, str, int, int]]:
    async with pool.acquire() as conn:
        rows = await conn.fetch("SELECT lease, node_key, epoch, gpu_seconds FROM usage_receipts ORDER BY lease")
    return [(r["lease"], r["node_key"], int(r["epoch"]), int(r["gpu_seconds"])) for r in rows]


async def test_receipts_are_taken_only_for_a_share_the_node_holds_or_held(three_placed) -> None:
    _, world, pool, coordinator = three_placed
    (_, key0), (_, key1), (_, stranger) = world.nodes
    through = world.started + 4
    async with sessions(coordinator, key0, key1, stranger) as (node0, node1, hostile):

        async def answer(session: NodeSession) -> Any:
            return await session.next(lambda m: m.type in ("ack", "error"))

        # 600 receipts the stranger signed for made-up leases whose addresses sort first (the
        # settlement window's first rows), one for the real lease under node 0's epoch and one under
        # an epoch no share has; and node 1's under node 0's epoch: each refused, none stored
        made_up = [Pubkey(bytes(30) + i.to_bytes(2, "big")) for i in range(1, 601)]
        frames = [_receipt_message(lease, stranger, 1, 8, through) for lease in made_up]
        frames += [_receipt_message(world.lease, stranger, epoch, 8, through) for epoch in (1, 3)]
        for frame in frames:
            await hostile.ws.send(frame)
            refused = await answer(hostile)
            assert refused.type == "error" and "refused: this node never held" in refused.message, refused
        await node1.ws.send(_receipt_message(world.lease, key1, 1, 8, through))
        assert (await answer(node1)).type == "error"
        assert await _receipts(pool) == []
        assert coordinator.gateway.online(stranger.pubkey())  # refused, not thrown out: an honest worker's
        # old receipt (an epoch since replaced) must not cost it its session

        # the control: each holder's receipt of its own share is stored and acknowledged
        for session, key, epoch in ((node0, key0, 1), (node1, key1, 2)):
            await session.ws.send(_receipt_message(world.lease, key, epoch, 8, through))
            ack = await answer(session)
            assert (ack.type, ack.lease, ack.epoch, ack.gpu_seconds) == ("ack", str(world.lease), epoch, 8), ack

        # node 0's share moves away (it was lost): the receipts of the time it held it are still taken
        attester = Attester(world.client, world.admin)
        await attester.slash(key0.pubkey(), "MissedHeartbeats", {"node": str(key0.pubkey())}, lease=world.lease)
        await attester.reassign(world.lease, key0.pubkey(), world.share(2))

        async def moved() -> bool:
            async with pool.acquire() as conn:
                return await conn.fetchval(
                    "SELECT NOT active FROM assignments WHERE lease = $1 AND node_key = $2",
                    str(world.lease),
                    str(key0.pubkey()),
                )

        await eventually(moved, what="the move indexed")
        await node0.ws.send(_receipt_message(world.lease, key0, 1, 10, through + 1))
        assert (await answer(node0)).type == "ack"
    lease = str(world.lease)
    assert sorted(await _receipts(pool)) == sorted(
        [(lease, str(key0.pubkey()), 1, 10), (lease, str(key1.pubkey()), 2, 8)]
    )


async def test_what_a_node_is_told_of_shares_it_does_not_hold_stays_bounded(pool) -> None:
    """A node may name any lease and epoch: it is told once of each that it does not hold, up to
    STALE_TOLD of them; past that, refused without a word (the coordinator's memory does not grow)."""
    told = Gateway()
    workers = WorkerMessages(pool, None, None, None, told, *[None] * 4)  # type: ignore[arg-type]
    node, lease = Keypair().pubkey(), str(Pubkey.new_unique())
    epochs = [str(Keypair().sign_message(bytes([i % 256, i // 256]))) for i in range(STALE_TOLD + 50)]
    for epoch in epochs:
        await workers.job_log(node, JobLog(simulated=True, lease=lease, stream="stdout", line="x", epoch=epoch))
    await workers.job_log(node, JobLog(simulated=True, lease=lease, stream="stdout", line="x", epoch=epochs[0]))
    assert len(told.sent) == STALE_TOLD and {type(m) for _, m in told.sent} == {Error}
    assert sum(len(shares) for shares in workers._stale_told.values()) == STALE_TOLD
    assert await _events(pool, lease) == []
