"""Lease end: at its end (or when its client closes it) a lease's workers are told to stop, their
last usage is settled, and the lease is closed and finalized on chain (the rest of its escrow
refunded). Its nodes are free for the next lease once it is closed on chain (the program frees them
at `close_lease`) and every one of them acknowledged being told to stop, not at its finalization:
a worker that acknowledged takes no other lease's share onto those GPUs before the old job stopped."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import asyncpg
from solana.rpc.async_api import AsyncClient
from solders.pubkey import Pubkey

from coordinator.attester import Attester
from coordinator.db import leases as ledger
from coordinator.db import usage
from coordinator.db.connection import Connection
from coordinator.gateway import NodeOffline
from coordinator.keys import NodeKey
from coordinator.leader import Fence
from coordinator.state import Shared, WorkerLink
from gpunet.accounts import fetch
from gpunet.client import TransactionFailed
from gpunet.logs import get_logger
from gpunet.protocol import Cancel

__all__ = ["UNPAID_WAIT_SECONDS", "LeaseEnd"]

log = get_logger("gpunet.coordinator.lease_end")

# A closing lease's connected nodes not yet paid to its end are waited for this long before it is
# finalized: two of the worker's usage resends (GPUNET_WORKER_USAGE_RESEND_SECONDS, 15 s).
UNPAID_WAIT_SECONDS = 40.0
# A closed lease's node that has not acknowledged being told to stop is told again this often (its
# session dropped before the message came, say); its GPUs stay reserved until it acknowledges.
CANCEL_RESEND_SECONDS = 5.0


class LeaseEnd:
    def __init__(
        self,
        pool: asyncpg.Pool,
        chain: AsyncClient,
        shared: Shared,
        link: WorkerLink,
        attester: Attester,
        settle: Callable[[NodeKey | None], Awaitable[None]],
        *,
        close_grace_seconds: float,
        fence: Fence,
        finalize_after: float = 0.0,
    ) -> None:
        self.finalize_after = finalize_after  # unix seconds: none is finalized before (see _finalizable)
        self.pool, self.chain, self.shared, self.link, self.fence = pool, chain, shared, link, fence
        self.attester, self.settle, self.close_grace_seconds = attester, settle, close_grace_seconds
        self._billed_until: dict[str, int | None] = {}  # lease -> the billing end its workers were told
        self._told: dict[tuple[str, NodeKey], float] = {}  # (lease, node) -> when last told to stop

    async def step(self) -> None:
        now = time.time()
        ending = self.shared.ending
        closing: list[str] = []  # to close on chain this step
        finalizing: list[str] = []  # to finalize, once checked after the settlement pass
        async with self.pool.acquire() as conn:
            for lease, ends_at in await ledger.leases_due(conn, int(now)):
                if lease not in ending:
                    ending[lease] = now
                    await self._stop_workers(lease, "the lease reached its end", ends_at)
                elif now - ending[lease] >= self.close_grace_seconds:
                    closing.append(lease)
            # Closed for use (by us at its end, or by its client): the nodes' last usage is settled,
            # then the lease is finalized (the rest of its escrow refunded).
            for lease in await ledger.closing_leases(conn):
                self.shared.closed.add(lease)  # before its workers are told: their acks may free the nodes
                if lease not in ending:
                    ending[lease] = now
                    billed_until = (await fetch(self.chain, Pubkey.from_string(lease), "Lease")).billable_until
                    await self._stop_workers(lease, "the lease was closed", billed_until)
                else:
                    await self._free_nodes(lease, now)
                    # nothing is finalized before `finalize_after` (see _finalizable)
                    if now - ending[lease] >= self.close_grace_seconds and now >= self.finalize_after:
                        finalizing.append(lease)
            for lease in await ledger.closed_unended(conn):
                await self._stop_workers(lease, "the lease was closed")
                self.shared.forget(lease)
                self._billed_until.pop(lease, None)
                for key in [k for k in self._told if k[0] == lease]:
                    del self._told[key]
                async with self.fence.decision(conn):
                    await ledger.set_placement(conn, lease, "ended", "the lease is closed")
        if not (closing or finalizing):
            return
        await self.settle(None)  # the workers' last receipts first: one pass for every lease here
        async with self.pool.acquire() as conn:
            finalizing = [lease for lease in finalizing if await self._finalizable(conn, lease)]
        # Different leases' closes and finalizations go out at once (the attester's window).
        sends = [self._send("close", self.attester.close, lease) for lease in closing]
        sends += [self._send("finalize", self.attester.finalize, lease) for lease in finalizing]
        for result in await asyncio.gather(*sends, return_exceptions=True):
            if isinstance(result, BaseException):
                raise result  # after every send has ended: the loop's supervisor hears the first

    async def _stop_workers(self, lease: str, reason: str, billing_ended_at: int | None = None) -> None:
        reservations = self.shared.scheduler.reservations
        self._billed_until.setdefault(lease, billing_ended_at)
        for key in reservations[lease].node_keys if lease in reservations else ():
            await self._tell_stop(lease, key, reason, billing_ended_at)

    async def _tell_stop(self, lease: str, key: NodeKey, reason: str, billing_ended_at: int | None) -> None:
        self._told[(lease, key)] = time.time()
        try:
            await self.link.send(key, Cancel(lease=lease, reason=reason, ends_at=billing_ended_at))
        except NodeOffline:
            pass

    async def _free_nodes(self, lease: str, now: float) -> None:
        """The lease is closed on chain (its nodes are free there): the scheduler frees them too once
        every node's worker acknowledged being told to stop (`Shared.stopped`); one that did not yet
        is told again now and then. Its last usage is settled and it is finalized later, as before."""
        reservations = self.shared.scheduler.reservations
        if lease not in reservations:
            return
        if self.shared.free_if_stopped(lease):
            log.info("lease.nodes_freed", lease=lease, after_s=round(now - self.shared.ending.get(lease, now), 3))
            return
        stopped = self.shared.stopped.get(lease, set())
        for key in [k for k in reservations[lease].node_keys if k not in stopped]:
            if self.link.online(key) and now - self._told.get((lease, key), 0.0) >= CANCEL_RESEND_SECONDS:
                await self._tell_stop(lease, key, "the lease was closed", self._billed_until.get(lease))

    @staticmethod
    async def _send(action: str, send: Callable[[Pubkey], Awaitable[object]], lease: str) -> None:
        try:
            tx = await send(Pubkey.from_string(lease))
        except TransactionFailed as e:
            log.warning(f"lease.{action}_refused", lease=lease, error=str(e))
            return
        log.info(f"lease.{action}d", lease=lease, tx=tx)

    async def _finalizable(self, conn: Connection, lease: str) -> bool:
        """Whether a closing lease is finalized now (its last usage settled by the pass before): once
        no usage receipt of it is pending and every share whose node is connected is paid up to the
        end of billing: a worker sends again the receipts this process
        could not record (its database was down, say) only every so often, and finalizing before they
        come would leave that usage unpayable. A connected node is waited for `UNPAID_WAIT_SECONDS`
        at most (a report of it refused for good must not hold the client's refund until the chain's
        settlement deadline); a node that is not connected, not at all — but nothing is finalized
        before `finalize_after`: the reconnect grace of this process's start (or of its term as the
        leader), while nodes may still be reconnecting to send their last receipts."""
        account = await fetch(self.chain, Pubkey.from_string(lease), "Lease")
        if type(account.status).__name__ != "Closing":
            return False  # finalized meanwhile (by anyone); the indexer will show it
        waited = time.time() - self.shared.ending.get(lease, 0.0)
        unpaid = [
            a
            for a in account.assignments[: account.node_count]
            if a.settled_until < account.billable_until and self.link.online(a.node_key)
        ]
        unpaid = unpaid if waited < UNPAID_WAIT_SECONDS else []
        return not ((unpaid or await usage.pending_count(conn, lease)) and time.time() <= account.settle_deadline)
