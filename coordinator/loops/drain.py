"""Drain: the shares of draining nodes (their suppliers' announced maintenance) move to spare
nodes, gracefully and without any slash or fault. The job is cancelled on the draining node, which
sends its last usage receipt; everything it delivered is settled; then the share is reassigned on chain
and the job resumes on the new node from the lease's latest checkpoint. Without a spare node the
share stays where it is and the lease goes on (the placement's reason says so)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import asyncpg

from coordinator.attester import Attester
from coordinator.db import jobs, usage
from coordinator.db import leases as ledger
from coordinator.db.connection import Connection
from coordinator.gateway import NodeOffline
from coordinator.keys import NodeKey
from coordinator.leader import Fence
from coordinator.loops.moves import move_share
from coordinator.scheduler import NotPlaced
from coordinator.state import DrainMove, Shared, WorkerLink
from coordinator.view import FleetView
from gpunet import logs
from gpunet.logs import get_logger
from gpunet.protocol import JOB_ENDED, Cancel

__all__ = ["RELEASE_WAIT_SECONDS", "SETTLE_WAIT_SECONDS", "Drain"]

log = get_logger("gpunet.coordinator.drain")

# A drained node sends its last usage receipt and checkpoint once its job has stopped (its worker
# gives a job a stop grace); if no heartbeat shows the share released (the worker died meanwhile)
# the share moves after this long anyway.
RELEASE_WAIT_SECONDS = 20.0
# Its receipts still pending after the release are given this long to settle before the move.
SETTLE_WAIT_SECONDS = 30.0


class Drain:
    def __init__(
        self,
        pool: asyncpg.Pool,
        shared: Shared,
        view: FleetView,
        link: WorkerLink,
        attester: Attester,
        settle: Callable[[NodeKey | None], Awaitable[None]],
        *,
        fence: Fence,
    ) -> None:
        self.pool, self.shared, self.view, self.link, self.fence = pool, shared, view, link, fence
        self.attester, self.settle = attester, settle
        self._reasons: dict[str, str] = {}  # lease -> the drain reason last shown (written once)

    # --- what the node's worker says (from the worker messages)

    def job_ended(self, node_key: NodeKey, lease: str, state: str) -> None:
        """The job of a share leaving the node reported its end there (after the cancel)."""
        if state in JOB_ENDED and (move := self.shared.drains.get((lease, node_key))) is not None:
            move.stopped = True

    def heartbeat(self, node_key: NodeKey, claimed: frozenset[str]) -> None:
        """A heartbeat after the job stopped no longer claims the share leaving the node: its last
        usage receipt and checkpoint, sent before this heartbeat, are recorded (the gateway handles
        a session's messages in order, and the worker sends both as its job ends)."""
        for (lease, key), move in self.shared.drains.items():
            if key == node_key and move.stopped and lease not in claimed:
                move.released = True

    # --- the loop

    async def step(self) -> None:
        drains = self.shared.drains
        async with self.pool.acquire() as conn:
            wanted = await ledger.draining_shares(conn)
            for key in [k for k in drains if k not in wanted]:  # moved, or the lease ended
                del drains[key]
            if not wanted:
                return
            await self.view.refresh(conn)
            for lease, node_key in sorted(wanted):
                if lease in self.shared.ending or node_key in self.shared.failovers.get(lease, ()):
                    continue  # ending anyway, or lost: the failover moves it (without a slash)
                await self._move(conn, lease, node_key)

    async def _reason(self, conn: Connection, lease: str, reason: str, nodes: list[NodeKey] | None = None) -> None:
        if self._reasons.get(lease) != reason or nodes is not None:
            self._reasons[lease] = reason
            async with self.fence.decision(conn):
                await ledger.set_placement(conn, lease, "placed", reason, nodes)

    @logs.scoped
    async def _move(self, conn: Connection, lease: str, node_key: NodeKey) -> None:
        logs.bind(lease=lease, node=node_key)
        scheduler, key, now = self.shared.scheduler, (lease, node_key), time.time()
        if lease not in scheduler.reservations or node_key not in scheduler.reservation(lease).node_keys:
            return
        move = self.shared.drains.get(key)
        if move is None:
            await self._cancel(conn, lease, node_key, now)
            return
        if not move.released and now - move.cancelled_at < RELEASE_WAIT_SECONDS:
            return
        # Everything the node delivered is paid while it still holds the share (after the move its
        # receipts could not be settled any more).
        await self.settle(node_key)
        if await usage.pending_count(conn, lease, node_key) and now - move.cancelled_at < SETTLE_WAIT_SECONDS:
            return
        moved = await move_share(scheduler, self.attester, lease, node_key)
        if isinstance(moved, str):
            # (No spare any more — rare: there was one a moment ago — or the transaction failed: the
            # job, stopped on the draining node, waits; nobody is slashed and nothing is billed meanwhile.)
            await self._reason(conn, lease, f"node {node_key} is draining; its job stopped there: {moved}")
            return
        decision, target = moved
        del self.shared.drains[key]  # the scheduler's reservation no longer has the node: it is not dispatched again
        await self._reason(
            conn,
            lease,
            f"node {node_key} drained (its supplier's maintenance, no slash); share moved to {target.node_key}",
            list(decision.node_keys),
        )
        log.warning("lease.drained", lease=lease, node=node_key, to=target.node_key)

    @logs.scoped
    async def _cancel(self, conn: Connection, lease: str, node_key: NodeKey, now: float) -> None:
        """The move's first step: the job stops on the draining node, once a spare exists."""
        logs.bind(lease=lease, node=node_key)
        if not self.link.online(node_key):
            return  # silent: nothing to cancel there; if it stays silent the loss rule moves it
        # A spare must exist before the job is stopped here; it is chosen again at the move.
        spare = self.shared.scheduler.spare(lease, node_key)
        if isinstance(spare, NotPlaced):
            await self._reason(
                conn,
                lease,
                f"node {node_key} is draining; its share stays there (the lease "
                f"goes on) until a spare node qualifies: {spare.reason}",
            )
            return
        key = (lease, node_key)
        move = self.shared.drains[key] = DrainMove(cancelled_at=now)  # before the send: the job's end may come at once
        try:
            await self.link.send(
                node_key,
                Cancel(
                    lease=lease,
                    reason="the node is draining (its supplier's maintenance): the share moves to another node",
                ),
            )
        except NodeOffline:
            del self.shared.drains[key]
            return
        number = await jobs.current_job_number(conn, lease)
        state = (await jobs.job_states(conn, lease, number)).get(node_key) if number is not None else None
        if state not in ("starting", "running", "restarting"):
            move.stopped = True  # no job going there: nothing to wait for but the release
        await self._reason(conn, lease, f"node {node_key} is draining; its share is moving")
        log.info("drain.cancelled", lease=lease, node=node_key)
