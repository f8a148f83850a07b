"""A node that went silent, was slashed (so jailed) and lost its share comes back with its old job
still running, or still holding the share: the coordinator admits it (it gets no work while
jailed) and tells it to cancel the job and release the share of the lease it no longer holds,
read from the ledger the indexer keeps."""

from __future__ import annotations

import pytest
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from coordinator.attester import Attester
from coordinator.db import jobs
from coordinator.db import leases as ledger
from coordinator.gateway import NotRegistered
from coordinator.service import Coordinator
from gpunet import instructions as ix
from gpunet.accounts import fetch
from gpunet.pda import node_pda
from gpunet.protocol import (
    Cancel,
    Checkpoint,
    CheckpointFile,
    Error,
    Heartbeat,
    Hello,
    Inventory,
    JobLog,
    JobSpec,
    JobStatus,
)

from .chain import Cluster
from .conftest import eventually


class Gateway:
    """Records what the coordinator sends to nodes (the real gateway is a WebSocket server)."""

    def __init__(self) -> None:
        self.sent: list[tuple[Pubkey, object]] = []

    async def send(self, node_key: Pubkey, message: object) -> None:
        self.sent.append((node_key, message))


@pytest.fixture
async def three_nodes(node):
    async with AsyncClient(node.url, commitment=Confirmed) as client:
        yield await Cluster().build(client, nodes=3, assign=False)


def _hello(node_key: Pubkey) -> Hello:
    return Hello(
        simulated=True,
        version=1,
        node_key=str(node_key),
        inventory=Inventory(simulated=True, driver_version="sim", cuda_version="sim", gpus=[]),
    )


def _beat(*running: Pubkey, held: list[Pubkey] = ()) -> Heartbeat:
    return Heartbeat(
        simulated=True,
        healthy=True,
        gpus=[],
        running=[str(lease) for lease in running],
        held=[str(lease) for lease in held],
    )


async def test_a_slashed_node_that_comes_back_is_admitted_and_told_to_cancel_the_moved_job(
    three_nodes, settings, pool, indexer
) -> None:
    c = three_nodes
    lost, stays, spare = (c.share(i).node_key for i in range(3))
    attester = Attester(c.client, c.admin)
    await attester.assign(c.lease, [c.share(0), c.share(1)])
    await attester.slash(lost, "MissedHeartbeats", {"node": str(lost), "lease": str(c.lease)}, lease=c.lease)
    await attester.reassign(c.lease, lost, c.share(2))
    assert (await fetch(c.client, node_pda(lost), "Node")).jailed

    async def moved() -> bool:
        async with pool.acquire() as conn:
            holders = {s.node_key for s in await ledger.active_shares(conn, lease=str(c.lease))}
        return holders == {stays, spare}

    await eventually(moved, what="the ledger to show the share moved")

    coordinator = Coordinator(settings, pool, c.admin)  # not started: only what workers say is handled
    workers, gateway = coordinator.workers, Gateway()
    workers.link = gateway
    try:
        assert await workers.admit(lost, _hello(lost)) is None  # jailed, yet admitted
        unregistered = Keypair().pubkey()
        assert await workers.admit(unregistered, _hello(unregistered)) == NotRegistered(
            f"node {unregistered} is not registered on chain (never, or deregistered)"
        )
        # A deregistered node keeps its account (and its bond) until released, but gets no session.
        gone = await c.market.supplier(1)
        await c.market.send(gone.wallet, [ix.deregister_node(gone.wallet.pubkey(), gone.node_key.pubkey())])
        assert await workers.admit(gone.node_key.pubkey(), _hello(gone.node_key.pubkey())) == NotRegistered(
            f"node {gone.node_key.pubkey()} was deregistered; release it (gpunet node release) before registering "
            "it again"
        )

        other = Pubkey.new_unique()  # a lease the node never held either
        await workers.heartbeat(lost, _beat(c.lease, other))
        assert sorted(str(m.lease) for _, m in gateway.sent) == sorted([str(c.lease), str(other)])
        assert all(key == lost and isinstance(m, Cancel) for key, m in gateway.sent)

        # The nodes that hold the lease now are left alone.
        gateway.sent.clear()
        await workers.heartbeat(stays, _beat(c.lease))
        await workers.heartbeat(spare, _beat(c.lease))
        assert gateway.sent == []
        # ...and so is a node that stopped the cancelled job.
        await workers.heartbeat(lost, _beat())
        assert gateway.sent == []

        # A node still holding (and billing) a share it lost, with no job running on it, is told
        # to release it too; the holders keep theirs.
        await workers.heartbeat(lost, _beat(held=[c.lease]))
        assert [(key, type(m), str(m.lease)) for key, m in gateway.sent] == [(lost, Cancel, str(c.lease))]
        gateway.sent.clear()
        await workers.heartbeat(stays, _beat(held=[c.lease]))
        await workers.heartbeat(spare, _beat(c.lease, held=[c.lease]))
        assert gateway.sent == []

        # One job, one place: the returning node's stale checkpoint never replaces the holders' one.
        async with pool.acquire() as conn:
            epochs = {s.node_key: s.assigned_by for s in await ledger.active_shares(conn, lease=str(c.lease))}
        await workers.checkpoint(
            spare,
            Checkpoint(
                simulated=True, lease=str(c.lease), files=[CheckpointFile.of("step", b"42")], epoch=epochs[spare]
            ),
        )
        await workers.checkpoint(
            lost, Checkpoint(simulated=True, lease=str(c.lease), files=[CheckpointFile.of("step", b"7")])
        )
        async with pool.acquire() as conn:
            assert [f.content() for f in (await jobs.checkpoints_of(conn, str(c.lease)))[0]] == [b"42"]
        assert [(key, type(m)) for key, m in gateway.sent] == [(lost, Error)]
    finally:
        await coordinator.chain.close()


async def test_job_messages_of_an_earlier_assignment_epoch_are_refused(three_nodes, settings, pool, indexer) -> None:
    c = three_nodes
    lost, stays, spare = (c.share(i).node_key for i in range(3))
    attester = Attester(c.client, c.admin)
    await attester.assign(c.lease, [c.share(0), c.share(1)])
    lease = str(c.lease)

    async def epoch_of(node_key: Pubkey) -> str | None:
        async with pool.acquire() as conn:
            return await conn.fetchval(
                "SELECT assigned_by FROM assignments WHERE lease = $1 AND node_key = $2 AND active",
                lease,
                str(node_key),
            )

    old_epoch = await eventually(lambda: epoch_of(lost), what="the assignment indexed with its epoch")
    async with pool.acquire() as conn:  # the client's job (what the nodes run and speak of)
        assert await jobs.save_job(conn, lease, 1, JobSpec(command=["train"]), 2, str(c.client_wallet.pubkey()), "s")
    await attester.slash(lost, "MissedHeartbeats", {"node": str(lost), "lease": lease}, lease=c.lease)
    await attester.reassign(c.lease, lost, c.share(2))
    new_epoch = await eventually(lambda: epoch_of(spare), what="the spare's assignment indexed")
    stays_epoch = await epoch_of(stays)
    # an epoch is the transaction that gave a node its share: one assignment, or the move
    assert old_epoch == stays_epoch != new_epoch

    coordinator = Coordinator(settings, pool, c.admin)  # not started: only what workers say is handled
    workers, gateway = coordinator.workers, Gateway()
    workers.link = gateway
    try:

        def line(text: str, epoch: str | None) -> JobLog:
            return JobLog(simulated=True, lease=lease, stream="stdout", line=text, epoch=epoch)

        await workers.job_log(lost, line("step 8 (the old copy)", old_epoch))
        await workers.job_status(lost, JobStatus(simulated=True, lease=lease, state="running", epoch=old_epoch))
        await workers.checkpoint(
            lost, Checkpoint(simulated=True, lease=lease, files=[CheckpointFile.of("s", b"8")], epoch=old_epoch)
        )
        # the control: the holders, each under its own epoch, are recorded
        await workers.job_log(spare, line("resumed from 7", new_epoch))
        await workers.job_log(stays, line("step 8", stays_epoch))
        await workers.checkpoint(
            spare, Checkpoint(simulated=True, lease=lease, files=[CheckpointFile.of("s", b"7")], epoch=new_epoch)
        )
        # a holder naming another node's epoch is not of its share either
        await workers.job_log(stays, line("confused", new_epoch))
        async with pool.acquire() as conn:
            rows = await conn.fetch("SELECT node_key, kind, line FROM job_events WHERE lease = $1 ORDER BY id", lease)
            assert [(r["node_key"], r["line"]) for r in rows] == [
                (str(spare), "resumed from 7"),
                (str(stays), "step 8"),
            ]
            assert [f.content() for f in (await jobs.checkpoints_of(conn, lease))[0]] == [b"7"]
        told = [(key, type(m)) for key, m in gateway.sent]
        assert told.count((lost, Error)) == 2 and (stays, Error) in told  # once per share and epoch, and the checkpoint
    finally:
        await coordinator.chain.close()
