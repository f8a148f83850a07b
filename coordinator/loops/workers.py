"""What workers say, as the gateway hands it over (`coordinator.gateway.GatewayHandler`):
admission, liveness into the fleet, job statuses and log lines, usage receipts and checkpoints into
the ledger. A node that speaks about a share it no longer holds is told so (and to cancel the job
and release the GPUs), never recorded."""

from __future__ import annotations

import contextlib
import time

import asyncpg
from solana.rpc.async_api import AsyncClient

from coordinator.db import jobs, nodes
from coordinator.db import leases as ledger
from coordinator.db import usage as usage_receipts
from coordinator.fleet import Fleet
from coordinator.gateway import NotRegistered
from coordinator.keys import NodeKey
from coordinator.loops.dispatch import Dispatch
from coordinator.loops.drain import Drain
from coordinator.loops.verification import Verification
from coordinator.outages import Outages
from coordinator.state import Shared, Telemetry, WorkerLink
from gpunet.accounts import fetch
from gpunet.logs import get_logger
from gpunet.pda import node_pda
from gpunet.protocol import (
    JOB_ENDED,
    Ack,
    Cancel,
    Checkpoint,
    Error,
    Heartbeat,
    Hello,
    JobLog,
    JobStatus,
    UsageReceiptMessage,
    VerifyCommit,
    VerifyMemoryOpenings,
    VerifyOpenings,
)

__all__ = ["WorkerMessages"]

log = get_logger("gpunet.coordinator.workers")

CAP_EVERY = 1_000  # log lines of a lease between two cuts of its log to the cap
STALE_TOLD = 1_000  # shares a node is told it does not hold, at most (then refused without a word)


class WorkerMessages:
    def __init__(
        self,
        pool: asyncpg.Pool,
        chain: AsyncClient,
        shared: Shared,
        fleet: Fleet,
        link: WorkerLink,
        outages: Outages,
        dispatch: Dispatch,
        drain: Drain,
        verification: Verification,
        *,
        log_lines_per_lease: int = 100_000,
    ) -> None:
        self.pool, self.chain, self.shared, self.fleet, self.link = pool, chain, shared, fleet, link
        self.outages, self.dispatch, self.drain, self.verification = outages, dispatch, drain, verification
        self.log_lines_per_lease = log_lines_per_lease
        # node -> the (lease, epoch) it was told it does not hold; at most STALE_TOLD a node (a node may
        # name any lease and epoch: what it was told must not grow without end)
        self._stale_told: dict[NodeKey, set[tuple[str, str | None]]] = {}
        self._lines_since_cap: dict[str, int] = {}  # lease -> log lines recorded since its log was last cut

    async def admit(self, node_key: NodeKey, hello: Hello) -> str | NotRegistered | None:
        info = (await self.chain.get_account_info(node_pda(node_key))).value
        if info is None:  # (a close reason holds 123 bytes: the worker says the rest)
            return NotRegistered(f"node {node_key} is not registered on chain (never, or deregistered)")
        # A jailed node is admitted: it gets no work (the scheduler and the program skip jailed
        # nodes), but a node slashed for going silent usually comes back with its old job still
        # running, and only a session can tell it to cancel the jobs of leases it no longer holds.
        node = await fetch(self.chain, node_pda(node_key), "Node")
        if node.deregistered_at:  # it holds no lease (the program refuses to deregister one that does)
            return NotRegistered(
                f"node {node_key} was deregistered; release it (gpunet node release) before registering it again"
            )
        if node.jailed:
            # admitted: it gets no work until unjailed
            log.warning("worker.jailed", node=node_key, jail_ends_at=node.jail_ends_at)
        return None

    async def connected(self, node_key: NodeKey, hello: Hello) -> None:
        self.fleet.connected(node_key, hello.simulated)
        self.verification.connected(node_key, hello.inventory)
        self.shared.running_checked.pop(node_key, None)
        self.dispatch.reconnected(node_key)
        log.info("worker.connected", node=node_key, simulated=hello.simulated, gpus=len(hello.inventory.gpus))
        # Every replica's API reads how the node is reached from the ledger (a Ray lease's head).
        if self.outages.database_up:
            try:
                async with self.pool.acquire() as conn:
                    await nodes.record_reach(
                        conn, node_key, self.link.host(node_key), self.link.cluster_ports(node_key), hello.tunnel_port
                    )
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as e:
                log.warning("worker.reach_not_recorded", node=node_key, error=str(e))

    async def heartbeat(self, node_key: NodeKey, beat: Heartbeat) -> None:
        self.fleet.heartbeat(node_key, beat.healthy)
        self.shared.metrics.heartbeats.inc()
        self.shared.telemetry[node_key] = Telemetry(time.time(), beat)
        # A node that comes back after its share moved (or after its lease ended) must neither run
        # the job twice nor keep the GPUs reserved and billed. The ledger is asked only when the
        # node's set of held and running leases changes (or it reconnected, or was lost), not on
        # every heartbeat.
        claimed = frozenset(beat.running) | frozenset(beat.held)
        self.drain.heartbeat(node_key, claimed)
        checked = self.shared.running_checked
        # (While the database is down the question waits: a heartbeat is never refused for it.)
        if claimed and checked.get(node_key) != claimed and self.outages.database_up:
            async with self.pool.acquire() as conn:
                held = {s.lease for s in await ledger.active_shares(conn, node_key=node_key)}
            for lease in claimed - held:
                with contextlib.suppress(Exception):
                    await self.link.send(node_key, Cancel(lease=lease, reason="this node no longer holds the lease"))
            checked[node_key] = claimed & held

    async def job_status(self, node_key: NodeKey, status: JobStatus) -> None:
        if await self._record_job_event(node_key, status):
            self.drain.job_ended(node_key, status.lease, status.state)
            if status.state in JOB_ENDED:  # the log cap's count starts again with the next job's lines
                self._lines_since_cap.pop(status.lease, None)

    async def job_log(self, node_key: NodeKey, line: JobLog) -> None:
        if not await self._record_job_event(node_key, line):
            return
        # The ledger keeps a lease's newest lines only: cut it now and then, not at every line (the cut
        # counts the lease's lines), so a lease holds at most the cap plus CAP_EVERY lines.
        seen = self._lines_since_cap[line.lease] = self._lines_since_cap.get(line.lease, 0) + 1
        if seen >= min(CAP_EVERY, self.log_lines_per_lease):
            self._lines_since_cap[line.lease] = 0
            async with self.pool.acquire() as conn:
                cut = await jobs.cap_logs(conn, line.lease, self.log_lines_per_lease)
            if cut:
                log.info("job.log_cut", lease=line.lease, lines=cut, cap=self.log_lines_per_lease)

    async def _record_job_event(self, node_key: NodeKey, message: JobStatus | JobLog) -> bool:
        """One job, one place: what a node says about a share it does not hold now (of an earlier
        assignment epoch, of another node's lease, or with no epoch at all: a worker too old to be
        fenced), or about a job the lease has not had, is not recorded; the node is told once per
        share and epoch."""
        async with self.pool.acquire() as conn:
            if await jobs.record_job_event(conn, node_key, message):
                return True
        told = self._stale_told.setdefault(node_key, set())
        if (key := (message.lease, message.epoch)) not in told and len(told) < STALE_TOLD:
            told.add(key)
            # not its current share: refused
            log.warning("job.stale", node=node_key, lease=message.lease, epoch=message.epoch)
            with contextlib.suppress(Exception):
                await self.link.send(
                    node_key,
                    Error(
                        message=f"job messages of lease {message.lease} refused: this node does not hold "
                        "that share now (it moved, or the message names no assignment epoch: upgrade the "
                        "worker), or the lease has no such job"
                    ),
                )
        return False

    async def usage(self, node_key: NodeKey, receipt: UsageReceiptMessage) -> str | None:
        async with self.pool.acquire() as conn:
            if await usage_receipts.record_receipt(conn, node_key, receipt):
                return None
        log.warning("usage.refused", node=node_key, lease=receipt.lease, epoch=receipt.epoch)
        return (
            f"usage receipt of lease {receipt.lease} refused: this node never held its share of "
            f"assignment epoch {receipt.epoch}"
        )

    async def checkpoint(self, node_key: NodeKey, checkpoint: Checkpoint) -> None:
        async with self.pool.acquire() as conn:
            recorded = await jobs.record_checkpoint(conn, node_key, checkpoint)
        if not recorded:
            log.warning(
                "checkpoint.refused",
                node=node_key,
                lease=checkpoint.lease,
                reason="it holds no share of the running lease",
            )
            with contextlib.suppress(Exception):
                await self.link.send(
                    node_key,
                    Error(
                        message=f"checkpoint of lease {checkpoint.lease} refused: "
                        f"this node holds no share of it (it moved)"
                    ),
                )

    async def worker_ack(self, node_key: NodeKey, ack: Ack) -> None:
        if ack.of == "cancel" and ack.lease is not None and ack.lease in self.shared.ending:
            # told its lease ended: it released the share (or held none of it); either way its GPUs
            # take another lease's share only once the job has stopped (`worker.agent`)
            self.shared.stopped.setdefault(ack.lease, set()).add(node_key)
            if self.shared.free_if_stopped(ack.lease):
                after = time.time() - self.shared.ending[ack.lease]
                log.info("lease.nodes_freed", lease=ack.lease, after_s=round(after, 3))
        if ack.error:
            log.warning("worker.refused", node=node_key, of=ack.of, lease=ack.lease, error=ack.error)
            self.verification.refused(node_key, ack)
            if ack.unable and ack.of == "dispatch" and ack.lease is not None:
                # a node speaks only for its own shares: a lease it does not hold is not moved for it
                async with self.pool.acquire() as conn:
                    holds = await jobs.holds_share(conn, ack.lease, str(node_key))
                if holds:
                    await self.verification.refused_dispatch(node_key, ack.lease, ack.error)

    async def verify_commit(self, node_key: NodeKey, commit: VerifyCommit) -> None:
        self.verification.committed(node_key, commit)

    async def verify_openings(self, node_key: NodeKey, openings: VerifyOpenings | VerifyMemoryOpenings) -> None:
        self.verification.opened(node_key, openings)

    async def disconnected(self, node_key: NodeKey) -> None:
        self.fleet.disconnected(node_key)
        log.info("worker.disconnected", node=node_key)
