"""Placement: open leases with a job onto nodes, through the scheduler and `assign_lease`."""

from __future__ import annotations

import logging

import asyncpg
from solders.pubkey import Pubkey

from coordinator.attester import Attester
from coordinator.db import leases as ledger
from coordinator.db.connection import Connection
from coordinator.scheduler import LeaseRequest, NotPlaced, SchedulerError
from coordinator.state import Shared
from coordinator.view import FleetView
from gpunet import instructions as ix
from gpunet.client import TransactionFailed

__all__ = ["Placement"]

log = logging.getLogger("gpunet.coordinator.placement")


class Placement:
    def __init__(self, pool: asyncpg.Pool, shared: Shared, view: FleetView, attester: Attester) -> None:
        self.pool, self.shared, self.view, self.attester = pool, shared, view, attester

    async def step(self) -> None:
        async with self.pool.acquire() as conn:
            await self.view.refresh(conn)
            for lease in await ledger.waiting_leases(conn):
                if not lease["has_job"]:
                    await ledger.set_placement(
                        conn, lease["lease"], "waiting", "waiting for the client's job (gpunet lease job LEASE ...)"
                    )
                    continue
                await self._place(conn, lease)

    async def _place(self, conn: Connection, lease: asyncpg.Record) -> None:
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
            await ledger.set_placement(conn, lease["lease"], "failed", str(e))
            return
        decision = scheduler.place(request)
        if isinstance(decision, NotPlaced):
            await ledger.set_placement(conn, lease["lease"], "waiting", decision.reason)
            return
        scheduler.reserve(decision)
        nodes = list(decision.node_keys)
        await ledger.set_placement(conn, lease["lease"], "assigning", "", nodes)
        try:
            sig = await self.attester.assign(Pubkey.from_string(lease["lease"]), decision.sdk_shares())
        except TransactionFailed as e:
            scheduler.release(lease["lease"])
            await ledger.set_placement(conn, lease["lease"], "waiting", f"the chain refused the placement: {e}")
            return
        except BaseException:
            scheduler.release(lease["lease"])
            await ledger.set_placement(conn, lease["lease"], "waiting", "assign_lease did not complete; retrying")
            raise
        await ledger.set_placement(conn, lease["lease"], "placed", "", nodes, str(sig) if sig else None)
        log.info("lease.placed lease=%s nodes=%s", lease["lease"], ",".join(map(str, nodes)))
