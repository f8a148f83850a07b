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

Replicas (coordinator.leader): every replica runs the indexer, the API and the gateway; only the
elected leader runs the decision loops, and each term of leadership builds that in-memory state
afresh (`_term`), exactly as a restarted coordinator does, so a new leader picks up from the
ledger and the chain where the last one was.
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
from coordinator.db import leader as leader_db
from coordinator.db import leases as ledger
from coordinator.endpoints import Endpoints
from coordinator.fleet import Fleet
from coordinator.gateway import Gateway
from coordinator.indexer import Indexer
from coordinator.leader import Election, Fence, Fenced, replica_name
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
from coordinator.relay import Relay
from coordinator.rewards import Rewards
from coordinator.scheduler import LeaseRequest, NotPlaced, Scheduler
from coordinator.scheduler import Placement as Placed
from coordinator.settings import Settings
from coordinator.settlement import Settler
from coordinator.state import Shared
from coordinator.view import FleetView
from gpunet.accounts import AccountError, fetch_config
from gpunet.client import InFlight
from gpunet.logs import get_logger
from gpunet.protocol import Welcome

__all__ = ["Coordinator", "DatabaseLost"]

log = get_logger("gpunet.coordinator")


class Coordinator:
    def __init__(
        self, settings: Settings, pool: asyncpg.Pool, attester: Keypair, clock: Callable[[], float] = time.time
    ) -> None:
        self.settings, self.pool, self.attester_key, self.clock = settings, pool, attester, clock
        self.chain = AsyncClient(settings.rpc_url, commitment=Confirmed, timeout=30)
        # Set (with DatabaseLost) when the coordinator must stop; whoever runs it waits on it too.
        self.fatal: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.metrics = Metrics()
        # The attester signs every transaction; the fees are spread over the pool (coordinator.payers).
        self.payers = FeePayers(
            self.chain,
            attester,
            fee_payer_keys(settings.fee_payer_path, settings.fee_payers),
            min_lamports=settings.fee_payer_min_lamports,
            top_up_lamports=settings.fee_payer_top_up_lamports,
            attester_reserve_lamports=settings.attester_min_lamports,
        )
        # One window of transactions in flight for everything this process sends (gpunet.client.InFlight).
        self.sender = InFlight(self.chain, window=settings.tx_window)
        self.metrics.transactions_in_flight.set_function(lambda: self.sender.outstanding)
        self.metrics.transaction_window.set_function(lambda: self.sender.window)
        self.gateway = Gateway(heartbeat_seconds=settings.heartbeat_seconds)
        self.gateway.leading = lambda: self.leading
        self.gateway.leader_url = self._leader_gateway
        # The data plane (shells, forwards, endpoints) on the gateway's server, on every replica.
        self.relay = Relay(pool)
        self.gateway.routes = self.relay.routes()
        # A job's exposed HTTP ports at /endpoints/{lease}/{name}/, through the relay, on every replica.
        self.endpoints = Endpoints(pool, settings, self.metrics, self.relay)
        self.checkpoints = CheckpointStore(
            blob_store(
                settings.checkpoint_dir or settings.state_dir / "checkpoints",
                settings.checkpoint_s3_bucket,
                settings.checkpoint_s3_endpoint,
                settings.checkpoint_s3_prefix,
            ),
            quota_bytes=settings.checkpoint_quota_bytes,
        )
        self.indexer = Indexer(settings, pool)
        self.replica = replica_name(settings.replica_id)
        self.election: Election | None = None  # at start: it advertises the gateway's URL
        self._tasks: list[asyncio.Task[Any]] = []
        self._leader_tasks: list[asyncio.Task[Any]] = []
        self._term(self._follower_fence())

    def _follower_fence(self) -> Fence:
        """A follower's state is built with a fence that refuses everything (no loop runs on it)."""
        return Fence(self.pool, self.replica, 0, lambda: False, self.metrics)

    def _term(self, fence: Fence) -> None:
        """The in-memory state of one term of leadership, built fresh: a new leader knows only what the
        ledger and the chain say (as a restarted coordinator), and a replica that stops leading forgets it."""
        settings, pool = self.settings, self.pool
        # After a blind window, heartbeats that waited in the sockets are read before anyone is judged.
        self.fleet = Fleet(
            lost_after_seconds=settings.lost_after_seconds,
            clock=self.clock,
            drain_seconds=max(1.0, 2 * settings.heartbeat_seconds),
        )
        self.shared = Shared(Scheduler(accept_simulated=settings.accept_simulated), metrics=self.metrics)
        chain_writer = Attester(
            self.chain,
            self.attester_key,
            payers=self.payers,
            metrics=self.metrics,
            intend=fence.intend,
            sender=self.sender,
        )
        view = FleetView(self.shared, self.fleet, self.gateway)
        self.outages = Outages(
            settings, pool, self.chain, self.fleet, self.shared.region, self.fatal, metrics=self.metrics
        )
        self.settlement = Settlement(
            pool,
            Settler(self.chain, self.attester_key, self.payers, intend=fence.intend, sender=self.sender),
            self.fleet,
            started_at=time.time(),
            reconnect_grace_seconds=settings.reconnect_grace_seconds,
            interval_seconds=settings.settle_interval_seconds,
            min_amount=settings.settle_min_amount,
            metrics=self.metrics,
            fence=fence,
            paused=self.outages.paused_for,
        )
        settle = self.settlement.settle
        self.placement = Placement(pool, self.shared, view, chain_writer, fence=fence)
        self.dispatch = Dispatch(
            pool, self.shared, self.gateway, cluster_port=settings.cluster_port, checkpoints=self.checkpoints
        )
        self.failover = Failover(
            settings, pool, self.chain, self.shared, view, self.fleet, self.outages, chain_writer, settle, fence=fence
        )
        self.drain = Drain(pool, self.shared, view, self.gateway, chain_writer, settle, fence=fence)
        self.lease_end = LeaseEnd(
            pool,
            self.chain,
            self.shared,
            self.gateway,
            chain_writer,
            settle,
            close_grace_seconds=settings.close_grace_seconds,
            fence=fence,
            # the workers' last receipts may still come from nodes reconnecting into this term
            finalize_after=time.time() + settings.reconnect_grace_seconds,
        )
        self.verification = Verification(
            settings, pool, self.chain, self.shared, self.gateway, chain_writer, fence=fence
        )
        self.rewards = Rewards(settings, pool, self.chain, self.fleet, chain_writer)
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

    @property
    def leading(self) -> bool:
        return self.election is not None and self.election.leading()

    async def start(self) -> Coordinator:
        # Workers send their newest usage receipt every usage period (they sign one every tick).
        config = await self._config()
        require_listed(config, self.attester_key.pubkey(), self.settings.attester_keypair)
        period = config.usage_period_seconds
        self.gateway.welcome = Welcome(heartbeat_seconds=self.settings.heartbeat_seconds, usage_period_seconds=period)
        await self.gateway.start(self.settings.gateway_host, self.settings.gateway_port)
        settings = self.settings
        self.election = Election(
            self.pool,
            self.replica,
            ttl_seconds=settings.leader_ttl_seconds,
            renew_seconds=settings.leader_renew_seconds,
            gateway_url=settings.advertise_gateway_url or self.gateway.url,
            api_url=settings.api_url,
            metrics=self.metrics,
            on_lead=self._lead,
            on_lose=self._follow,
        )
        # The indexer is idempotent (one writer at a time per database; what another wrote is skipped),
        # so every replica runs it and serves a fresh ledger. The watches look at the current term's view.
        self._tasks = [asyncio.create_task(self.indexer.run(), name="indexer")]
        for name, step, every in (
            ("stall-watch", lambda: self.outages.watch_own_stalls(), WATCH_EVERY_SECONDS),
            ("database-watch", lambda: self.outages.watch_database(), 1.0),
            ("attester-balance", self._read_attester_balance, self.settings.attester_balance_seconds),
            ("sessions-to-leader", self._sessions_to_leader, self.settings.leader_renew_seconds),
            ("endpoint-health", self.endpoints.check_health, self.settings.endpoint_health_seconds),
            ("endpoint-log", self.endpoints.flush_log, 1.0),
        ):
            self._tasks.append(asyncio.create_task(self._every(name, step, every, self.metrics), name=name))
        with contextlib.suppress(Exception):  # a lone coordinator leads from here on; a database fault: next round
            await self.election.step()
        self._tasks.append(asyncio.create_task(self.election.run(), name="election"))
        log.info(
            "coordinator.started",
            gateway=self.gateway.url,
            attester=self.attester_key.pubkey(),
            replica=self.replica,
            leading=self.leading,
        )
        for payer, lamports in await self.payers.balances():
            log.info("coordinator.fee_payer", payer=payer, lamports=lamports)
        return self

    async def _lead(self, fence: Fence) -> None:
        """This replica was elected: a new term's state, the workers' reconnect grace, the decision loops."""
        self._term(fence)
        async with self.pool.acquire() as conn:  # nodes with work must come back, or be lost
            for share in await ledger.active_shares(conn):
                self.fleet.expect(share.node_key, self.settings.reconnect_grace_seconds)
        if self.gateway.sessions:  # kept from before (no other replica led meanwhile): into this term
            await self.gateway.redirect_all(self.election.gateway_url if self.election else self.gateway.url)
        for name, step, every in (
            ("placement", self.placement.step, 0.1),
            ("dispatch", self.dispatch.step, 0.1),
            ("lease-ends", self.lease_end.step, 1.0),
            ("failover", self.failover.step, 0.5),
            ("drain", self.drain.step, 0.5),
            ("verification", self.verification.step, 1.0),
            ("reward-samples", self.rewards.sample, min(60.0, self.settings.reward_sample_seconds / 10)),
            ("rewards", self.rewards.step, self.settings.rewards_every_seconds),
            ("settlement", self.settlement.step, self.settings.settle_seconds),
            ("checkpoint-retention", self._checkpoint_retention, 60.0),
            ("decisions-retention", self._decisions_retention, 3600.0),
        ):
            task = asyncio.create_task(self._every(name, step, every, self.metrics), name=name)
            self._leader_tasks.append(task)
        log.info("coordinator.leading", replica=self.replica, term=fence.term, gateway=self.gateway.url)

    async def _follow(self) -> None:
        """This replica stopped leading: its decision loops stop, its workers go to the leader, its
        term's memory is dropped."""
        tasks, self._leader_tasks = self._leader_tasks, []
        self.verification.stop()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._term(self._follower_fence())
        await self._sessions_to_leader()
        log.info("coordinator.following", replica=self.replica)

    async def _sessions_to_leader(self) -> None:
        """A follower sends the worker sessions it still has to the leader, once one leads: until then
        (the database down, an election under way) they stay, idle, rather than reconnect in a loop."""
        if self.leading or not self.gateway.sessions:
            return
        if (lead := await self.other_leader()) is not None:
            await self.gateway.redirect_all(lead.gateway_url)

    async def other_leader(self) -> leader_db.Leader | None:
        """The leader as the leader row has it, when another replica leads (None: none does, this
        one does, or the database does not answer)."""
        try:
            async with self.pool.acquire() as conn:
                lead = await leader_db.current(conn)
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
            return None
        return lead if lead.live and lead.holder != self.replica else None

    async def _leader_gateway(self) -> str:
        """Where a follower sends workers ("": nowhere known; they try their next gateway)."""
        lead = await self.other_leader()
        return lead.gateway_url if lead is not None else ""

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

    async def _decisions_retention(self) -> None:
        """Forgets the decisions older than the retention period (the leader does; any could)."""
        async with self.pool.acquire() as conn:
            if forgotten := await leader_db.forget_decisions(conn, self.settings.decisions_retention_seconds):
                log.info("coordinator.decisions_forgotten", decisions=forgotten)

    async def checkpoint_holder(self, lease: str, node_key: str) -> bool:
        """Whether a node may use the lease's checkpoint store: it holds a share of the running lease."""
        async with self.pool.acquire() as conn:
            return await jobs.holds_share(conn, lease, node_key)

    async def checkpoint_signers(self, lease: str, rank: int) -> list[str]:
        """The node keys that hold or held rank `rank` of the lease: the only signers its checkpoints
        of that rank may have."""
        async with self.pool.acquire() as conn:
            return (await jobs.rank_holders(conn, lease)).get(rank, [])

    async def _config(self) -> Any:
        """The protocol configuration; waits (saying so) while the cluster is not initialised yet."""
        while True:
            try:
                return await fetch_config(self.chain)
            except AccountError as e:
                log.warning("coordinator.waiting", reason=str(e))
                await asyncio.sleep(1.0)

    async def stop(self) -> None:
        if self.election is not None:  # the lead ends now: another replica takes over at once
            with contextlib.suppress(Exception):
                await self.election.resign()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        with contextlib.suppress(Exception):  # the access log's last second
            await asyncio.wait_for(self.endpoints.flush_log(), 5)
        await self.endpoints.close()
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
            except Fenced:
                return  # this term is over (the election steps down); the next term starts its own loops
            except Exception as e:
                if isinstance(e, (asyncpg.PostgresError, asyncpg.InterfaceError)):
                    metrics.database_errors.inc()
                elif isinstance(e, (SolanaRpcException, httpx.HTTPError)):
                    metrics.rpc_errors.inc()
                log.exception("coordinator.loop_failed", loop=name)  # retried
            await asyncio.sleep(seconds)
