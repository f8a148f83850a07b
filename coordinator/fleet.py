"""What the coordinator has seen of each node: when it was online (from its heartbeats), whether
it reports healthy GPUs, and when it counts as lost.

Online time is the evidence usage receipts are checked against: a node counts as online from a
heartbeat until `lost_after_seconds` after it, the same rule that declares it lost. A shorter
gap (a network blip, a reconnect) is not held against it; a longer one is offline time that
no report may bill. A refused report blocks its share's later reports (the chain wants every
seq in order), so this check must never refuse a node the coordinator did not consider lost.

A lease's downtime tolerance (its client's choice at open) lengthens `lost_after` for that lease's
share only (`silent(node, tolerance)`, `due_shares`, `online_seconds(..., tolerance)`), never shortens it.

Liveness is judged from the node's side: time the coordinator could not observe (its own stall,
a database or RPC outage: "blind" windows) is never counted as a node's silence, and a node
online when such a window began counts as online through it. After a blind window the fleet is
not judged for `drain_seconds`, so heartbeats that waited in the sockets are read first.
A correlated outage of one region is excused the same way, for that region's nodes only.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from solders.pubkey import Pubkey

__all__ = ["Fleet", "NodeSeen", "due_shares"]

KEEP_SECONDS = 24 * 3600  # online history kept per node (longer than any usage period)


@dataclass
class NodeSeen:
    simulated: bool
    healthy: bool = True
    connected: bool = True
    last_heartbeat: float = 0.0
    lost_reported: bool = False
    intervals: list[list[float]] = field(default_factory=list)  # merged [start, end] online spans
    # windows in which this node's silence counts for nobody (its region's correlated outage)
    excused: list[tuple[float, float]] = field(default_factory=list)


class Fleet:
    def __init__(
        self, *, lost_after_seconds: float = 10.0, clock: Callable[[], float] = time.time, drain_seconds: float = 1.0
    ) -> None:
        self.reach = self.lost_after = lost_after_seconds
        self.clock = clock
        self.drain_seconds = drain_seconds
        self.nodes: dict[Pubkey, NodeSeen] = {}
        self.blind: list[tuple[float, float]] = []  # windows the coordinator could not observe
        self._last_watch: float | None = None
        self._watch_late_after = 0.0  # a watch older than this: a stall not noticed yet

    # --- the coordinator's own blindness

    def watch(self, every_seconds: float, stall_after_seconds: float) -> float:
        """Called by a loop that runs every `every_seconds`: a gap longer than that by more than
        `stall_after_seconds` was a stall of this process (it saw nothing); it becomes a blind
        window. Returns the stall's length (0 when none)."""
        now = self.clock()
        last, self._last_watch = self._last_watch, now
        self._watch_late_after = every_seconds + stall_after_seconds
        if last is None or now - last - every_seconds <= stall_after_seconds:
            return 0.0
        self.add_blind(last, now)
        return now - last

    def add_blind(self, start: float, end: float, nodes: Collection[Pubkey] | None = None) -> None:
        """The coordinator could not observe the fleet (or could not judge `nodes`: their region's
        correlated outage) from `start` to `end`: those online at `start` count as online through
        it, and nobody's silence includes it."""
        keys = self.nodes.keys() if nodes is None else [k for k in nodes if k in self.nodes]
        for key in keys:
            seen = self.nodes[key]
            # online at `start`, or (a correlated outage, observed while it lasts) from a moment of
            # the window on: some span reaches into it (its heartbeats may already have been read,
            # in a new span after the window, before a stall was noticed)
            first = min((a for a, b in seen.intervals if a <= end and b + self.reach >= start), default=None)
            if first is not None:
                seen.intervals = _merged([*seen.intervals, [max(start, first), end]], self.reach)
            if nodes is not None:
                seen.excused = [w for w in seen.excused if w[1] >= end - KEEP_SECONDS] + [(start, end)]
        if nodes is None:
            self.blind.append((start, end))
            while self.blind and self.blind[0][1] < end - KEEP_SECONDS:
                self.blind.pop(0)

    def judging(self) -> bool:
        """Whether nodes may be judged lost now: not while heartbeats from a blind window drain, nor
        while the watch is late (a stall that has just ended and is not recorded yet)."""
        now = self.clock()
        if self._last_watch is not None and now - self._last_watch > self._watch_late_after:
            return False
        return not self.blind or now - self.blind[-1][1] >= self.drain_seconds

    def unjudged(self, node_key: Pubkey) -> None:
        """A node found silent was not judged after all: it is reported again if it stays silent."""
        if (seen := self.nodes.get(node_key)) is not None:
            seen.lost_reported = False

    def silent_for(self, node_key: Pubkey) -> float:
        """Seconds since the node's last heartbeat that the coordinator could observe."""
        seen = self.nodes.get(node_key)
        return 0.0 if seen is None else self.clock() - seen.last_heartbeat - self._unseen_since(seen)

    def connected(self, node_key: Pubkey, simulated: bool) -> None:
        seen = self.nodes.setdefault(node_key, NodeSeen(simulated))
        seen.simulated, seen.connected, seen.lost_reported = simulated, True, False
        self.heartbeat(node_key, seen.healthy)

    def expect(self, node_key: Pubkey, grace_seconds: float) -> None:
        """A node that holds work but has not connected yet (a coordinator restart): it is lost
        unless it connects within `grace_seconds`."""
        if node_key not in self.nodes:
            self.nodes[node_key] = NodeSeen(
                simulated=False, connected=False, last_heartbeat=self.clock() + grace_seconds - self.lost_after
            )

    def disconnected(self, node_key: Pubkey) -> None:
        if node_key in self.nodes:
            self.nodes[node_key].connected = False

    def heartbeat(self, node_key: Pubkey, healthy: bool) -> None:
        now = self.clock()
        seen = self.nodes.get(node_key)
        if seen is None:
            return  # heartbeats arrive only inside a session, after `connected`
        seen.healthy, seen.last_heartbeat, seen.lost_reported = healthy, now, False
        if seen.intervals and now <= seen.intervals[-1][1] + self.reach:
            seen.intervals[-1][1] = now
        else:
            seen.intervals.append([now, now])
        while seen.intervals and seen.intervals[0][1] < now - KEEP_SECONDS:
            seen.intervals.pop(0)

    def online(self, node_key: Pubkey) -> bool:
        seen = self.nodes.get(node_key)
        return seen is not None and seen.connected and self.silent_for(node_key) <= self.lost_after

    def healthy(self, node_key: Pubkey) -> bool:
        seen = self.nodes.get(node_key)
        return seen is not None and seen.healthy

    def online_seconds(self, node_key: Pubkey, start: float, end: float, tolerance: float = 0.0) -> int:
        """Whole seconds of [start, end] the node was seen online: each beat covers `reach` after it,
        or a lease's longer downtime `tolerance` (never less than `reach`): silence its client
        tolerates is held time, not offline time."""
        seen = self.nodes.get(node_key)
        if seen is None:
            return 0
        reach = max(self.reach, tolerance)
        total, cursor = 0.0, start
        for a, b in seen.intervals:  # sorted and disjoint, so their reaches end in order too
            lo, hi = max(cursor, a), min(end, b + reach)
            if hi > lo:
                total += hi - lo
                cursor = hi  # a longer reach may overlap the next span: count each second once
        return int(min(total, end - start))

    def newly_lost(self) -> list[Pubkey]:
        """Nodes silent for longer than `lost_after`, each reported once per outage (none while
        the heartbeats of a blind window drain)."""
        if not self.judging():
            return []
        lost = []
        for key, seen in self.nodes.items():
            if not seen.lost_reported and self.silent(key):
                seen.lost_reported = True
                lost.append(key)
        return lost

    def silent(self, node_key: Pubkey, tolerance: float = 0.0) -> bool:
        """Silent for longer than `lost_after`, or than a lease's longer downtime `tolerance` (never a
        shorter one), blind time excluded; re-checked when a slash is decided."""
        return self.silent_for(node_key) > max(self.lost_after, tolerance)

    def silent_share(self, window_seconds: float) -> tuple[int, int]:
        """(silent, of): nodes going silent among those heard within `window_seconds` (nodes gone longer
        ago are not part of the fleet any more). A node counts from half of `lost_after`: when a
        whole fleet stops at once, the first node crosses `lost_after` up to a heartbeat before the
        others, and the outage must be seen as correlated before that first one is judged."""
        return self._going_silent([k for k in self.nodes if self.silent_for(k) <= window_seconds])

    def silent_regions(
        self, window_seconds: float, region_of: Callable[[Pubkey], int | None], min_nodes: int
    ) -> dict[int, tuple[int, int]]:
        """`silent_share` per region (of regions with at least `min_nodes` nodes in the fleet: a
        smaller one says nothing about correlation)."""
        regions: dict[int, list[Pubkey]] = {}
        for key in self.nodes:
            if self.silent_for(key) <= window_seconds and (region := region_of(key)) is not None:
                regions.setdefault(region, []).append(key)
        return {r: self._going_silent(keys) for r, keys in regions.items() if len(keys) >= min_nodes}

    def silence_began(self, window_seconds: float, keys: Collection[Pubkey] | None = None) -> float:
        """When the silence of a correlated outage began: the earliest last heartbeat of the nodes
        (of `keys`, else the fleet's) going silent and not yet reported lost (those were lost before
        it, on their own). A pause is dated from it, not from when it is detected, so a node that
        fell silent first is online at the pause's start like the others, and its silence in it
        counts for nobody (now, when none is going silent)."""
        began = [
            seen.last_heartbeat
            for key, seen in self.nodes.items()
            if (keys is None or key in keys)
            and not seen.lost_reported
            and self.lost_after / 2 < self.silent_for(key) <= window_seconds
        ]
        return min(began, default=self.clock())

    def _going_silent(self, keys: list[Pubkey]) -> tuple[int, int]:
        return sum(self.silent_for(k) > self.lost_after / 2 for k in keys), len(keys)

    def _unseen_since(self, seen: NodeSeen) -> float:
        """Blind (or excused) seconds since the node's last heartbeat, each second once."""
        now = self.clock()
        spans = sorted((max(a, seen.last_heartbeat), min(b, now)) for a, b in [*self.blind, *seen.excused])
        total, cursor = 0.0, seen.last_heartbeat
        for a, b in spans:
            a = max(a, cursor)
            if b > a:
                total += b - a
                cursor = b
        return total


class Tolerant(Protocol):
    @property
    def downtime_tolerance_seconds(self) -> int:
        """The lease's choice at open; 0 = the network's default."""


S = TypeVar("S", bound=Tolerant)


def due_shares(shares: list[S], silent_seconds: float, lost_after: float) -> tuple[list[S], list[S]]:
    """(lost, tolerated): the shares of a silent node whose lease's downtime tolerance its silence
    exceeds, and the others. A lease's tolerance only ever lengthens `lost_after`, never shortens it."""
    lost: list[S] = []
    tolerated: list[S] = []
    for share in shares:
        limit = max(lost_after, share.downtime_tolerance_seconds)
        (lost if silent_seconds > limit else tolerated).append(share)
    return lost, tolerated


def _merged(spans: list[list[float]], reach: float) -> list[list[float]]:
    """Online spans sorted and joined where one starts within `reach` of the previous one's end."""
    out: list[list[float]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1] + reach:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out
