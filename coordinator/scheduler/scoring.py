"""How the scheduler ranks qualifying nodes: an effective price, and a packing penalty.

A node's effective price is what the client can expect to pay per GPU-hour actually
delivered: its asking price, raised for a far (high-latency) node and divided by its
reliability (a node that loses half its shares costs twice as much in restarted work).
It depends only on the node, so the index keeps nodes sorted by it.

A share's total cost multiplies in the packing penalty: each GPU the share would leave free
on its node costs `packing_weight` of the price. Best fit wins among equal nodes, and a
leftover-free node must be clearly cheaper to win, which keeps whole machines whole for
cluster leases.
"""

from __future__ import annotations

from dataclasses import dataclass

from coordinator.scheduler.model import NodeView

__all__ = ["QUALITY_CLASS_TOPS", "Scoring"]

# Class c holds factors in [1.25^c, 1.25^(c+1)); the last class catches the rest.
QUALITY_CLASS_TOPS: tuple[float, ...] = (*(1.25 ** (c + 1) for c in range(15)), float("inf"))


@dataclass(frozen=True, slots=True)
class Scoring:
    packing_weight: float = 0.25  # cost per GPU left free on the node, as a fraction of the price
    latency_weight_per_ms: float = 0.001  # 100 ms of round trip = +10 % effective price
    latency_cap_ms: float = 1_000.0  # beyond this a node is simply far
    unknown_latency_ms: float = 100.0  # before the first measurement
    prior_completed: int = 9  # a new node starts at 90 % reliability,
    prior_failed: int = 1  # so one early failure does not bury it
    reliability_floor: float = 0.25

    def __post_init__(self) -> None:
        if not (
            self.packing_weight >= 0
            and self.latency_weight_per_ms >= 0
            and self.latency_cap_ms >= 0
            and self.unknown_latency_ms >= 0
            and self.prior_completed >= 1
            and self.prior_failed >= 0
            and 0 < self.reliability_floor <= 1
        ):
            raise ValueError(f"invalid scoring weights: {self}")

    def reliability(self, view: NodeView) -> float:
        done = view.completed_shares + self.prior_completed
        return max(self.reliability_floor, done / (done + view.failed_shares + self.prior_failed))

    def quality_factor(self, view: NodeView) -> float:
        """>= 1; effective price / asking price."""
        latency = self.unknown_latency_ms if view.latency_ms is None else view.latency_ms
        return (1.0 + min(latency, self.latency_cap_ms) * self.latency_weight_per_ms) / self.reliability(view)

    def quality_class(self, view: NodeView) -> int:
        """Nodes are shelved by class of quality factor: every node of class c has a factor
        below QUALITY_CLASS_TOPS[c], so on a shelf sorted by effective price, once an entry's
        effective price passes max_price x that top, no later entry's asking price is within
        max_price, and a scan may stop there."""
        factor = self.quality_factor(view)
        c = 0
        while factor >= QUALITY_CLASS_TOPS[c]:
            c += 1
        return c

    def effective_price(self, view: NodeView) -> float:
        return view.price_per_gpu_hour * self.quality_factor(view)

    def packing_factor(self, leftover_gpus: int) -> float:
        return 1.0 + self.packing_weight * leftover_gpus
