"""What the coordinator's loops share in memory, in one object, and how each loop reaches the
workers (`WorkerLink`, the gateway's send side).

Everything else a loop needs it reads from the ledger (PostgreSQL) or the chain, so a restarted
coordinator rebuilds this from them: the scheduler's reservations from the chain's assignments
(`FleetView.refresh`), jobs dispatched again (a worker acknowledges a job it has), lost nodes
found again (they are still silent), drains started again (the node is still draining).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from coordinator.keys import NodeKey
from coordinator.metrics import Metrics
from coordinator.scheduler import Scheduler
from gpunet.protocol import Heartbeat, Inventory, PortRange

__all__ = ["DrainMove", "Shared", "Telemetry", "WorkerLink"]


class WorkerLink(Protocol):
    """The gateway as the loops use it: who is connected, and sending them coordinator messages."""

    def online(self, node_key: NodeKey) -> bool: ...

    def latency_ms(self, node_key: NodeKey) -> float | None: ...

    def host(self, node_key: NodeKey) -> str:
        """How the node's cluster peers reach it (its advertised address), as a URL host."""

    def cluster_ports(self, node_key: NodeKey) -> PortRange | None:
        """The ports the node opens for cluster traffic; None: it advertised none."""

    async def send(self, node_key: NodeKey, message: Any) -> None:
        """Raises `coordinator.gateway.NodeOffline` when the node has no session."""


@dataclass
class DrainMove:
    """A share leaving a draining node: its job was cancelled there at `cancelled_at`."""

    cancelled_at: float
    stopped: bool = False  # the job is not running there (it reported its end, or had none going)
    released: bool = False  # then a heartbeat showed the share released: its last report and checkpoint are in


@dataclass(frozen=True)
class Telemetry:
    """A node's last heartbeat as received (worker messages keep it; the API serves it)."""

    received_at: float  # unix seconds
    heartbeat: Heartbeat


@dataclass
class Shared:
    """The in-memory state more than one loop reads or writes (who writes what is noted per field)."""

    # Placement's view of the fleet and the GPUs reserved on it (FleetView refreshes it; placement,
    # failover and drain change reservations; dispatch and lease end read them).
    scheduler: Scheduler
    # lease -> nodes this process gave the lease's current job (dispatch; `give_again` clears a node)
    dispatched: dict[str, set[NodeKey]] = field(default_factory=dict)
    # how many times `give_again` was asked: a dispatch that read the lease's state before an ask and sent
    # after it does not count as given (what it sent may lack what the ask was for, e.g. a sealed key)
    asks_to_give_again: int = 0
    # lease -> lost nodes, and nodes that refused their share (verification), whose share still has to
    # move (failover; drain leaves those shares alone; dispatch gives them nothing of the lease)
    failovers: dict[str, set[NodeKey]] = field(default_factory=dict)
    # lease -> when its workers were told to stop (lease end; dispatch and drain skip the lease)
    ending: dict[str, float] = field(default_factory=dict)
    # lease -> its nodes whose workers acknowledged being told to stop (worker messages): each has released
    # its share and stops the job, and takes no other lease's share onto those GPUs before the job has
    # stopped; once every node of a lease closed on chain has, lease end frees them in the scheduler
    stopped: dict[str, set[NodeKey]] = field(default_factory=dict)
    # leases lease end saw closed on chain: each frees its nodes the moment the last of them has stopped
    closed: set[str] = field(default_factory=set)
    # (lease, draining node) -> its share's move (drain; dispatch skips the share; worker messages advance it)
    drains: dict[tuple[str, NodeKey], DrainMove] = field(default_factory=dict)
    # node -> the leases its last checked heartbeat claimed and it holds (worker messages; failover clears a lost node)
    running_checked: dict[NodeKey, frozenset[str]] = field(default_factory=dict)
    # GPU verification (verification; the fleet view turns these into the scheduler's `verified`):
    # the tier the cluster's config requires to assign a node (0: none), and the nodes found unfit
    # (what runs is not what was registered, a GPU claimed twice) or failing, with why: those get no
    # leases whatever the tier.
    required_tier: int = 0
    unfit: dict[NodeKey, str] = field(default_factory=dict)
    # node -> the GPUs its worker's hello reported (worker messages via verification, which checks them
    # against the registration; the fleet view places only on those; kept after a disconnect)
    inventories: dict[NodeKey, Inventory] = field(default_factory=dict)
    # node -> its last heartbeat's GPU telemetry (worker messages; the API serves it; kept after a disconnect)
    telemetry: dict[NodeKey, Telemetry] = field(default_factory=dict)
    # The Prometheus metrics every loop counts into (coordinator.metrics; /metrics serves them).
    metrics: Metrics = field(default_factory=Metrics)

    def region(self, node_key: NodeKey) -> int | None:
        view = self.scheduler.nodes.get(node_key)
        return None if view is None else view.region

    def give_again(self, nodes: Iterable[NodeKey], lease: str | None = None) -> None:
        """These nodes get the job of `lease` (of every lease, without one) again at dispatch's next
        step: a worker reconnected, a share moved, or the client sealed them something."""
        self.asks_to_give_again += 1
        nodes = set(nodes)
        for held, given in self.dispatched.items():
            if lease is None or held == lease:
                given.difference_update(nodes)

    def forget(self, lease: str) -> None:
        """The lease is over: nothing of it is kept."""
        if lease in self.scheduler.reservations:
            self.scheduler.release(lease)
        self.dispatched.pop(lease, None)
        self.failovers.pop(lease, None)
        self.ending.pop(lease, None)
        self.stopped.pop(lease, None)
        self.closed.discard(lease)

    def free_if_stopped(self, lease: str) -> bool:
        """Frees in the scheduler the nodes of a lease closed on chain once every one of them
        acknowledged being told to stop (the program freed them at the close); whether it did now.
        Lease end asks on its pass, worker messages at each acknowledgement, so the next lease can
        have the nodes at once."""
        reservation = self.scheduler.reservations.get(lease)
        if lease not in self.closed or reservation is None:
            return False
        if not set(reservation.node_keys) <= self.stopped.get(lease, set()):
            return False
        self.scheduler.release(lease)
        return True
