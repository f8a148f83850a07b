"""Whether silent nodes may be judged now: the coordinator's own outages (its stalls, its database,
its chain RPC) are blind windows that count for no node, and a correlated outage (too much of the
fleet, or of one region, silent at once) pauses slashing instead of punishing everyone. The
failover loop asks `may_judge` before it treats a silent node as lost; the operator can end a
pause (`resume_slashing`); /metrics and /workers show the state.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import asyncpg
from solana.rpc.async_api import AsyncClient

from coordinator.db import ping
from coordinator.fleet import Fleet
from coordinator.keys import NodeKey
from coordinator.metrics import Metrics
from coordinator.settings import Settings
from gpunet.catalog import region_name
from gpunet.logs import get_logger

__all__ = ["WATCH_EVERY_SECONDS", "DatabaseLost", "Outages"]

log = get_logger("gpunet.coordinator")

WATCH_EVERY_SECONDS = 0.2


class DatabaseLost(Exception):
    """The database stayed unreachable longer than the coordinator waits for it: it stops, so a
    supervisor restarts it (with the embedded PostgreSQL, a restart starts the server again)."""


class Outages:
    def __init__(
        self,
        settings: Settings,
        pool: asyncpg.Pool,
        chain: AsyncClient,
        fleet: Fleet,
        region_of: Callable[[NodeKey], int | None],
        fatal: asyncio.Future[None],
        metrics: Metrics | None = None,
    ) -> None:
        self.settings, self.pool, self.chain, self.fleet, self.region_of = settings, pool, chain, fleet, region_of
        self.metrics = metrics or Metrics()
        self.fatal = fatal  # set with DatabaseLost when the coordinator must stop
        self.slashing_paused = False
        self.slashing_paused_reason = ""
        self.paused_regions: dict[int, float] = {}  # region -> since when its slashing is paused
        # Pauses the operator ended (the outage is the suppliers'): not paused again until the silent
        # share falls back under the threshold (the fleet's, None, or a region's).
        self._overridden: set[int | None] = set()
        self._paused_since = 0.0
        self._regions_resumed: dict[int, float] = {}  # region -> when its last pause ended
        self._blind_since: float | None = None  # since when this process cannot see the chain
        self._database_down_since: float | None = None

    @property
    def database_up(self) -> bool:
        """As the database watch last found it (every second)."""
        return self._database_down_since is None

    async def watch_database(self) -> None:
        """A database outage is a state: decisions wait (nobody is judged, see `may_judge`) and the
        outage is a blind window once it ends. One longer than `database_outage_exit_seconds` stops
        the coordinator with DatabaseLost."""
        now = time.time()
        try:
            async with asyncio.timeout(3):
                await ping(self.pool)
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError) as e:
            self.metrics.database_errors.inc()
            if self._database_down_since is None:
                self._database_down_since = now
                log.error(  # decisions wait for it; the coordinator stops after exit_after_seconds
                    "database.unreachable",
                    error=str(e) or type(e).__name__,
                    exit_after_seconds=self.settings.database_outage_exit_seconds,
                )
            elif now - self._database_down_since > self.settings.database_outage_exit_seconds and not self.fatal.done():
                self.fatal.set_exception(
                    DatabaseLost(
                        f"the database has not answered for {now - self._database_down_since:.0f} s "
                        f"(GPUNET_DATABASE_OUTAGE_EXIT_SECONDS={self.settings.database_outage_exit_seconds:g}); "
                        "check it (or the embedded server's log in GPUNET_STATE_DIR) and start the coordinator again"
                    )
                )
            return
        if self._database_down_since is not None:
            self.fleet.add_blind(self._database_down_since, now)
            log.warning("database.back", down_seconds=round(now - self._database_down_since, 1))
            self._database_down_since = None

    async def watch_own_stalls(self) -> None:
        """Notices this process's own stalls (its event loop blocked, the process stopped): a short
        sleep that wakes late by more than `stall_after_seconds` means nothing was observed meanwhile."""
        stall = self.fleet.watch(WATCH_EVERY_SECONDS, self.settings.stall_after_seconds)
        if stall:
            self.metrics.stalls.inc()
            # its own pause: nobody's silence includes it; nodes are judged again once their waiting messages are read
            log.warning("coordinator.stalled", seconds=round(stall, 1))

    async def may_judge(self) -> bool:
        """Whether silent nodes may be treated as lost now: this process sees its database (the
        database watch says) and the chain (else the outage is a blind window, not the nodes'
        fault), and no correlated outage of the fleet pauses slashing (`watch_correlation`)."""
        if self._database_down_since is not None:
            return False  # the database watch keeps that outage (and records its blind window)
        problem = await self._chain_outage()
        now = self.fleet.clock()  # the fleet's windows are on its clock
        if problem:
            if self._blind_since is None:
                self._blind_since = now
                log.warning("coordinator.blind", reason=problem)  # nobody is judged until it answers again
            return False
        if self._blind_since is not None:
            self.fleet.add_blind(self._blind_since, now)
            log.warning("coordinator.sighted", blind_seconds=round(now - self._blind_since, 1))
            self._blind_since = None
            return False  # heartbeats of the blind window are read first
        return not self.slashing_paused

    def watch_correlation(self) -> None:
        """Every failover pass, before silent nodes are reported (not only once one is past
        `lost_after`): a correlated outage (more than `max_lost_fraction` of the fleet going silent
        at once points at us or the network, not at the suppliers) pauses slashing until enough of
        the fleet is heard again, and the same per region. A pause is dated from the first silence
        it covers (`Fleet.silence_began`); when it ends, its window counts for nobody's silence,
        the nodes online in it count as online through it (their held time in it is paid as their
        receipts say), and nobody is judged for `drain_seconds`: the last nodes to reconnect get
        their full `lost_after` from the pause's end."""
        if not self.fleet.judging():
            return  # a stall not recorded yet, or a blind window's heartbeats draining: not silence
        now = self.fleet.clock()
        window = self.settings.fleet_window_seconds
        silent, of = self.fleet.silent_share(window)
        pause = of > 0 and silent / of > self.settings.max_lost_fraction
        if not pause:
            self._overridden.discard(None)
        pause = pause and None not in self._overridden
        if pause != self.slashing_paused:
            self.slashing_paused = pause
            if pause:
                self._paused_since = self.fleet.silence_began(window)
                self.slashing_paused_reason = (
                    f"{silent} of {of} nodes silent at once (more than "
                    f"{self.settings.max_lost_fraction:.0%}): a correlated outage"
                )
                # no node is slashed or moved until the fleet is heard again
                log.warning(
                    "slashing.paused",
                    reason=self.slashing_paused_reason,
                    silent=silent,
                    nodes=of,
                    since=round(self._paused_since, 3),
                )
            else:
                self.fleet.add_blind(self._paused_since, now)  # a blind window: judging waits for its drain
                log.warning("slashing.resumed", silent=silent, nodes=of)
                self.slashing_paused_reason = ""
        if not pause:
            self._pause_regions(now)

    def paused_for(self, node_key: NodeKey) -> bool:
        """Whether a correlated outage's pause (the fleet's, or the node's region's) covers the node
        now: its window is recorded only when the pause ends, so until then what the node was online
        for in it is not known (settlement waits)."""
        return self.slashing_paused or self.region_paused(node_key)

    def region_paused(self, node_key: NodeKey) -> bool:
        """Its region's outage pauses its judgement, or ended less than `drain_seconds` ago (the
        heartbeats that waited in the sockets are read first, as after a fleet-wide pause)."""
        region = self.region_of(node_key)
        if region in self.paused_regions:
            return True
        resumed = self._regions_resumed.get(region) if region is not None else None
        return resumed is not None and self.fleet.clock() - resumed < self.fleet.drain_seconds

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
        log.warning("slashing.resumed_by_operator", where=where)  # the silent nodes are judged now
        return where

    def _pause_regions(self, now: float) -> None:
        """The correlated-outage rule per region: a region most of whose nodes go silent at once (a
        regional power cut, a partition) pauses slashing there only; its silence during the pause
        then counts for none of its nodes."""
        shares = self.fleet.silent_regions(
            self.settings.fleet_window_seconds, self.region_of, self.settings.region_min_nodes
        )
        for region, (silent, of) in shares.items():
            if silent / of <= self.settings.max_lost_fraction:
                self._overridden.discard(region)
            elif region not in self.paused_regions and region not in self._overridden:
                members = [k for k in self.fleet.nodes if self.region_of(k) == region]
                since = self.fleet.silence_began(self.settings.fleet_window_seconds, members)
                self.paused_regions[region] = since  # from its first silence, as for the fleet
                # none of them is slashed or moved until the region is heard again
                log.warning(
                    "slashing.paused", region=region_name(region), silent=silent, nodes=of, since=round(since, 3)
                )
        for region, since in list(self.paused_regions.items()):
            silent, of = shares.get(region, (0, 0))
            if of and silent / of > self.settings.max_lost_fraction:
                continue
            del self.paused_regions[region]
            self.fleet.add_blind(since, now, [k for k in self.fleet.nodes if self.region_of(k) == region])
            self._regions_resumed[region] = now  # its nodes wait for the drain, as after a fleet-wide pause
            log.warning("slashing.resumed", region=region_name(region), silent=silent, nodes=of)

    async def _chain_outage(self) -> str | None:
        """Why this process cannot see the chain now, if it cannot (then nobody is judged)."""
        try:
            async with asyncio.timeout(3):
                await self.chain.get_slot()
        except Exception as e:  # any transport error: the chain is not reachable from here
            self.metrics.rpc_errors.inc()
            return f"the chain RPC does not answer ({e or type(e).__name__})"
        return None
