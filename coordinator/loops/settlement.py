"""Settlement: the nodes' signed usage onto the chain (`coordinator.settlement.Settler`), each
report checked first against the online time this process saw (`coordinator.fleet`). Failover,
drain and lease end settle through `settle` too, before a share moves or a lease closes."""

from __future__ import annotations

import asyncio
import logging

import asyncpg

from coordinator.db import leases as ledger
from coordinator.db import usage
from coordinator.fleet import Fleet
from coordinator.keys import NodeKey
from coordinator.settlement import Settler, SignedUsage

__all__ = ["Settlement"]

log = logging.getLogger("gpunet.coordinator.settlement")


class Settlement:
    def __init__(
        self, pool: asyncpg.Pool, settler: Settler, fleet: Fleet, *, started_at: float, reconnect_grace_seconds: float
    ) -> None:
        self.pool, self.settler, self.fleet = pool, settler, fleet
        # Before this process started, and while workers had their grace to reconnect to it, it could not see.
        self.blind_until = started_at + reconnect_grace_seconds
        # One pass at a time: the settlement loop, a lease's close and a failover all settle first,
        # and two passes over the same pending reports would send them twice (the second copy
        # refused on chain, and that refusal recorded over the first's success).
        self._one_pass = asyncio.Lock()

    async def step(self) -> None:
        await self.settle()

    async def settle(self, node_key: NodeKey | None = None) -> None:
        """Settles the pending reports (of one node, or of all)."""
        async with self._one_pass:
            async with self.pool.acquire() as conn:
                batch = await usage.pending_usage(conn, node_key)
                if not batch:
                    return
                refused = await usage.refused_usage(conn, batch)
                tolerance = await ledger.tolerances(conn, list({str(u.lease) for u in batch}))
            outcomes = await self.settler.settle(
                batch, lambda u: self.observed(u, tolerance.get(str(u.lease), 0)), refused
            )
            async with self.pool.acquire() as conn:
                await usage.settle_outcomes(conn, outcomes)
        for o in outcomes:
            log.info(
                "usage.%s lease=%s node=%s seq=%d %s",
                o.status.value,
                o.usage.lease,
                o.usage.node_key,
                o.usage.report.seq,
                o.reason or o.signature,
            )

    def observed(self, report: SignedUsage, tolerance: int = 0) -> int | None:
        """Seconds of the report's period the node may bill by what this process saw. Time it could
        not see (before `blind_until`) is not held against the node (the chain's own cap applies
        to it); silence the lease's client tolerates (its downtime tolerance) is held time."""
        start, end = report.report.period_start, report.report.period_end
        if end <= self.blind_until:
            return None
        unseen = max(0, int(self.blind_until) - start)
        return unseen + self.fleet.online_seconds(report.node_key, max(start, int(self.blind_until)), end, tolerance)
