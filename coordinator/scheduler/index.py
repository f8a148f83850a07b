"""The placement index: schedulable nodes with free GPUs, found without scanning the fleet.

Each node sits in four pools, keyed (model, region), (model, ANY), (ANY, region) and
(ANY, ANY), so a request of any shape looks in exactly one pool. Inside a pool, nodes sit
on shelves by free GPU count, then by (VRAM, quality class); a shelf is a list sorted by
(effective price, node key). A query walks the shelves that can hold its share, from
the best fit upwards, and stops as soon as no unseen node can beat what it has.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Collection

from coordinator.scheduler.model import MAX_GPUS_PER_NODE, Address, NodeView
from coordinator.scheduler.scoring import QUALITY_CLASS_TOPS, Scoring
from gpunet.instructions import ANY

__all__ = ["Entry", "Pool", "ShelfKey", "pool_keys"]

Entry = tuple[float, Address, NodeView]
"""(effective price, node key, view): sorts by price, ties by node key (deterministic)."""
ShelfKey = tuple[int, int]
"""(VRAM in GB, quality class)."""

_INF = float("inf")


def pool_keys(view: NodeView) -> tuple[tuple[int, int], ...]:
    m, r = view.gpu_model, view.region
    return ((m, r), (m, ANY), (ANY, r), (ANY, ANY))


class Pool:
    __slots__ = ("min_price", "shelves", "size")

    def __init__(self) -> None:
        # shelves[free][(vram, quality class)] -> sorted entries; empty shelves are deleted so queries skip them.
        self.shelves: list[dict[ShelfKey, list[Entry]]] = [{} for _ in range(MAX_GPUS_PER_NODE + 1)]
        # A lower bound on every entry's effective price (kept through removals: only less tight).
        self.min_price = _INF
        self.size = 0

    def add(self, entry: Entry, free: int, key: ShelfKey) -> None:
        shelf = self.shelves[free].get(key)
        if shelf is None:
            self.shelves[free][key] = [entry]
        else:
            insort(shelf, entry)
        self.min_price = min(self.min_price, entry[0])
        self.size += 1

    def remove(self, entry: Entry, free: int, key: ShelfKey) -> None:
        shelf = self.shelves[free][key]
        i = bisect_left(shelf, entry[:2])
        assert shelf[i][1] == entry[1], "index out of step with the fleet"
        del shelf[i]
        if not shelf:
            del self.shelves[free][key]
        self.size -= 1
        if not self.size:
            self.min_price = _INF

    def best(
        self, gpus: int, min_vram: int, max_price: int, k: int, exclude: Collection[Address], scoring: Scoring
    ) -> list[Entry]:
        """The k lowest-cost nodes that can take a share of `gpus` GPUs, cheapest first.

        Cost = effective price x packing factor of the GPUs the share leaves free. Exact:
        a shelf is skipped, or a walk stopped, only when a lower bound on its costs is
        already worse than the k-th best found, or no later node is within max_price.
        """
        found: list[Entry] = []
        bound = _INF
        weight = scoring.packing_weight
        shelves = self.shelves
        for free in range(gpus, MAX_GPUS_PER_NODE + 1):
            factor = 1.0 + weight * (free - gpus)
            if self.min_price * factor > bound:
                break
            for (vram, quality), shelf in shelves[free].items():
                if vram < min_vram or shelf[0][0] * factor > bound:
                    continue
                price_stop = max_price * QUALITY_CLASS_TOPS[quality]
                for price, key, view in shelf:
                    if price >= price_stop:
                        break
                    cost = price * factor
                    if cost > bound:
                        break
                    if view.price_per_gpu_hour > max_price or key in exclude:
                        continue
                    insort(found, (cost, key, view))
                    if len(found) >= k:
                        del found[k:]
                        bound = found[-1][0]
        return found

    def largest(self, min_vram: int, max_price: int, exclude: Collection[Address]) -> NodeView | None:
        """The node with the most free GPUs, cheapest among those, then lowest node key."""
        for free in range(MAX_GPUS_PER_NODE, 0, -1):
            pick: Entry | None = None
            for (vram, quality), shelf in self.shelves[free].items():
                if vram < min_vram:
                    continue
                price_stop = max_price * QUALITY_CLASS_TOPS[quality]
                for entry in shelf:
                    if entry[0] >= price_stop:
                        break
                    if entry[2].price_per_gpu_hour <= max_price and entry[1] not in exclude:
                        if pick is None or entry[:2] < pick[:2]:
                            pick = entry
                        break
            if pick is not None:
                return pick[2]
        return None
