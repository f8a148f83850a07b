"""What the coordinator has seen of each node: when it was online (from its heartbeats), whether
it reports healthy GPUs, and when it counts as lost.

Online time is the evidence usage reports are checked against: a node counts as online from a
heartbeat until `lost_after_seconds` after it, the same rule that declares it lost. A shorter
gap (a network blip, a reconnect) is not held against it; a longer one is offline time that
no report may bill. A refused report blocks its share's later reports (the chain wants every
seq in order), so this check must never refuse a node the coordinator did not consider lost.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from solders.pubkey import Pubkey

__all__ = ["Fleet", "NodeSeen"]

KEEP_SECONDS = 24 * 3600  # online history kept per node (longer than any usage period)


@dataclass
class NodeSeen:
    simulated: bool
    healthy: bool = True
    connected: bool = True
    last_heartbeat: float = 0.0
    lost_reported: bool = False
    intervals: list[list[float]] = field(default_factory=list)  # merged [start, end] online spans


class Fleet:
    def __init__(self, *, lost_after_seconds: float = 10.0, clock: Callable[[], float] = time.time) -> None:
        self.reach = self.lost_after = lost_after_seconds
        self.clock = clock
        self.nodes: dict[Pubkey, NodeSeen] = {}

    def connected(self, node_key: Pubkey, simulated: bool) -> None:
        seen = self.nodes.setdefault(node_key, NodeSeen(simulated))
        seen.simulated, seen.connected, seen.lost_reported = simulated, True, False
        self.heartbeat(node_key, seen.healthy)

    def expect(self, node_key: Pubkey, grace_seconds: float) -> None:
        """A node that holds work but has not connected yet (a coordinator restart): it is lost
        unless it connects within `grace_seconds`."""
        if node_key not in self.nodes:
            self.nodes[node_key] = NodeSeen(simulated=False, connected=False,
                                            last_heartbeat=self.clock() + grace_seconds - self.lost_after)

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
        return seen is not None and seen.connected and self.clock() - seen.last_heartbeat <= self.lost_after

    def healthy(self, node_key: Pubkey) -> bool:
        seen = self.nodes.get(node_key)
        return seen is not None and seen.healthy

    def online_seconds(self, node_key: Pubkey, start: float, end: float) -> int:
        """Whole seconds of [start, end] the node was seen online (each beat covers `reach` after it)."""
        seen = self.nodes.get(node_key)
        if seen is None:
            return 0
        total = 0.0
        for a, b in seen.intervals:
            total += max(0.0, min(end, b + self.reach) - max(start, a))
        return int(min(total, end - start))

    def newly_lost(self) -> list[Pubkey]:
        """Nodes silent for longer than `lost_after`, each reported once per outage."""
        now, lost = self.clock(), []
        for key, seen in self.nodes.items():
            if not seen.lost_reported and now - seen.last_heartbeat > self.lost_after:
                seen.lost_reported = True
                lost.append(key)
        return lost
