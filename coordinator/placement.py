"""Leases onto nodes and jobs onto workers: the coordinator's placement, dispatch, failover
replacement and lease-end loops, around the scheduler (coordinator.scheduler).

The scheduler's view of the fleet is rebuilt from the ledger (registered nodes, their
providers' stake) and the gateway's liveness on every pass; placements already on chain
are restored into it, so it never gives the same GPUs twice, even after a restart.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import asyncpg
from solders.pubkey import Pubkey

from coordinator import operations as ops
from coordinator.gateway import NodeOffline
from coordinator.jobs import TERMINAL, job_over
from coordinator.scheduler import LeaseRequest, NodeView, NotPlaced, PlacedShare, Placement, Scheduler, SchedulerError
from gpunet import instructions as ix
from gpunet.accounts import fetch
from gpunet.client import TransactionFailed
from gpunet.protocol import Cancel, Dispatch, LeaseEnd

if TYPE_CHECKING:
    from coordinator.service import Coordinator

__all__ = ["Placer"]

log = logging.getLogger("gpunet.coordinator.placement")

# A drained node sends its last usage report and checkpoint once its job has stopped (its worker
# gives a job a stop grace); if no heartbeat shows the share released (the worker died meanwhile)
# the share moves after this long anyway.
RELEASE_WAIT_SECONDS = 20.0
# Its reports still pending after the release are given this long to settle before the move.
SETTLE_WAIT_SECONDS = 30.0
# A closing lease's connected nodes not yet paid to its end are waited for this long before it is
# finalized: two of the worker's usage resends (GPUNET_WORKER_USAGE_RESEND_SECONDS, 15 s).
UNPAID_WAIT_SECONDS = 40.0


@dataclass
class _Drain:
    """A share leaving a draining node: its job was cancelled there at `cancelled_at`."""

    cancelled_at: float
    stopped: bool = False  # the job is not running there (it reported its end, or had none going)
    released: bool = False  # then a heartbeat showed the share released: its last report and checkpoint are in


def _request(lease: asyncpg.Record, gpus_per_node: int | None) -> LeaseRequest:
    terms = ix.LeaseTerms(lease["gpu_model"], lease["min_vram_gb"], lease["gpu_count"], lease["region"],
                          int(lease["max_price_per_gpu_hour"]), lease["duration_seconds"])
    return LeaseRequest(lease["lease"], terms, gpus_per_node=gpus_per_node)


class Placer:
    def __init__(self, coordinator: Coordinator) -> None:
        self.c = coordinator
        self.scheduler = Scheduler(accept_simulated=coordinator.settings.accept_simulated)
        self.dispatched: dict[str, set[str]] = {}  # lease -> node keys given its current job by this process
        self.dispatched_job: dict[str, int] = {}  # lease -> the job number `dispatched` is about
        self.ends_sent: dict[tuple[str, str], int] = {}  # (lease, node key) -> the lease end it was last told
        self.failovers: dict[str, set[str]] = {}  # lease -> lost node keys still to replace
        self.ending: dict[str, float] = {}  # lease -> when its workers were told to stop
        self.drains: dict[tuple[str, str], _Drain] = {}  # (lease, draining node key) -> its share's move
        self._drain_reasons: dict[str, str] = {}  # lease -> the drain reason last shown (written once)

    # --- the fleet

    async def _sync(self, conn: asyncpg.Connection) -> None:
        # Reliability history comes from the ledger, so a restart does not forget it: faults
        # recorded against the node, and ended leases it held to the end.
        rows = await conn.fetch(
            """SELECT n.*, p.authority, p.staked, p.bonded,
                      (SELECT count(*) FROM faults f WHERE f.node_key = n.node_key) AS failed,
                      (SELECT count(*) FROM placements pl WHERE pl.state = 'ended' AND n.node_key = ANY(pl.nodes))
                        AS completed
               FROM nodes n JOIN providers p USING (provider) WHERE n.registered""")
        fleet = self.c.fleet
        for r in rows:
            key = Pubkey.from_string(r["node_key"])
            seen = fleet.nodes.get(key)
            view = NodeView(node=r["node"], node_key=r["node_key"], provider_authority=r["authority"],
                            gpu_model=r["gpu_model"], gpu_count=r["gpu_count"], vram_gb=r["vram_gb"],
                            region=r["region"], price_per_gpu_hour=int(r["price_per_gpu_hour"]),
                            gpus_leased=0,  # the scheduler counts reservations itself (restored below)
                            bonded_stake=int(r["bonded_stake"]), provider_staked=int(r["staked"]),
                            provider_bonded=int(r["bonded"]), jailed=r["jailed"], draining=r["draining"],
                            online=fleet.online(key),
                            healthy=fleet.healthy(key), simulated=bool(seen and seen.simulated),
                            latency_ms=self._latency_ms(key), completed_shares=r["completed"],
                            failed_shares=r["failed"])
            self.scheduler.upsert_node(view)
        registered = {r["node_key"] for r in rows}
        for gone in [k for k in self.scheduler.nodes if k not in registered]:  # deregistered meanwhile
            with contextlib.suppress(SchedulerError):
                self.scheduler.remove_node(gone)
        # Leases assigned on chain that the scheduler does not hold (placed before a restart).
        held = self.scheduler.reservations
        for lease, shares in self._group(await ops.active_shares(conn)).items():
            if lease in held or lease in self.failovers:
                continue
            try:
                views = [self.scheduler.nodes[s["node_key"]] for s in shares]
                self.scheduler.restore(Placement(_request(shares[0], None), tuple(
                    PlacedShare.of(v, s["gpus"]) for v, s in zip(views, shares, strict=True))))
            except (KeyError, SchedulerError) as e:
                log.warning("placement.restore_failed lease=%s %s", lease, e)

    def _latency_ms(self, key: Pubkey) -> float | None:
        """The worker session's round trip, measured by the WebSocket keepalive pings (None: not yet)."""
        ws = self.c.gateway.sessions.get(key)
        return ws.latency * 1000 if ws is not None and ws.latency > 0 else None

    @staticmethod
    def _group(shares: list[asyncpg.Record]) -> dict[str, list[asyncpg.Record]]:
        out: dict[str, list[asyncpg.Record]] = {}
        for s in shares:
            out.setdefault(s["lease"], []).append(s)
        return out

    def mark_offline(self, node_key: str) -> None:
        if node_key in self.scheduler.nodes:
            self.scheduler.update_node(node_key, online=False)

    # --- placement

    async def place_open_leases(self) -> None:
        async with self.c.pool.acquire() as conn:
            await self._sync(conn)
            waiting = await conn.fetch(
                """SELECT l.*, j.gpus_per_node, j.lease IS NOT NULL AS has_job FROM leases l
                   LEFT JOIN jobs j USING (lease) LEFT JOIN placements p USING (lease)
                   WHERE l.status = 'open' AND coalesce(p.state, 'waiting') = 'waiting'""")
            for lease in waiting:
                if not lease["has_job"]:
                    await ops.set_placement(conn, lease["lease"], "waiting", "waiting for the client's job "
                                            "(gpunet lease job LEASE ...)")
                    continue
                await self._place(conn, lease)

    async def _place(self, conn: asyncpg.Connection, lease: asyncpg.Record) -> None:
        try:
            request = _request(lease, lease["gpus_per_node"])
        except SchedulerError as e:
            await ops.set_placement(conn, lease["lease"], "failed", str(e))
            return
        decision = self.scheduler.place(request)
        if isinstance(decision, NotPlaced):
            await ops.set_placement(conn, lease["lease"], "waiting", decision.reason)
            return
        self.scheduler.reserve(decision)
        await ops.set_placement(conn, lease["lease"], "assigning", "", list(decision.node_keys))
        try:
            sig = await self.c.attester.assign(Pubkey.from_string(lease["lease"]), decision.sdk_shares())
        except TransactionFailed as e:
            self.scheduler.release(lease["lease"])
            await ops.set_placement(conn, lease["lease"], "waiting", f"the chain refused the placement: {e}")
            return
        except BaseException:
            self.scheduler.release(lease["lease"])
            await ops.set_placement(conn, lease["lease"], "waiting", "assign_lease did not complete; retrying")
            raise
        await ops.set_placement(conn, lease["lease"], "placed", "", list(decision.node_keys), str(sig) if sig else None)
        log.info("lease.placed lease=%s nodes=%s", lease["lease"], ",".join(decision.node_keys))

    # --- jobs

    async def dispatch_jobs(self) -> None:
        """Gives every node of a lease its share and the lease's current job (again after a worker
        reconnects: it acknowledges a job it has), and tells it when the lease's end moves."""
        async with self.c.pool.acquire() as conn:
            leases = self._group(await ops.active_shares(conn))
            for lease in self.dispatched_job.keys() - leases.keys():  # ended, closed: forget what was sent
                del self.dispatched_job[lease]
            for key in [k for k in self.ends_sent if k[0] not in leases]:
                del self.ends_sent[key]
            for lease, shares in leases.items():
                if lease in self.ending:
                    continue
                job = await ops.current_job(conn, lease)
                if job is None:
                    continue
                if self.dispatched_job.get(lease) != job.number:  # the lease's next job: every node gets it
                    self.dispatched[lease] = set()
                    self.dispatched_job[lease] = job.number
                given = self.dispatched.setdefault(lease, set())
                ends_at = shares[0]["started_at"] + shares[0]["duration_seconds"]
                await self._tell_lease_end(lease, given, ends_at)
                # a share leaving a draining node is not given its job again (it was cancelled there)
                # (nor a node the scheduler already moved the share away from, before the indexer shows it)
                reserved = self.scheduler.reservations.get(lease)
                todo = [s for s in shares if s["node_key"] not in given and (lease, s["node_key"]) not in self.drains
                        and (reserved is None or s["node_key"] in reserved.node_keys)]
                if not todo:
                    continue
                keys = [Pubkey.from_string(s["node_key"]) for s in shares]
                if not all(self.c.gateway.online(k) for k in keys):
                    continue  # a cluster job needs every peer's address; a single one its node
                peers = [f"{self._host(k)}:{self.c.settings.cluster_port}" for k in keys] if len(shares) > 1 else []
                restore = await ops.checkpoint_of(conn, lease)
                states = await ops.job_states(conn, lease, job.number)
                over = job_over(states, [s["node_key"] for s in shares])
                for s in todo:
                    # a node that ran the job to its end (before its agent restarted) holds the
                    # share without running it again; so does one that takes a share over after the end
                    ended = over or states.get(s["node_key"]) in TERMINAL
                    message = Dispatch(lease=lease, gpus=s["gpus"], job=job.spec, job_number=job.number, job_ended=ended,
                                       ends_at=ends_at, rank=s["rank"], world_size=len(shares), peers=peers,
                                       restore=restore, epoch=s["assigned_by"])
                    try:
                        await self.c.gateway.send(Pubkey.from_string(s["node_key"]), message)
                    except NodeOffline:
                        continue
                    given.add(s["node_key"])
                    self.ends_sent[(lease, s["node_key"])] = ends_at
                    log.info("job.dispatched lease=%s job=%d%s node=%s rank=%d/%d restore=%d files", lease, job.number,
                             " (ended)" if ended else "", s["node_key"], s["rank"], len(shares), len(restore))

    async def _tell_lease_end(self, lease: str, nodes: set[str], ends_at: int) -> None:
        """A top-up moved the lease's end: the nodes holding its share bill until the new one."""
        for node_key in nodes:
            if self.ends_sent.get((lease, node_key), ends_at) == ends_at:
                continue
            try:
                await self.c.gateway.send(Pubkey.from_string(node_key), LeaseEnd(lease=lease, ends_at=ends_at))
            except NodeOffline:
                continue  # its next dispatch, after it reconnects, carries the end
            self.ends_sent[(lease, node_key)] = ends_at
            log.info("lease.end_moved lease=%s node=%s ends_at=%d", lease, node_key, ends_at)

    def _host(self, node_key: Pubkey) -> str:
        ws = self.c.gateway.sessions.get(node_key)
        host = ws.remote_address[0] if ws is not None and ws.remote_address else "127.0.0.1"
        return f"[{host}]" if ":" in host else host

    def redispatch(self, node_key: str) -> None:
        """A worker reconnected: give it its leases' jobs again (it ignores one it still runs)."""
        for nodes in self.dispatched.values():
            nodes.discard(node_key)

    # --- failover

    def queue_failover(self, lease: str, lost_node_key: str) -> None:
        self.failovers.setdefault(lease, set()).add(lost_node_key)

    async def retry_failovers(self) -> None:
        if not self.failovers:
            return
        async with self.c.pool.acquire() as conn:
            await self._sync(conn)
            for lease, lost in list(self.failovers.items()):
                for node_key in sorted(lost):
                    if await self._replace(conn, lease, node_key):
                        lost.discard(node_key)
                if not lost:
                    del self.failovers[lease]

    async def _replace(self, conn: asyncpg.Connection, lease: str, lost_key: str) -> bool:
        """Moves the lost node's share; True when done (or no longer needed)."""
        if lease not in self.scheduler.reservations:
            return True  # the lease ended meanwhile
        before = self.scheduler.reservation(lease)
        if lost_key not in before.node_keys:
            return True
        moved = await self._move_share(lease, lost_key)
        if isinstance(moved, str):
            await ops.set_placement(conn, lease, "placed", f"node {lost_key} lost; {moved}")
            return False
        decision, target = moved
        await ops.set_placement(conn, lease, "placed", f"node {lost_key} lost; share moved to {target.node_key}",
                                list(decision.node_keys))
        self.dispatched.get(lease, set()).discard(lost_key)
        log.warning("lease.failover lease=%s from=%s to=%s", lease, lost_key, target.node_key)
        return True

    async def _move_share(self, lease: str, from_key: str) -> tuple[Placement, PlacedShare] | str:
        """Moves `from_key`'s share of the lease to the best other qualifying node, in the scheduler and
        on chain (`reassign_lease`); the new placement and the share's new node, or why not (the
        scheduler's reservation is left as it was)."""
        before = self.scheduler.reservation(lease)
        decision = self.scheduler.replace(lease, from_key)
        if isinstance(decision, NotPlaced):
            return f"no replacement yet: {decision.reason}"
        target = next(s for s in decision.shares if s.node_key not in before.node_keys)
        try:
            await self.c.attester.reassign(Pubkey.from_string(lease), Pubkey.from_string(from_key), target.to_sdk())
        except Exception as e:
            self.scheduler.release(lease)
            self.scheduler.restore(before)
            return f"reassign failed ({e}); retrying"
        return decision, target

    # --- announced maintenance: draining nodes

    def drain_job_status(self, node_key: str, lease: str, state: str) -> None:
        """The job of a share leaving the node reported its end there (after the cancel)."""
        if state in TERMINAL and (move := self.drains.get((lease, node_key))) is not None:
            move.stopped = True

    def drain_heartbeat(self, node_key: str, claimed: frozenset[str]) -> None:
        """A heartbeat after the job stopped no longer claims the share leaving the node: its last
        usage report and checkpoint, sent before this heartbeat, are recorded (the gateway handles
        a session's messages in order, and the worker sends both as its job ends)."""
        for (lease, key), move in self.drains.items():
            if key == node_key and move.stopped and lease not in claimed:
                move.released = True

    async def move_drained(self) -> None:
        """Moves the shares of draining nodes (their suppliers' announced maintenance) to spare nodes,
        gracefully and without any slash or fault: the job is cancelled on the draining node, which
        reports its last usage; everything it delivered is settled; then the share is reassigned on
        chain and the job resumes on the new node from the lease's latest checkpoint. Without a spare
        node the share stays where it is and the lease goes on (the placement's reason says so)."""
        async with self.c.pool.acquire() as conn:
            rows = await conn.fetch(
                """SELECT a.lease, a.node_key FROM assignments a JOIN nodes n USING (node) JOIN leases l USING (lease)
                   WHERE a.active AND n.draining AND l.status = 'active'""")
            wanted = {(r["lease"], r["node_key"]) for r in rows}
            for key in [k for k in self.drains if k not in wanted]:  # moved, or the lease ended
                del self.drains[key]
            if not wanted:
                return
            await self._sync(conn)
            for lease, node_key in sorted(wanted):
                if lease in self.ending or node_key in self.failovers.get(lease, ()):
                    continue  # ending anyway, or lost: the failover moves it (without a slash, see service)
                await self._move_drained(conn, lease, node_key)

    async def _drain_reason(self, conn: asyncpg.Connection, lease: str, reason: str, nodes: list[str] | None = None) -> None:
        if self._drain_reasons.get(lease) != reason or nodes is not None:
            self._drain_reasons[lease] = reason
            await ops.set_placement(conn, lease, "placed", reason, nodes)

    async def _move_drained(self, conn: asyncpg.Connection, lease: str, node_key: str) -> None:
        key = (lease, node_key)
        now = time.time()
        move = self.drains.get(key)
        if lease not in self.scheduler.reservations or node_key not in self.scheduler.reservation(lease).node_keys:
            return
        if move is None:
            if not self.c.gateway.online(Pubkey.from_string(node_key)):
                return  # silent: nothing to cancel there; if it stays silent the loss rule moves it
            # A spare must exist before the job is stopped here; it is chosen again at the move.
            spare = self.scheduler.spare(lease, node_key)
            if isinstance(spare, NotPlaced):
                await self._drain_reason(conn, lease, f"node {node_key} is draining; its share stays there (the lease "
                                                      f"goes on) until a spare node qualifies: {spare.reason}")
                return
            move = self.drains[key] = _Drain(cancelled_at=now)  # before the send: the job's end may come at once
            try:
                await self.c.gateway.send(Pubkey.from_string(node_key), Cancel(
                    lease=lease, reason="the node is draining (its supplier's maintenance): the share moves to another node"))
            except NodeOffline:
                del self.drains[key]
                return
            job = await ops.current_job(conn, lease)
            state = (await ops.job_states(conn, lease, job.number)).get(node_key) if job is not None else None
            if state not in ("starting", "running", "restarting"):
                move.stopped = True  # no job going there: nothing to wait for but the release
            await self._drain_reason(conn, lease, f"node {node_key} is draining; its share is moving")
            log.info("drain.cancelled lease=%s node=%s", lease, node_key)
            return
        if not move.released and now - move.cancelled_at < RELEASE_WAIT_SECONDS:
            return
        # Everything the node delivered is paid while it still holds the share (after the move its
        # reports could not be settled any more).
        await self.c.settle_pending(node_key)
        pending = await conn.fetchval("SELECT count(*) FROM usage_reports WHERE status = 'pending' AND lease = $1 "
                                      "AND node_key = $2", lease, node_key)
        if pending and now - move.cancelled_at < SETTLE_WAIT_SECONDS:
            return
        moved = await self._move_share(lease, node_key)
        if isinstance(moved, str):
            # (No spare any more — rare: there was one a moment ago — or the transaction failed: the
            # job, stopped on the draining node, waits; nobody is slashed and nothing is billed meanwhile.)
            await self._drain_reason(conn, lease, f"node {node_key} is draining; its job stopped there: {moved}")
            return
        decision, target = moved
        del self.drains[key]  # the scheduler's reservation no longer has the node: it is not dispatched again
        await self._drain_reason(conn, lease, f"node {node_key} drained (its supplier's maintenance, no slash); "
                                              f"share moved to {target.node_key}", list(decision.node_keys))
        log.warning("lease.drained lease=%s from=%s to=%s", lease, node_key, target.node_key)

    # --- the end of a lease

    async def end_leases(self) -> None:
        now = time.time()
        async with self.c.pool.acquire() as conn:
            due = await conn.fetch("SELECT lease, started_at + duration_seconds AS ends_at FROM leases "
                                   "WHERE status = 'active' AND started_at + duration_seconds <= $1", int(now))
            for row in due:
                lease = row["lease"]
                if lease not in self.ending:
                    self.ending[lease] = now
                    await self._stop_workers(conn, lease, "the lease reached its end", row["ends_at"])
                elif now - self.ending[lease] >= self.c.settings.close_grace_seconds:
                    await self._close(conn, lease)
            # Closed for use (by us at its end, or by its client): the nodes' last usage is settled,
            # then the lease is finalized (the rest of its escrow refunded).
            for row in await conn.fetch("SELECT lease FROM leases WHERE status = 'closing'"):
                lease = row["lease"]
                if lease not in self.ending:
                    self.ending[lease] = now
                    billed_until = (await fetch(self.c.chain, Pubkey.from_string(lease), "Lease")).billable_until
                    await self._stop_workers(conn, lease, "the lease was closed", billed_until)
                elif now - self.ending[lease] >= self.c.settings.close_grace_seconds:
                    await self._finalize(conn, lease)
            closed = await conn.fetch("SELECT l.lease FROM leases l JOIN placements p USING (lease) "
                                      "WHERE l.status = 'closed' AND p.state <> 'ended'")
            for row in closed:
                await self._stop_workers(conn, row["lease"], "the lease was closed")
                self._forget(row["lease"])
                await ops.set_placement(conn, row["lease"], "ended", "the lease is closed")

    async def _stop_workers(self, conn: asyncpg.Connection, lease: str, reason: str,
                            billing_ended_at: int | None = None) -> None:
        keys = self.scheduler.reservations[lease].node_keys if lease in self.scheduler.reservations else ()
        for key in keys:
            try:
                await self.c.gateway.send(Pubkey.from_string(key), Cancel(lease=lease, reason=reason,
                                                                          ends_at=billing_ended_at))
            except NodeOffline:
                pass

    async def _close(self, conn: asyncpg.Connection, lease: str) -> None:
        await self.c.settle_pending()  # the workers' last periods first
        try:
            await self.c.attester.close(Pubkey.from_string(lease))
        except TransactionFailed as e:
            log.warning("lease.close_refused lease=%s %s", lease, e)
            return
        log.info("lease.closed lease=%s", lease)

    async def _finalize(self, conn: asyncpg.Connection, lease: str) -> None:
        """Finalizes a closing lease once no usage report of it is pending and every share whose node
        is connected is paid up to the end of billing: a worker sends again the reports this process
        could not record (its database was down, say) only every so often, and finalizing before they
        come would leave that usage unpayable. A connected node is waited for `UNPAID_WAIT_SECONDS`
        at most (a report of it refused for good must not hold the client's refund until the chain's
        settlement deadline); a node that is not connected, not at all."""
        await self.c.settle_pending()
        account = await fetch(self.c.chain, Pubkey.from_string(lease), "Lease")
        if type(account.status).__name__ != "Closing":
            return  # finalized meanwhile (by anyone); the indexer will show it
        waited = time.time() - self.ending.get(lease, 0.0)
        unpaid = [a for a in account.assignments[: account.node_count]
                  if a.settled_until < account.billable_until and self.c.gateway.online(a.node_key)]
        unpaid = unpaid if waited < UNPAID_WAIT_SECONDS else []
        if (unpaid or await ops.pending_usage_count(conn, lease)) and time.time() <= account.settle_deadline:
            return
        try:
            await self.c.attester.finalize(Pubkey.from_string(lease))
        except TransactionFailed as e:
            log.warning("lease.finalize_refused lease=%s %s", lease, e)
            return
        log.info("lease.finalized lease=%s", lease)

    def _forget(self, lease: str) -> None:
        if lease in self.scheduler.reservations:
            self.scheduler.release(lease)
        self.dispatched.pop(lease, None)
        self.failovers.pop(lease, None)
        self.ending.pop(lease, None)

    def quote(self, request: LeaseRequest) -> Placement | NotPlaced:
        """What placing `request` now would give (changes nothing)."""
        return self.scheduler.place(request)


def describe(placement: Placement | NotPlaced) -> dict[str, Any]:
    if isinstance(placement, NotPlaced):
        return {"placeable": False, "reason": placement.reason}
    return {"placeable": True, "shares": [{"node_key": s.node_key, "gpus": s.gpus, "price_per_gpu_hour": s.price_per_gpu_hour,
                                           "simulated": s.simulated} for s in placement.shares],
            "burn_per_hour": sum(s.gpus * s.price_per_gpu_hour for s in placement.shares)}
