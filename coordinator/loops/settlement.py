"""Settlement: the nodes' newest signed usage receipts onto the chain (`coordinator.settlement.Settler`),
each increment checked first against the online time this process saw (`coordinator.fleet`).

A receipt is cumulative, so a share is settled when it is worth a transaction, not every time its
node signs: the loop (every `settle_seconds`) settles a share whose newest receipt runs
`settle_interval_seconds` past its last settled one and whose unpaid amount is at least
`settle_min_amount`, or any share whose lease's escrow needs it (what its shares are owed unpaid
reaches half of the escrow left). Failover, drain and lease end settle everything pending of a
node or a lease through `settle`, before a share moves or a lease closes."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Callable

import asyncpg

from coordinator.db import leases as ledger
from coordinator.db import usage
from coordinator.fleet import Fleet
from coordinator.keys import NodeKey
from coordinator.leader import Fence
from coordinator.metrics import Metrics
from coordinator.settlement import Settler, SignedUsage
from gpunet.logs import get_logger

__all__ = ["Settlement", "unpaid"]

log = get_logger("gpunet.coordinator.settlement")

SECONDS_PER_HOUR = 3_600


def unpaid(receipt: usage.PendingReceipt) -> int | None:
    """What the receipt's increment would cost at most (the program's cumulative rounding), in IO
    base units; None when the ledger does not know the share yet."""
    r = receipt
    if r.price_per_gpu_hour is None or r.receipt_gpu_seconds is None or r.paid_gpu_seconds is None:
        return None
    more = max(0, r.usage.receipt.gpu_seconds - r.receipt_gpu_seconds)
    paid = r.paid_gpu_seconds
    return (r.price_per_gpu_hour * (paid + more)) // SECONDS_PER_HOUR - (
        r.price_per_gpu_hour * paid
    ) // SECONDS_PER_HOUR


class Settlement:
    def __init__(
        self,
        pool: asyncpg.Pool,
        settler: Settler,
        fleet: Fleet,
        *,
        started_at: float,
        reconnect_grace_seconds: float,
        interval_seconds: float = 3_600.0,
        min_amount: int = 0,
        metrics: Metrics | None = None,
        fence: Fence,
        paused: Callable[[NodeKey], bool] = lambda _node_key: False,
    ) -> None:
        self.pool, self.settler, self.fleet, self.fence = pool, settler, fleet, fence
        # Whether a correlated outage's pause covers a node (`Outages.paused_for`): its receipts wait
        # for the pause's end, when its window is recorded as the online time it is.
        self.paused = paused
        self.metrics = metrics or Metrics()
        self.interval_seconds, self.min_amount = interval_seconds, min_amount
        # Before this process started, and while workers had their grace to reconnect to it, it could not see.
        self.blind_until = started_at + reconnect_grace_seconds
        # One pass at a time: the settlement loop, a lease's close and a failover all settle, and two
        # passes over the same pending receipts would send them twice (the second copy refused on
        # chain, and that refusal recorded over the first's success).
        self._one_pass = asyncio.Lock()

    async def step(self) -> None:
        """The regular pass: the shares whose settlement is due (and the queue's figures, before and after)."""
        await self._measure()
        await self._settle(None, due_only=True)
        await self._measure()

    async def _measure(self) -> None:
        async with self.pool.acquire() as conn:
            count, oldest = await usage.pending_summary(conn)
        self.metrics.settlement_queue.set(count)
        self.metrics.settlement_lag_seconds.set(0 if oldest is None else max(0.0, time.time() - oldest))

    async def settle(self, node_key: NodeKey | None = None) -> None:
        """Settles every pending receipt (of one node, or of all), due or not: before a share moves
        or a lease closes."""
        await self._settle(node_key, due_only=False)

    def due(self, pending: list[usage.PendingReceipt], now: float) -> list[usage.PendingReceipt]:
        """The receipts worth a transaction now (see the module's docstring). A share the ledger
        does not know yet is left for later (the indexer is catching up)."""
        owed: dict[str, int] = defaultdict(int)
        for r in pending:
            owed[str(r.usage.lease)] += unpaid(r) or 0
        chosen = []
        for r in pending:
            amount = unpaid(r)
            if amount is None or r.settled_until is None:
                continue
            lease = str(r.usage.lease)
            escrow_needs = r.escrow_left is not None and owed[lease] > 0 and 2 * owed[lease] >= r.escrow_left
            ripe = (
                min(r.usage.receipt.through, now) - r.settled_until >= self.interval_seconds
                and amount >= self.min_amount
            )
            if ripe or escrow_needs:
                chosen.append(r)
        return chosen

    async def _settle(self, node_key: NodeKey | None, *, due_only: bool) -> None:
        async with self._one_pass:
            async with self.pool.acquire() as conn:
                pending = [r for r in await usage.pending_receipts(conn, node_key) if not self.paused(r.usage.node_key)]
                if due_only:
                    pending = self.due(pending, time.time())
                batch = [r.usage for r in pending]
                if not batch:
                    return
                tolerance = await ledger.tolerances(conn, list({str(u.lease) for u in batch}))
            outcomes = await self.settler.settle(
                batch, lambda u, since: self.observed(u, since, tolerance.get(str(u.lease), 0))
            )
            async with self.pool.acquire() as conn:
                async with self.fence.decision(conn):
                    await usage.settle_outcomes(conn, outcomes)
        for o in outcomes:
            log.info(
                f"usage.{o.status.value}",
                lease=o.usage.lease,
                node=o.usage.node_key,
                epoch=o.usage.receipt.epoch,
                gpu_seconds=o.usage.receipt.gpu_seconds,
                through=o.usage.receipt.through,
                tx=o.signature,
                reason=o.reason or None,
            )

    def observed(self, receipt: SignedUsage, since: int, tolerance: int = 0) -> int | None:
        """Seconds from `since` (the share's last settled receipt) to the receipt's `through` the node
        may bill by what this process saw. Time it could not see (before `blind_until`) is not held
        against the node (the chain's own cap applies to it); silence the lease's client tolerates
        (its downtime tolerance) is held time."""
        start, end = since, receipt.receipt.through
        if end <= self.blind_until:
            return None
        unseen = max(0, int(self.blind_until) - start)
        return unseen + self.fleet.online_seconds(receipt.node_key, max(start, int(self.blind_until)), end, tolerance)
