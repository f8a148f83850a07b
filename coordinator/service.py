"""The coordinator as one service: the indexer keeps PostgreSQL in step with the chain, and four
loops act on it — placement (open leases onto nodes), dispatch (jobs onto their workers),
failover (lost nodes' shares elsewhere) and settlement (signed usage onto the chain). The worker
gateway feeds the fleet's liveness and the workers' reports.

Every loop reads its work from the database and the chain, not from memory, so a coordinator
killed at any point and restarted picks up where it was: a placement in flight is found on
chain, a job is dispatched again (a worker acknowledges a repeated dispatch of the job it has), and
pending usage is settled against the chain's sequence numbers (never twice).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from coordinator import operations as ops
from coordinator.attester import Attester, evidence_hash
from coordinator.fleet import Fleet, due_shares
from coordinator.gateway import Gateway
from coordinator.indexer import Indexer
from coordinator.placement import Placer
from coordinator.settings import Settings
from coordinator.settlement import Settler, SignedUsage
from gpunet.accounts import AccountError, fetch, fetch_config
from gpunet.catalog import region_name
from gpunet.pda import node_pda
from gpunet.protocol import (Ack, Cancel, Checkpoint, Error, Heartbeat, Hello, JobLog, JobStatus, UsageReportMessage,
                             Welcome)

__all__ = ["Coordinator"]

log = logging.getLogger("gpunet.coordinator")

WATCH_EVERY_SECONDS = 0.2


class DatabaseLost(Exception):
    """The database stayed unreachable longer than the coordinator waits for it: it stops, so a
    supervisor restarts it (with the embedded PostgreSQL, a restart starts the server again)."""


class Coordinator:
    def __init__(self, settings: Settings, pool: asyncpg.Pool, attester: Keypair) -> None:
        self.settings, self.pool, self.attester_key = settings, pool, attester
        self.chain = AsyncClient(settings.rpc_url, commitment=Confirmed, timeout=30)
        # After a blind window, heartbeats that waited in the sockets are read before anyone is judged.
        self.fleet = Fleet(lost_after_seconds=settings.lost_after_seconds,
                           drain_seconds=max(1.0, 2 * settings.heartbeat_seconds))
        self.gateway = Gateway(self, heartbeat_seconds=settings.heartbeat_seconds)
        self.attester = Attester(self.chain, attester)
        self.settler = Settler(self.chain, attester)
        self.placer = Placer(self)
        self.indexer = Indexer(settings, pool)
        self.started_at = time.time()
        self._tasks: list[asyncio.Task[Any]] = []
        self._running_checked: dict[Pubkey, frozenset[str]] = {}  # node -> held or running leases it holds
        self._silent: set[Pubkey] = set()  # nodes found silent, not judged yet
        self._blind_since: float | None = None  # since when this process cannot see the chain
        self.slashing_paused = False
        self.slashing_paused_reason = ""
        self.paused_regions: dict[int, float] = {}  # region -> since when its slashing is paused
        # Pauses the operator ended (the outage is the suppliers'): not paused again until the silent
        # share falls back under the threshold (the fleet's, None, or a region's).
        self._overridden: set[int | None] = set()
        self._paused_since = 0.0
        self._database_down_since: float | None = None
        self._settling = asyncio.Lock()
        self._stale_told: set[tuple[Pubkey, str, str | None]] = set()  # (node, lease, epoch) told it moved
        # Set (with DatabaseLost) when the coordinator must stop; whoever runs it waits on it too.
        self.fatal: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def start(self) -> Coordinator:
        # Workers meter in the protocol's usage period (the most one report may cover).
        config = await self._config()
        if self.attester_key.pubkey() not in list(config.attesters)[: config.attester_count]:
            raise AccountError(f"the attester key {self.attester_key.pubkey()} is not one of the config's attesters; "
                               f"the admin adds it with `gpunet admin update --attester {self.attester_key.pubkey()}`")
        period = config.usage_period_seconds
        self.gateway.welcome = Welcome(heartbeat_seconds=self.settings.heartbeat_seconds, usage_period_seconds=period)
        await self.gateway.start(self.settings.gateway_host, self.settings.gateway_port)
        async with self.pool.acquire() as conn:  # nodes with work must come back, or be lost
            for share in await ops.active_shares(conn):
                self.fleet.expect(Pubkey.from_string(share["node_key"]), self.settings.reconnect_grace_seconds)
        self._tasks = [asyncio.create_task(self.indexer.run(), name="indexer")]
        for name, step, every in (("placement", self.placer.place_open_leases, 0.1),
                                  ("dispatch", self.placer.dispatch_jobs, 0.1),
                                  ("lease-ends", self.placer.end_leases, 1.0),
                                  ("stall-watch", self.watch_own_stalls, WATCH_EVERY_SECONDS),
                                  ("database-watch", self.watch_database, 1.0),
                                  ("failover", self.fail_over, 0.5),
                                  ("drain", self.placer.move_drained, 0.5),
                                  ("settlement", self.settle_pending, self.settings.settle_seconds)):
            self._tasks.append(asyncio.create_task(self._every(name, step, every), name=name))
        log.info("coordinator.started gateway=%s attester=%s", self.gateway.url, self.attester_key.pubkey())
        return self

    async def _config(self) -> Any:
        """The protocol configuration; waits (saying so) while the cluster is not initialised yet."""
        while True:
            try:
                return await fetch_config(self.chain)
            except AccountError as e:
                log.warning("coordinator.waiting %s", e)
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

    @property
    def database_up(self) -> bool:
        """As the database watch last found it (every second)."""
        return self._database_down_since is None

    async def watch_database(self) -> None:
        """A database outage is a state: decisions wait (nobody is judged, see `_may_judge`) and the
        outage is a blind window once it ends. One longer than `database_outage_exit_seconds` stops
        the coordinator with DatabaseLost."""
        now = time.time()
        try:
            async with asyncio.timeout(3):
                async with self.pool.acquire() as conn:
                    await conn.fetchval("SELECT 1")
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError) as e:
            if self._database_down_since is None:
                self._database_down_since = now
                log.error("database.unreachable (%s): decisions wait for it; the coordinator stops after %.0f s",
                          e or type(e).__name__, self.settings.database_outage_exit_seconds)
            elif now - self._database_down_since > self.settings.database_outage_exit_seconds and not self.fatal.done():
                self.fatal.set_exception(DatabaseLost(
                    f"the database has not answered for {now - self._database_down_since:.0f} s "
                    f"(GPUNET_DATABASE_OUTAGE_EXIT_SECONDS={self.settings.database_outage_exit_seconds:g}); "
                    "check it (or the embedded server's log in GPUNET_STATE_DIR) and start the coordinator again"))
            return
        if self._database_down_since is not None:
            self.fleet.add_blind(self._database_down_since, now)
            log.warning("database.back after %.1f s", now - self._database_down_since)
            self._database_down_since = None

    @staticmethod
    async def _every(name: str, step: Callable[[], Awaitable[None]], seconds: float) -> None:
        """Runs `step` every `seconds`; a failing step is logged and retried, never fatal."""
        while True:
            try:
                await step()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("coordinator.%s failed; retrying", name)
            await asyncio.sleep(seconds)

    # --- the gateway's side (GatewayHandler)

    async def admit(self, node_key: Pubkey, hello: Hello) -> str | None:
        info = (await self.chain.get_account_info(node_pda(node_key))).value
        if info is None:
            return f"node {node_key} is not registered on chain (gpunet node register)"
        # A jailed node is admitted: it gets no work (the scheduler and the program skip jailed
        # nodes), but a node slashed for going silent usually comes back with its old job still
        # running, and only a session can tell it to cancel the jobs of leases it no longer holds.
        node = await fetch(self.chain, node_pda(node_key), "Node")
        if node.jailed:
            log.warning("worker.jailed node=%s jail_ends_at=%d (admitted; it gets no work until unjailed)",
                        node_key, node.jail_ends_at)
        return None

    async def connected(self, node_key: Pubkey, hello: Hello) -> None:
        self.fleet.connected(node_key, hello.simulated)
        self._running_checked.pop(node_key, None)
        self.placer.redispatch(str(node_key))
        log.info("worker.connected node=%s simulated=%s gpus=%d", node_key, hello.simulated, len(hello.inventory.gpus))

    async def heartbeat(self, node_key: Pubkey, beat: Heartbeat) -> None:
        self.fleet.heartbeat(node_key, beat.healthy)
        # A node that comes back after its share moved (or after its lease ended) must neither run
        # the job twice nor keep the GPUs reserved and billed. The ledger is asked only when the
        # node's set of held and running leases changes (or it reconnected, or was lost), not on
        # every heartbeat.
        claimed = frozenset(beat.running) | frozenset(beat.held)
        self.placer.drain_heartbeat(str(node_key), claimed)
        # (While the database is down the question waits: a heartbeat is never refused for it.)
        if claimed and self._running_checked.get(node_key) != claimed and self._database_down_since is None:
            async with self.pool.acquire() as conn:
                held = {r["lease"] for r in await ops.active_shares(conn, node_key=str(node_key))}
            for lease in claimed - held:
                with contextlib.suppress(Exception):
                    await self.gateway.send(node_key, Cancel(lease=lease, reason="this node no longer holds the lease"))
            self._running_checked[node_key] = claimed & held

    async def job_status(self, node_key: Pubkey, status: JobStatus) -> None:
        if await self._record_job_event(node_key, status):
            self.placer.drain_job_status(str(node_key), status.lease, status.state)

    async def job_log(self, node_key: Pubkey, line: JobLog) -> None:
        await self._record_job_event(node_key, line)

    async def _record_job_event(self, node_key: Pubkey, message: JobStatus | JobLog) -> bool:
        """One job, one place: what a node says about a share it no longer holds (of an earlier
        assignment epoch) is not recorded; the node is told once per share and epoch."""
        async with self.pool.acquire() as conn:
            if await ops.record_job_event(conn, node_key, message):
                return True
        if (key := (node_key, message.lease, message.epoch)) not in self._stale_told:
            self._stale_told.add(key)
            log.warning("job.stale node=%s lease=%s epoch=%s (not its current share: refused)", node_key,
                        message.lease, message.epoch)
            with contextlib.suppress(Exception):
                await self.gateway.send(node_key, Error(message=f"job messages of lease {message.lease} refused: "
                                                                f"this node no longer holds that share (it moved)"))
        return False

    async def usage(self, node_key: Pubkey, report: UsageReportMessage) -> None:
        async with self.pool.acquire() as conn:
            await ops.record_usage(conn, node_key, report)

    async def checkpoint(self, node_key: Pubkey, checkpoint: Checkpoint) -> None:
        async with self.pool.acquire() as conn:
            recorded = await ops.record_checkpoint(conn, node_key, checkpoint)
        if not recorded:
            log.warning("checkpoint.refused node=%s lease=%s (it holds no share of the running lease)",
                        node_key, checkpoint.lease)
            with contextlib.suppress(Exception):
                await self.gateway.send(node_key, Error(message=f"checkpoint of lease {checkpoint.lease} refused: "
                                                                f"this node holds no share of it (it moved)"))

    async def worker_ack(self, node_key: Pubkey, ack: Ack) -> None:
        if ack.error:
            log.warning("worker.refused node=%s of=%s lease=%s error=%s", node_key, ack.of, ack.lease, ack.error)

    async def disconnected(self, node_key: Pubkey) -> None:
        self.fleet.disconnected(node_key)
        log.info("worker.disconnected node=%s", node_key)

    # --- settlement

    def _observed(self, usage: SignedUsage, tolerance: int = 0) -> int | None:
        """Seconds of the report's period the node may bill by what this process saw. Before this
        process started, and while workers had their grace to reconnect to it, it could not see:
        that time is not held against the node (the chain's own cap applies to it)."""
        start, end = usage.report.period_start, usage.report.period_end
        blind_until = self.started_at + self.settings.reconnect_grace_seconds
        if end <= blind_until:
            return None
        unseen = max(0, int(blind_until) - start)
        # silence the lease's client tolerates (its downtime tolerance) is held time, as it is not a loss
        return unseen + self.fleet.online_seconds(usage.node_key, max(start, int(blind_until)), end, tolerance)

    async def settle_pending(self, node_key: str | None = None) -> None:
        # One pass at a time: the settlement loop, a lease's close and a failover all settle first,
        # and two passes over the same pending reports would send them twice (the second copy
        # refused on chain, and that refusal recorded over the first's success).
        async with self._settling:
            async with self.pool.acquire() as conn:
                batch = await ops.pending_usage(conn, node_key)
                refused = await ops.refused_usage(conn, batch)
                tolerance = {r["lease"]: r["downtime_tolerance_seconds"] for r in await conn.fetch(
                    "SELECT lease, downtime_tolerance_seconds FROM leases WHERE lease = ANY($1::text[])",
                    list({str(u.lease) for u in batch}))} if batch else {}
            if not batch:
                return
            outcomes = await self.settler.settle(batch, lambda u: self._observed(u, tolerance.get(str(u.lease), 0)),
                                                 refused)
            async with self.pool.acquire() as conn:
                await ops.settle_outcomes(conn, outcomes)
        for o in outcomes:
            log.info("usage.%s lease=%s node=%s seq=%d %s", o.status.value, o.usage.lease, o.usage.node_key,
                     o.usage.report.seq, o.reason or o.signature)

    # --- failover

    async def watch_own_stalls(self) -> None:
        """Notices this process's own stalls (its event loop blocked, the process stopped): a short
        sleep that wakes late by more than `stall_after_seconds` means nothing was observed meanwhile."""
        stall = self.fleet.watch(WATCH_EVERY_SECONDS, self.settings.stall_after_seconds)
        if stall:
            log.warning("coordinator.stalled seconds=%.1f (its own pause: nobody's silence includes it; nodes are "
                        "judged again once their waiting messages are read)", stall)

    async def fail_over(self) -> None:
        for node_key in self.fleet.newly_lost():
            self.placer.mark_offline(str(node_key))
            self._running_checked.pop(node_key, None)  # if it comes back, what it runs is checked again
            self._silent.add(node_key)
        if self._silent and self.fleet.judging() and await self._may_judge():
            for node_key in sorted(self._silent, key=str):
                self._silent.discard(node_key)
                if self._region(node_key) in self.paused_regions:
                    self._silent.add(node_key)  # judged once its region's outage is over
                    continue
                if not self.fleet.silent(node_key):  # heard again, or its silence was partly blind time
                    self.fleet.unjudged(node_key)
                    log.info("node.back node=%s (not silent for lost_after once blind time is left out)", node_key)
                    continue
                async with self.pool.acquire() as conn:
                    shares = await ops.active_shares(conn, node_key=str(node_key))
                if shares:
                    await self._node_lost(node_key, shares)
        await self.placer.retry_failovers()

    async def _may_judge(self) -> bool:
        """Whether silent nodes may be treated as lost now: this process sees its database (the
        database watch says) and the chain (else the outage is a blind window, not the nodes'
        fault), and the silence is not correlated (more than `max_lost_fraction` of the fleet silent
        at once points at us or the network, not at the suppliers: slashing pauses until enough of
        the fleet is heard again)."""
        if self._database_down_since is not None:
            return False  # the database watch keeps that outage (and records its blind window)
        problem = await self._chain_outage()
        now = self.fleet.clock()  # the fleet's windows are on its clock
        if problem:
            if self._blind_since is None:
                self._blind_since = now
                log.warning("coordinator.blind %s: nobody is judged until it answers again", problem)
            return False
        if self._blind_since is not None:
            self.fleet.add_blind(self._blind_since, now)
            log.warning("coordinator.sighted after %.1f s blind", now - self._blind_since)
            self._blind_since = None
            return False  # heartbeats of the blind window are read first
        silent, of = self.fleet.silent_share(self.settings.fleet_window_seconds)
        pause = of > 0 and silent / of > self.settings.max_lost_fraction
        if not pause:
            self._overridden.discard(None)
        pause = pause and None not in self._overridden
        if pause != self.slashing_paused:
            self.slashing_paused = pause
            if pause:
                self._paused_since = now
                self.slashing_paused_reason = (f"{silent} of {of} nodes silent at once (more than "
                                               f"{self.settings.max_lost_fraction:.0%}): a correlated outage")
                log.warning("slashing.paused %s; no node is slashed or moved until the fleet is heard again",
                            self.slashing_paused_reason)
            else:
                # Silence during a correlated outage says nothing about a node: it counts for nobody,
                # so the last nodes to reconnect get their full lost_after, like after a stall.
                self.fleet.add_blind(self._paused_since, now)
                log.warning("slashing.resumed %d of %d nodes silent", silent, of)
                self.slashing_paused_reason = ""
                return False
        if not pause:
            self._pause_regions(now)
        return not pause

    def resume_slashing(self, region: int | None = None) -> str:
        """The operator confirms that a paused outage (the fleet's, or `region`'s) is the suppliers':
        slashing resumes at once, the silence counts (no excuse), and that pause is not taken again
        until the silent share falls back under the threshold. Raises LookupError if not paused."""
        if region is None:
            if not self.slashing_paused:
                raise LookupError("slashing is not paused for the fleet")
            self.slashing_paused, self.slashing_paused_reason = False, ""
        else:
            if self.paused_regions.pop(region, None) is None:
                raise LookupError(f"slashing is not paused in region {region_name(region)}")
        self._overridden.add(region)
        where = "the fleet" if region is None else f"region {region_name(region)}"
        log.warning("slashing.resumed_by_operator %s: the silent nodes are judged now, their silence counts", where)
        return where

    def _region(self, node_key: Pubkey) -> int | None:
        view = self.placer.scheduler.nodes.get(str(node_key))
        return None if view is None else view.region

    def _pause_regions(self, now: float) -> None:
        """The correlated-outage rule per region: a region most of whose nodes go silent at once (a
        regional power cut, a partition) pauses slashing there only; its silence during the pause
        then counts for none of its nodes."""
        shares = self.fleet.silent_regions(self.settings.fleet_window_seconds, self._region,
                                           self.settings.region_min_nodes)
        for region, (silent, of) in shares.items():
            if silent / of <= self.settings.max_lost_fraction:
                self._overridden.discard(region)
            elif region not in self.paused_regions and region not in self._overridden:
                self.paused_regions[region] = now
                log.warning("slashing.paused region=%s: %d of its %d nodes silent at once; none of them is "
                            "slashed or moved until the region is heard again", region_name(region), silent, of)
        for region, since in list(self.paused_regions.items()):
            silent, of = shares.get(region, (0, 0))
            if of and silent / of > self.settings.max_lost_fraction:
                continue
            del self.paused_regions[region]
            self.fleet.add_blind(since, now, [k for k in self.fleet.nodes if self._region(k) == region])
            log.warning("slashing.resumed region=%s: %d of %d nodes silent", region_name(region), silent, of)

    async def _chain_outage(self) -> str | None:
        """Why this process cannot see the chain now, if it cannot (then nobody is judged)."""
        try:
            async with asyncio.timeout(3):
                await self.chain.get_slot()
        except Exception as e:  # any transport error: the chain is not reachable from here
            return f"the chain RPC does not answer ({e or type(e).__name__})"
        return None

    async def _node_lost(self, node_key: Pubkey, shares: list[asyncpg.Record]) -> None:
        # A lease's downtime tolerance (its client's choice at open, never below lost_after) delays
        # the loss of that lease's share only: the others are judged now, it on a later pass.
        shares, tolerated = due_shares(shares, self.fleet.silent_for(node_key), self.settings.lost_after_seconds)
        if tolerated:
            self._silent.add(node_key)
        if not shares:
            return
        log.warning("node.lost node=%s leases=%s", node_key, [s["lease"] for s in shares])
        # Pay what the node delivered before it went silent, while it still holds its shares.
        await self.settle_pending(str(node_key))
        # Decided now, not when the silence was first noticed: the node may have been heard meanwhile,
        # and the evidence must show silence for the whole window.
        seen = self.fleet.nodes.get(node_key)
        if not self.fleet.judging():  # this process stalled meanwhile: judge again once it has drained
            self._silent.add(node_key)
            return
        tolerance = max(s["downtime_tolerance_seconds"] or 0 for s in shares)
        if seen is None or not self.fleet.silent(node_key, tolerance):
            self.fleet.unjudged(node_key)
            self._silent.discard(node_key)
            log.info("node.back node=%s (heard again before the slash was sent)", node_key)
            return
        silent = self.fleet.silent_for(node_key)
        async with self.pool.acquire() as conn:
            draining = await conn.fetchval("SELECT draining FROM nodes WHERE node_key = $1", str(node_key))
        if draining:
            # Its supplier announced the maintenance: its shares move, nobody is slashed for it.
            log.warning("node.lost_while_draining node=%s silent=%.1fs: its shares move without a slash", node_key, silent)
            for share in shares:
                self.placer.queue_failover(share["lease"], str(node_key))
            return
        evidence = {"fault": "MissedHeartbeats", "node_key": str(node_key), "leases": [s["lease"] for s in shares],
                    "last_heartbeat": round(seen.last_heartbeat, 3), "silent_seconds": round(silent, 3),
                    "detected_at": round(time.time(), 3), "lost_after_seconds": self.settings.lost_after_seconds,
                    "downtime_tolerance_seconds": tolerance}
        # Slashed once per silence: a share whose lease tolerated longer is moved later without a second slash
        # (the node is jailed since, and the program moves a jailed node's shares).
        jailed = (await fetch(self.chain, node_pda(node_key), "Node")).jailed
        if self.settings.slash_lost_nodes and not jailed:
            async with self.pool.acquire() as conn:
                fault = await ops.record_fault(conn, str(node_key), shares[0]["lease"], "MissedHeartbeats",
                                               evidence, evidence_hash(evidence))
            try:
                sig = await self.attester.slash(node_key, "MissedHeartbeats", evidence,
                                                lease=Pubkey.from_string(shares[0]["lease"]))
                async with self.pool.acquire() as conn:
                    await conn.execute("UPDATE faults SET slash_signature = $2 WHERE id = $1", fault, str(sig) if sig else None)
            except Exception:
                log.exception("node.slash_failed node=%s", node_key)
        for share in shares:
            self.placer.queue_failover(share["lease"], str(node_key))
