"""The coordinator as one service: the indexer keeps PostgreSQL in step with the chain, and the
loops of `coordinator.loops` act on it — placement (open leases onto nodes), dispatch (jobs onto
their workers), failover (lost nodes' shares elsewhere, judged by `coordinator.outages`), drain
(announced maintenance), lease end and settlement (signed usage onto the chain). The worker
gateway feeds the fleet's liveness and the workers' reports (`loops.workers`).

This module only wires them: each loop gets the narrow things it uses, and what they share in
memory is one `Shared` object. Every loop reads its work from the database and the chain, not from
memory, so a coordinator killed at any point and restarted picks up where it was: a placement in
flight is found on chain, a job is dispatched again (a worker acknowledges a repeated dispatch of
the job it has), and pending usage receipts are settled against what the chain has settled (never twice).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import httpx
from solana.exceptions import SolanaRpcException
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solders.keypair import Keypair

from coordinator.attester import Attester, require_listed
from coordinator.checkpoints import CheckpointStore, blob_store
from coordinator.db import jobs
from coordinator.db import leases as ledger
from coordinator.fleet import Fleet
from coordinator.gateway import Gateway
from coordinator.indexer import Indexer
from coordinator.loops.dispatch import Dispatch
from coordinator.loops.drain import Drain
from coordinator.loops.failover import Failover
from coordinator.loops.lease_end import LeaseEnd
from coordinator.loops.placement import Placement
from coordinator.loops.settlement import Settlement
from coordinator.loops.verification import Verification
from coordinator.loops.workers import WorkerMessages
from coordinator.metrics import Metrics
from coordinator.outages import WATCH_EVERY_SECONDS, DatabaseLost, Outages
from coordinator.payers import FeePayers, fee_payer_keys
from coordinator.scheduler import LeaseRequest, NotPlaced, Scheduler
from coordinator.scheduler import Placement as Placed
from coordinator.settings import Settings
from coordinator.settlement import Settler
from coordinator.state import Shared
from coordinator.view import FleetView
from gpunet.accounts import AccountError, fetch_config
from gpunet.logs import get_logger
from gpunet.protocol import Welcome

__all__ = ["Coordinator", "DatabaseLost"]

log = get_logger("gpunet.coordinator")


class Coordinator:
    def __init__(
        self, settings: Settings, pool: asyncpg.Pool, attester: Keypair, clock: Callable[[], float] = time.time
    ) -> None:
        self.settings, self.pool, self.attester_key = settings, pool, attester
        self.chain = AsyncClient(settings.rpc_url, commitment=Confirmed, timeout=30)
        # Set (with DatabaseLost) when the coordinator must stop; whoever runs it waits on it too.
        self.fatal: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        # After a blind window, heartbeats that waited in the sockets are read before anyone is judged.
        self.fleet = Fleet(
            lost_after_seconds=settings.lost_after_seconds,
            clock=clock,
            drain_seconds=max(1.0, 2 * settings.heartbeat_seconds),
        )
        self.shared = Shared(Scheduler(accept_simulated=settings.accept_simulated))
        self.metrics: Metrics = self.shared.metrics
        # The attester signs every transaction; the fees are spread over the pool (coordinator.payers).
        self.payers = FeePayers(
            self.chain,
            attester,
            fee_payer_keys(settings.fee_payer_path, settings.fee_payers),
            min_lamports=settings.fee_payer_min_lamports,
        )
        chain_writer = Attester(self.chain, attester, payers=self.payers, metrics=self.metrics)
        self.gateway = Gateway(heartbeat_seconds=settings.heartbeat_seconds)
        view = FleetView(self.shared, self.fleet, self.gateway)
        self.outages = Outages(
            settings, pool, self.chain, self.fleet, self.shared.region, self.fatal, metrics=self.metrics
        )
        self.settlement = Settlement(
            pool,
            Settler(self.chain, attester, self.payers),
            self.fleet,
            started_at=time.time(),
            reconnect_grace_seconds=settings.reconnect_grace_seconds,
            interval_seconds=settings.settle_interval_seconds,
            min_amount=settings.settle_min_amount,
            metrics=self.metrics,
        )
        settle = self.settlement.settle
        self.placement = Placement(pool, self.shared, view, chain_writer)
        self.checkpoints = CheckpointStore(
            blob_store(
                settings.checkpoint_dir or settings.state_dir / "checkpoints",
                settings.checkpoint_s3_bucket,
                settings.checkpoint_s3_endpoint,
                settings.checkpoint_s3_prefix,
            ),
            quota_bytes=settings.checkpoint_quota_bytes,
        )
        self.dispatch = Dispatch(
            pool, self.shared, self.gateway, cluster_port=settings.cluster_port, checkpoints=self.checkpoints
        )
        self.failover = Failover(
            settings, pool, self.chain, self.shared, view, self.fleet, self.outages, chain_writer, settle
        )
        self.drain = Drain(pool, self.shared, view, self.gateway, chain_writer, settle)
        self.lease_end = LeaseEnd(
            pool,
            self.chain,
            self.shared,
            self.gateway,
            chain_writer,
            settle,
            close_grace_seconds=settings.close_grace_seconds,
        )
        self.verification = Verification(settings, pool, self.chain, self.shared, self.gateway, chain_writer)
        self.gateway.handler = self.workers = WorkerMessages(
            pool,
            self.chain,
            self.shared,
            self.fleet,
            self.gateway,
            self.outages,
            self.dispatch,
            self.drain,
            self.verification,
            log_lines_per_lease=settings.log_lines_per_lease,
        )
        self.indexer = Indexer(settings, pool)
        self._tasks: list[asyncio.Task[Any]] = []

    async def start(self) -> Coordinator:
        # Workers send their newest usage receipt every usage period (they sign one every tick).
        config = await self._config()
        require_listed(config, self.attester_key.pubkey(), self.settings.attester_keypair)
        period = config.usage_period_seconds
        self.gateway.welcome = Welcome(heartbeat_seconds=self.settings.heartbeat_seconds, usage_period_seconds=period)
        await self.gateway.start(self.settings.gateway_host, self.settings.gateway_port)
        async with self.pool.acquire() as conn:  # nodes with work must come back, or be lost
            for share in await ledger.active_shares(conn):
                self.fleet.expect(share.node_key, self.settings.reconnect_grace_seconds)
        self._tasks = [asyncio.create_task(self.indexer.run(), name="indexer")]
        for name, step, every in (
            ("placement", self.placement.step, 0.1),
            ("dispatch", self.dispatch.step, 0.1),
            ("lease-ends", self.lease_end.step, 1.0),
            ("stall-watch", self.outages.watch_own_stalls, WATCH_EVERY_SECONDS),
            ("database-watch", self.outages.watch_database, 1.0),
            ("failover", self.failover.step, 0.5),
            ("drain", self.drain.step, 0.5),
            ("verification", self.verification.step, 1.0),
            ("settlement", self.settlement.step, self.settings.settle_seconds),
            ("checkpoint-retention", self._checkpoint_retention, 60.0),
            ("attester-balance", self._read_attester_balance, self.settings.attester_balance_seconds),
        ):
            self._tasks.append(asyncio.create_task(self._every(name, step, every, self.metrics), name=name))
        log.info("coordinator.started", gateway=self.gateway.url, attester=self.attester_key.pubkey())
        for payer, lamports in await self.payers.balances():
            log.info("coordinator.fee_payer", payer=payer, lamports=lamports)
        return self

    async def _read_attester_balance(self) -> None:
        """The attester's SOL balance, for /metrics and /readyz (it signs every transaction)."""
        lamports = (await self.chain.get_balance(self.attester_key.pubkey())).value
        self.metrics.set_attester_balance(lamports)
        if lamports < self.settings.attester_min_lamports:
            log.warning(  # under GPUNET_ATTESTER_MIN_LAMPORTS: fund it
                "coordinator.attester_low",
                attester=self.attester_key.pubkey(),
                lamports=lamports,
                min_lamports=self.settings.attester_min_lamports,
            )

    async def _checkpoint_retention(self) -> None:
        """Deletes the stored checkpoints of leases that ended more than the retention period ago."""

        async def ended(leases: list[str]) -> list[str]:
            before = int(time.time() - self.settings.checkpoint_retention_seconds)
            async with self.pool.acquire() as conn:
                return await jobs.checkpoints_past_retention(conn, leases, before)

        await self.checkpoints.sweep(ended)

    async def checkpoint_holder(self, lease: str, node_key: str) -> bool:
        """Whether a node may use the lease's checkpoint store: it holds a share of the running lease."""
        async with self.pool.acquire() as conn:
            return await jobs.holds_share(conn, lease, node_key)

    async def checkpoint_signers(self, lease: str) -> list[str]:
        """The node keys that hold or held a share of the lease: the only signers its checkpoints may have."""
        async with self.pool.acquire() as conn:
            return await jobs.lease_node_keys(conn, lease)

    async def _config(self) -> Any:
        """The protocol configuration; waits (saying so) while the cluster is not initialised yet."""
        while True:
            try:
                return await fetch_config(self.chain)
            except AccountError as e:
                log.warning("coordinator.waiting", reason=str(e))
                await asyncio.sleep(1.0)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self.gateway.stop()
        await self.chain.close()

    async def run_forever(self) -> None:
        await self.start()
        try:
            await self.fatal
        finally:
            await self.stop()

    def quote(self, request: LeaseRequest) -> Placed | NotPlaced:
        """What placing `request` now would give (changes nothing)."""
        return self.shared.scheduler.place(request)

    @staticmethod
    async def _every(name: str, step: Callable[[], Awaitable[None]], seconds: float, metrics: Metrics) -> None:
        """Runs `step` every `seconds`; a failing step is logged (and counted, when the database or
        the RPC failed it) and retried, never fatal."""
        while True:
            try:
                await step()
            except asyncio.CancelledError:
                raise
            except Exception as e:
                if isinstance(e, (asyncpg.PostgresError, asyncpg.InterfaceError)):
                    metrics.database_errors.inc()
                elif isinstance(e, (SolanaRpcException, httpx.HTTPError)):
                    metrics.rpc_errors.inc()
                log.exception("coordinator.loop_failed", loop=name)  # retried
            await asyncio.sleep(seconds)
