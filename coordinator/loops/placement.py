"""Placement: open leases with a job onto nodes, through the scheduler and `assign_lease`: every
lease placed in a step is decided first (its nodes reserved), then all their transactions go out at once."""

from __future__ import annotations

import asyncio
import time

import asyncpg
from solders.pubkey import Pubkey

from coordinator.attester import Attester
from coordinator.db import leases as ledger
from coordinator.db.connection import Connection
from coordinator.leader import Fence
from coordinator.metrics import WAITING_REASONS, waiting_reason
from coordinator.scheduler import LeaseRequest, NotPlaced, SchedulerError
from coordinator.scheduler import Placement as Placed  # the scheduler's; this module's Placement is the loop
from coordinator.state import Shared
from coordinator.view import FleetView
from gpunet import instructions as ix
from gpunet import logs
from gpunet.client import TransactionFailed
from gpunet.logs import get_logger

__all__ = ["Placement"]

log = get_logger("gpunet.coordinator.placement")

NO_JOB = "waiting for the client's job (gpunet lease job LEASE ...)"


class Placement:
    def __init__(
        self, pool: asyncpg.Pool, shared: Shared, view: FleetView, attester: Attester, *, fence: Fence
    ) -> None:
        self.pool, self.shared, self.view, self.attester, self.fence = pool, shared, view, attester, fence
        # lease -> when this process first saw it open and waiting (the placement latency's start)
        self._seen: dict[str, float] = {}
        # lease -> the scheduler's NotPlaced whose reason the ledger holds: the same one again (the
        # fleet unchanged since) is not written again
        self._recorded: dict[str, NotPlaced] = {}

    async def step(self) -> None:
        waiting = dict.fromkeys(WAITING_REASONS, 0)
        placed: list[tuple[asyncpg.Record, Placed]] = []
        failed: Exception | None = None
        async with self.pool.acquire() as conn:
            await self.view.refresh(conn)
            leases = await ledger.waiting_leases(conn)
            now = time.monotonic()
            self._seen = {lease["lease"]: self._seen.get(lease["lease"], now) for lease in leases}
            self._recorded = {k: d for k, d in self._recorded.items() if k in self._seen}
            try:
                for lease in leases:
                    if not lease["has_job"]:
                        async with self.fence.decision(conn):
                            await ledger.set_placement(conn, lease["lease"], "waiting", NO_JOB)
                        waiting[waiting_reason(NO_JOB)] += 1
                        continue
                    decided = await self._decide(conn, lease)
                    if isinstance(decided, str):
                        waiting[waiting_reason(decided)] += 1
                    elif decided is not None:
                        placed.append((lease, decided))
            except Exception as e:  # the leases decided before it still go out (the ledger says "assigning")
                failed = e
        # The decisions are taken (their nodes reserved): their transactions go out at once, within
        # the attester's window, each lease's steps in order in its own task.
        results = await asyncio.gather(*(self._assign(lease, d) for lease, d in placed), return_exceptions=True)
        for result in results:
            if isinstance(result, str):
                waiting[waiting_reason(result)] += 1
        for reason, count in waiting.items():
            self.shared.metrics.leases_waiting.labels(reason).set(count)
        for result in [failed, *results]:
            if isinstance(result, BaseException):
                raise result  # each lease's own state is recorded; the loop's supervisor hears the first

    async def _decide(self, conn: Connection, lease: asyncpg.Record) -> Placed | str | None:
        """The scheduler's placement of the lease, its nodes reserved and the ledger told it is
        assigning; the reason it still waits, if it does; None: failed for good."""
        scheduler = self.shared.scheduler
        try:
            terms = ix.LeaseTerms(
                lease["gpu_model"],
                lease["min_vram_gb"],
                lease["gpu_count"],
                lease["region"],
                int(lease["max_price_per_gpu_hour"]),
                lease["duration_seconds"],
            )
            request = LeaseRequest(lease["lease"], terms, gpus_per_node=lease["gpus_per_node"])
        except SchedulerError as e:
            async with self.fence.decision(conn):
                await ledger.set_placement(conn, lease["lease"], "failed", str(e))
            return None
        decision = scheduler.place(request)
        if isinstance(decision, NotPlaced):
            if self._recorded.get(request.lease) is not decision:
                async with self.fence.decision(conn):
                    await ledger.set_placement(conn, lease["lease"], "waiting", decision.reason)
                self._recorded[request.lease] = decision
            return decision.reason
        self._recorded.pop(request.lease, None)
        scheduler.reserve(decision)
        try:
            async with self.fence.decision(conn):
                await ledger.set_placement(conn, lease["lease"], "assigning", "", list(decision.node_keys))
        except BaseException:
            scheduler.release(lease["lease"])
            raise
        return decision

    @logs.scoped
    async def _assign(self, lease: asyncpg.Record, decision: Placed) -> str | None:
        """Assigns the placed lease on chain; the reason it waits again, if the chain refused it."""
        logs.bind(lease=lease["lease"])
        scheduler = self.shared.scheduler
        nodes = list(decision.node_keys)
        try:
            sig = await self.attester.assign(Pubkey.from_string(lease["lease"]), decision.sdk_shares())
        except TransactionFailed as e:
            scheduler.release(lease["lease"])
            why = f"the chain refused the placement: {e}"
            async with self.pool.acquire() as conn, self.fence.decision(conn):
                await ledger.set_placement(conn, lease["lease"], "waiting", why)
            return why
        except BaseException:
            scheduler.release(lease["lease"])
            async with self.pool.acquire() as conn, self.fence.decision(conn):
                await ledger.set_placement(conn, lease["lease"], "waiting", "assign_lease did not complete; retrying")
            raise
        async with self.pool.acquire() as conn, self.fence.decision(conn):
            await ledger.set_placement(conn, lease["lease"], "placed", "", nodes, str(sig) if sig else None)
        metrics = self.shared.metrics
        metrics.placements.inc()
        metrics.placement_seconds.observe(time.monotonic() - self._seen.pop(lease["lease"], time.monotonic()))
        log.info("lease.placed", nodes=nodes, tx=sig)  # the lease: bound above
        return None
