"""Leader election among coordinator replicas sharing one PostgreSQL, and the fencing of every
decision the leader makes.

The lead is a lease row (coordinator/db/leader.py): a replica takes it when it has expired, the
leader renews it every `leader_renew_seconds` for `leader_ttl_seconds`, and every change of holder
raises its `term`. The leader steps down (its decision loops stop) the moment a renewal fails or its
own monotonic clock says the lease may have expired: the time since the start of its last successful
renewal is what counts, so a process paused past its lease assumes it lost, whatever it believed.

The term is the fencing token. A decision written to the ledger runs in a transaction that first
checks, under a share lock of the leader row, that the term is current and this replica's
(`Fence.decision`); a decision sent to the chain is recorded under that check first
(`Fence.intend`), so a leader paused past its lease that wakes is refused by the database before it
reaches the chain. A refusal is counted (gpunet_coordinator_fenced_decisions) and logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import asyncpg

from coordinator.db import leader as leader_db
from coordinator.db.connection import Connection
from coordinator.db.leader import Fenced
from coordinator.metrics import Metrics
from gpunet.logs import get_logger

__all__ = ["Election", "Fence", "Fenced", "replica_name"]

log = get_logger("gpunet.coordinator.leader")


def replica_name(configured: str = "") -> str:
    """A name no other replica has: the configured one (else host and process) and a random suffix. A
    restarted process is a new replica, and two given the same name (one configuration for all) are
    still two: each would otherwise take the other's lead for its own and keep its workers idle."""
    return f"{configured or f'{socket.gethostname()}-{os.getpid()}'}-{secrets.token_hex(3)}"


class Fence:
    """One term's right to decide: every decision of the leader's loops goes through it."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        holder: str,
        term: int,
        leading: Callable[[], bool],
        metrics: Metrics,
        on_refused: Callable[[], None] = lambda: None,
        *,
        idle_seconds: float = 3.0,
    ) -> None:
        self.pool, self.holder, self.term, self.idle_seconds = pool, holder, term, idle_seconds
        self._leading, self.metrics, self._on_refused = leading, metrics, on_refused

    @contextlib.asynccontextmanager
    async def decision(self, conn: Connection) -> AsyncIterator[None]:
        """A transaction on `conn` that writes a decision to the ledger: refused (Fenced) unless this
        term still leads; the lead cannot change hands until it commits."""
        async with conn.transaction():
            await self._check(conn)
            yield

    async def intend(self, kind: str, subject: str) -> None:
        """Records that this leader is about to send `kind` about `subject` to the chain; Fenced
        (nothing recorded, nothing to send) unless this term still leads."""
        async with self.pool.acquire() as conn, conn.transaction():
            await self._check(conn)
            await leader_db.record_decision(conn, self.holder, self.term, kind, subject)
        if not self._leading():  # the round trip took the rest of the lease
            self._refuse(kind, "its lease ran out while the decision was recorded")

    async def _check(self, conn: Connection) -> None:
        if not self._leading():
            self._refuse("decision", "its lease may have expired by this process's clock")
        try:
            await leader_db.check_term(conn, self.holder, self.term, self.idle_seconds)
        except Fenced as e:
            self._refuse("decision", str(e))

    def _refuse(self, kind: str, why: str) -> None:
        self.metrics.fenced_decisions.inc()
        log.warning("leader.fenced", holder=self.holder, term=self.term, kind=kind, reason=why)
        self._on_refused()
        raise Fenced(f"term {self.term} may not decide: {why}")


class Election:
    """Takes, renews and gives up the lead. `on_lead(fence)` starts the leader's work, `on_lose()`
    stops it; `run()` is the loop every replica runs."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        holder: str,
        *,
        ttl_seconds: float,
        renew_seconds: float,
        gateway_url: str,
        api_url: str,
        metrics: Metrics,
        on_lead: Callable[[Fence], Awaitable[None]],
        on_lose: Callable[[], Awaitable[None]],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.pool, self.holder, self.ttl, self.renew_seconds = pool, holder, ttl_seconds, renew_seconds
        self.gateway_url, self.api_url, self.metrics = gateway_url, api_url, metrics
        self.on_lead, self.on_lose, self.clock = on_lead, on_lose, clock
        self.fence: Fence | None = None
        self._valid_until = 0.0  # by `clock`: the start of the last successful renewal plus the TTL
        self._lost = asyncio.Event()  # a fenced decision: step down at once, not at the next renewal
        self._follower_wait = renew_seconds
        metrics.leader.set(0)
        metrics.leader_term.set(0)

    def leading(self) -> bool:
        return self.fence is not None and not self._lost.is_set() and self.clock() < self._valid_until

    async def run(self) -> None:
        try:
            while True:
                try:
                    await self.step()
                except Exception:  # the election must go on whatever failed (it is logged)
                    log.exception("leader.round_failed", holder=self.holder)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._lost.wait(), self._next_wait())
        finally:
            with contextlib.suppress(Exception):
                await self.resign()

    def _next_wait(self) -> float:
        if self.fence is None:  # a follower tries again when the lead expires (or in a renewal's time)
            return self._follower_wait
        # wake before the lease runs out by this clock, whatever the renewal interval
        return max(0.0, min(self.renew_seconds, self._valid_until - self.clock()))

    async def step(self) -> None:
        """One round: a follower tries to take an expired lead, the leader renews (or steps down)."""
        if self.fence is not None:
            if self._lost.is_set():
                await self._step_down("a decision of this term was fenced")
            elif not self.leading():
                await self._step_down("its lease may have expired by this process's clock (a pause, a slow renewal)")
            elif not await self._renew():
                await self._step_down("the renewal failed")
            return
        started = self.clock()
        try:
            async with self.pool.acquire() as conn:
                term = await leader_db.acquire(conn, self.holder, self.ttl, self.gateway_url, self.api_url)
                if term is None:  # wake just after the lead expires, if it is not renewed meanwhile
                    left = await leader_db.seconds_left(conn)
                    self._follower_wait = min(self.renew_seconds, max(0.05, left + 0.02))
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as e:
            log.warning("leader.acquire_failed", holder=self.holder, error=str(e))
            self._follower_wait = self.renew_seconds
            return
        if term is None:
            return
        self._valid_until = started + self.ttl
        self._lost.clear()
        fence: Fence
        fence = self.fence = Fence(
            self.pool,
            self.holder,
            term,
            self.leading,
            self.metrics,
            on_refused=lambda: self._fenced(fence),
            idle_seconds=self.ttl,  # a transaction paused longer would hold the lead past its lease
        )
        self.metrics.leader.set(1)
        self.metrics.leader_term.set(term)
        log.info("leader.elected", holder=self.holder, term=term)
        try:
            await self.on_lead(fence)
        except Exception:  # its start failed (the database, say): the lead is given up, not held idle
            log.exception("leader.start_failed", holder=self.holder, term=term)
            await self.resign()

    def _fenced(self, fence: Fence) -> None:
        if self.fence is fence:  # not a late refusal of an earlier term
            self._lost.set()

    async def _renew(self) -> bool:
        assert self.fence is not None
        started = self.clock()
        try:
            # a renewal that has not answered when the lease runs out by this clock has failed
            renewed = await asyncio.wait_for(self._renew_once(self.fence.term), self._valid_until - started)
        except (TimeoutError, OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as e:
            log.warning(
                "leader.renew_failed", holder=self.holder, term=self.fence.term, error=str(e) or type(e).__name__
            )
            return False
        if renewed:
            self._valid_until = started + self.ttl
        return renewed

    async def _renew_once(self, term: int) -> bool:
        async with self.pool.acquire() as conn:
            return await leader_db.renew(conn, self.holder, term, self.ttl)

    async def _step_down(self, why: str) -> None:
        fence, self.fence = self.fence, None
        assert fence is not None
        self._lost.clear()  # (it wakes the loop only while leading)
        self.metrics.leader.set(0)
        log.warning("leader.stepped_down", holder=self.holder, term=fence.term, reason=why)
        await self.on_lose()

    async def resign(self) -> None:
        """A clean stop: the leader's work stops and its lease ends now, so another replica takes over at once."""
        fence = self.fence
        if fence is None:
            return
        await self._step_down("this replica is stopping")
        async with self.pool.acquire() as conn:
            await leader_db.release(conn, self.holder, fence.term)
