"""Failover: a node silent for `lost_after` (or its leases' longer downtime tolerance) is lost,
once `Outages.may_judge` says its silence is its own; what it delivered is paid, it is slashed
with the evidence of its silence (not when its supplier announced maintenance: a draining node's
shares just move), and each of its shares moves to the best other qualifying node: different
leases' moves are sent at once, one lease's one after the other."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import asyncpg
from solana.rpc.async_api import AsyncClient
from solders.pubkey import Pubkey

from coordinator.attester import Attester, evidence_hash
from coordinator.db import leases as ledger
from coordinator.db import nodes
from coordinator.fleet import Fleet, due_shares
from coordinator.keys import NodeKey
from coordinator.leader import Fence
from coordinator.loops.moves import move_share
from coordinator.outages import Outages
from coordinator.settings import Settings
from coordinator.state import Shared
from coordinator.view import FleetView
from gpunet import logs
from gpunet.accounts import fetch
from gpunet.logs import get_logger
from gpunet.pda import node_pda

__all__ = ["Failover"]

log = get_logger("gpunet.coordinator.failover")


class Failover:
    def __init__(
        self,
        settings: Settings,
        pool: asyncpg.Pool,
        chain: AsyncClient,
        shared: Shared,
        view: FleetView,
        fleet: Fleet,
        outages: Outages,
        attester: Attester,
        settle: Callable[[NodeKey | None], Awaitable[None]],
        *,
        fence: Fence,
    ) -> None:
        self.settings, self.pool, self.chain, self.shared, self.view = settings, pool, chain, shared, view
        self.fence = fence
        self.fleet, self.outages, self.attester, self.settle = fleet, outages, attester, settle
        self.silent: set[NodeKey] = set()  # nodes found silent, not judged yet

    async def step(self) -> None:
        # Every pass, before anyone is reported lost: a correlated outage is seen (and dated from its
        # first silence) while its nodes are going silent, not once the first is past lost_after.
        self.outages.watch_correlation()
        for node_key in self.fleet.newly_lost():
            self.view.mark_offline(node_key)
            self.shared.running_checked.pop(node_key, None)  # if it comes back, what it runs is checked again
            self.silent.add(node_key)
        if self.silent and self.fleet.judging() and await self.outages.may_judge():
            for node_key in sorted(self.silent, key=str):
                self.silent.discard(node_key)
                if not self.fleet.silent(node_key):  # heard again, or its silence was partly blind time
                    self.fleet.unjudged(node_key)
                    log.info("node.back", node=node_key, reason="not silent for lost_after once blind time is left out")
                    continue
                if self.outages.region_paused(node_key):
                    self.silent.add(node_key)  # judged once its region's outage is over (and drained)
                    continue
                async with self.pool.acquire() as conn:
                    shares = await ledger.active_shares(conn, node_key=node_key)
                if shares:
                    await self._lost(node_key, shares)
        await self._move_lost_shares()

    def queue(self, lease: str, lost: NodeKey) -> None:
        self.shared.failovers.setdefault(lease, set()).add(lost)

    @logs.scoped
    async def _lost(self, node_key: NodeKey, shares: list[ledger.ActiveShare]) -> None:
        logs.bind(node=node_key)
        # A lease's downtime tolerance (its client's choice at open, never below lost_after) delays
        # the loss of that lease's share only: the others are judged now, it on a later pass.
        shares, tolerated = due_shares(shares, self.fleet.silent_for(node_key), self.settings.lost_after_seconds)
        if tolerated:
            self.silent.add(node_key)
        if not shares:
            return
        log.warning("node.lost", node=node_key, leases=[s.lease for s in shares])
        # Pay what the node delivered before it went silent, while it still holds its shares.
        await self.settle(node_key)
        # Decided now, not when the silence was first noticed: the node may have been heard meanwhile,
        # and the evidence must show silence for the whole window.
        seen = self.fleet.nodes.get(node_key)
        if not self.fleet.judging():  # this process stalled meanwhile: judge again once it has drained
            self.silent.add(node_key)
            return
        tolerance = max(s.downtime_tolerance_seconds for s in shares)
        if seen is None or not self.fleet.silent(node_key, tolerance):
            self.fleet.unjudged(node_key)
            self.silent.discard(node_key)
            log.info("node.back", node=node_key, reason="heard again before the slash was sent")
            return
        silent = self.fleet.silent_for(node_key)
        async with self.pool.acquire() as conn:
            draining = await nodes.is_draining(conn, node_key)
        if draining:
            # Its supplier announced the maintenance: its shares move, nobody is slashed for it.
            # its shares move without a slash
            log.warning("node.lost_while_draining", node=node_key, silent_seconds=round(silent, 1))
            for share in shares:
                self.queue(share.lease, node_key)
            return
        evidence = {
            "fault": "MissedHeartbeats",
            "node_key": str(node_key),
            "leases": [s.lease for s in shares],
            "last_heartbeat": round(seen.last_heartbeat, 3),
            "silent_seconds": round(silent, 3),
            "detected_at": round(time.time(), 3),
            "lost_after_seconds": self.settings.lost_after_seconds,
            "downtime_tolerance_seconds": tolerance,
        }
        # Slashed once per silence: a share whose lease tolerated longer is moved later without a second slash
        # (the node is jailed since, and the program moves a jailed node's shares).
        jailed = (await fetch(self.chain, node_pda(node_key), "Node")).jailed
        if self.settings.slash_lost_nodes and not jailed:
            async with self.pool.acquire() as conn:
                async with self.fence.decision(conn):
                    fault = await nodes.record_fault(
                        conn, node_key, shares[0].lease, "MissedHeartbeats", evidence, evidence_hash(evidence)
                    )
            try:
                sig = await self.attester.slash(
                    node_key, "MissedHeartbeats", evidence, lease=Pubkey.from_string(shares[0].lease)
                )
                async with self.pool.acquire() as conn:
                    async with self.fence.decision(conn):
                        await nodes.set_slash_signature(conn, fault, str(sig) if sig else None)
            except Exception:
                log.exception("node.slash_failed", node=node_key)
        for share in shares:
            self.queue(share.lease, node_key)

    async def _move_lost_shares(self) -> None:
        failovers = self.shared.failovers
        if not failovers:
            return
        async with self.pool.acquire() as conn:
            await self.view.refresh(conn)
        # Different leases' moves go out at once (the attester's window); one lease's, one after the other.
        moving = [self._move_lease(lease, lost) for lease, lost in list(failovers.items())]
        for result in await asyncio.gather(*moving, return_exceptions=True):
            if isinstance(result, BaseException):
                raise result  # after every lease's moves ended: the loop's supervisor hears the first

    async def _move_lease(self, lease: str, lost: set[NodeKey]) -> None:
        for node_key in sorted(lost, key=str):
            if await self._move(lease, node_key):
                lost.discard(node_key)
        if not lost and self.shared.failovers.get(lease) is lost:
            del self.shared.failovers[lease]

    @logs.scoped
    async def _move(self, lease: str, lost: NodeKey) -> bool:
        """Moves the lost node's share; True when done (or no longer needed). No database connection is
        held while the move is sent: the fence takes one to record the decision."""
        logs.bind(lease=lease, node=lost)
        scheduler = self.shared.scheduler
        if lease not in scheduler.reservations or lost not in scheduler.reservation(lease).node_keys:
            return True  # the lease ended meanwhile, or the share moved already
        moved = await move_share(scheduler, self.attester, lease, lost)
        if isinstance(moved, str):
            async with self.pool.acquire() as conn, self.fence.decision(conn):
                await ledger.set_placement(conn, lease, "placed", f"node {lost} lost; {moved}")
            return False
        decision, target = moved
        async with self.pool.acquire() as conn, self.fence.decision(conn):
            await ledger.set_placement(
                conn, lease, "placed", f"node {lost} lost; share moved to {target.node_key}", list(decision.node_keys)
            )
        self.shared.give_again([lost], lease)
        self.shared.metrics.failovers.inc()
        log.warning("lease.failover", to=target.node_key)  # lease and lost node: bound above
        return True
