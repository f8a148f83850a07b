"""The fleet the scheduler places leases on: node state, reservations and the placement index."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Iterable, Mapping
from itertools import chain
from types import MappingProxyType
from typing import Any

from coordinator.scheduler.index import Entry, Pool, ShelfKey, pool_keys
from coordinator.scheduler.model import (
    MAX_GPUS_PER_NODE,
    MAX_LEASE_NODES,
    Address,
    InvalidNodeView,
    LeaseRequest,
    NodeBusy,
    NodeView,
    NotPlaced,
    PlacedShare,
    Placement,
    StalePlacement,
    UnknownLease,
    UnknownNode,
)
from coordinator.scheduler.reasons import explain
from coordinator.scheduler.scoring import Scoring
from gpunet.instructions import ANY

__all__ = ["Scheduler"]

Choice = list[tuple[NodeView, int]]

# Facts of a node that only rank it among the qualifying (coordinator.scheduler.scoring), never
# decide whether it qualifies: a change of them alone cannot let a lease that waits be placed.
_RANKING_ONLY = frozenset({"latency_ms", "completed_shares", "failed_shares"})


def _deciding(view: NodeView) -> tuple[Any, ...]:
    return tuple(getattr(view, f.name) for f in dataclasses.fields(view) if f.name not in _RANKING_ONLY)


class Scheduler:
    """Decides placements (`place`, `replace`) and keeps the fleet's free GPUs in step with them.

    `place` only decides; `reserve` commits a placement (before assign_lease is sent, so no
    second decision can take the same GPUs) and `release` gives them back (lease closed, or
    its transaction finally failed). `replace` decides and commits a failover at once.
    Every method either does all it says or raises a SchedulerError and changes nothing.
    Nodes are known by their node key, as the gateway, the fleet monitor and the attester know them.
    """

    def __init__(self, scoring: Scoring | None = None, accept_simulated: bool = True) -> None:
        self.scoring = scoring or Scoring()
        # Off on a production coordinator; the local network and the tests run simulated GPUs.
        self.accept_simulated = accept_simulated
        self._nodes: dict[Address, NodeView] = {}
        self._groups: dict[tuple[int, int], dict[Address, NodeView]] = {}  # (model, region): for reasons only
        self._entries: dict[Address, tuple[Entry, int, ShelfKey]] = {}  # indexed node -> (entry, free GPUs, shelf)
        self._pools: dict[tuple[int, int], Pool] = {}
        self._reservations: dict[str, Placement] = {}
        self._holders: dict[Address, set[str]] = {}  # node -> leases holding a share of it
        # Waiting leases' NotPlaced, valid until the fleet changes in a way that can change it (a node
        # added, removed or changed in a deciding fact, GPUs taken or freed): the placement loop
        # retries every waiting lease on every step, and working out why one waits walks every node
        # of its model (10 ms at 100,000 nodes), so an unchanged fleet costs each a lookup only.
        self._waiting: dict[str, NotPlaced] = {}
        # Told each time GPUs of a node are taken (reserve, restore, replace): GPU verification
        # yields to it (coordinator/loops/verification.py).
        self.taken: Callable[[Address], None] = lambda _node_key: None

    # -- the fleet ---------------------------------------------------------------------------

    @property
    def nodes(self) -> Mapping[Address, NodeView]:
        return MappingProxyType(self._nodes)

    def upsert_node(self, view: NodeView) -> None:
        """Adds a node or replaces its facts. A new node brings its gpus_leased (the chain's
        count at start-up); after that the scheduler's reservations own the count."""
        view.check()
        old = self._nodes.get(view.node_key)
        if old is not None:
            if view.gpu_count < old.gpus_leased:
                raise InvalidNodeView(
                    f"node {view.node_key}: gpu_count {view.gpu_count} is below its {old.gpus_leased} leased GPUs"
                )
            view.gpus_leased = old.gpus_leased
            if _deciding(old) != _deciding(view):
                self._waiting.clear()
            self._drop(old)
        else:
            self._waiting.clear()
        self._put(view)

    def update_node(self, node_key: Address, /, **changes: Any) -> NodeView:
        """Changes some facts of a node: online, healthy, jailed, latency_ms, stake, price..."""
        old = self._node(node_key)
        if {"node", "node_key", "gpus_leased"} & changes.keys():
            raise InvalidNodeView(f"node {node_key}: its addresses and gpus_leased are not updatable")
        try:
            new = dataclasses.replace(old, **changes)  # runs NodeView.check, gpus_leased <= gpu_count too
        except TypeError as e:
            raise InvalidNodeView(f"node {node_key}: {e}") from None
        if _deciding(old) != _deciding(new):
            self._waiting.clear()
        self._drop(old)
        self._put(new)
        return new

    def record_outcome(self, node_key: Address, completed: bool) -> NodeView:
        """One lease share the node ran to the end (or lost): its reliability history."""
        view = self._node(node_key)
        if completed:
            return self.update_node(node_key, completed_shares=view.completed_shares + 1)
        return self.update_node(node_key, failed_shares=view.failed_shares + 1)

    def remove_node(self, node_key: Address) -> None:
        view = self._node(node_key)
        if self._holders.get(node_key):
            raise NodeBusy(f"node {node_key} holds shares of leases {sorted(self._holders[node_key])}")
        self._waiting.clear()
        self._drop(view)

    # -- decisions -----------------------------------------------------------------------------

    def place(self, request: LeaseRequest) -> Placement | NotPlaced:
        """The best placement for the lease now, or why there is none. Changes nothing. Asked again
        with the fleet unchanged since, a lease that waits gets the same NotPlaced (`is` it)."""
        waiting = self._waiting.get(request.lease)
        if waiting is not None and waiting.request == request:
            return waiting
        choice = self._choose(request, (), request.terms.gpu_count)
        if choice is None:
            waiting = self._waiting[request.lease] = NotPlaced(request, lambda: self.explain(request))
            return waiting
        return Placement(request, tuple(PlacedShare.of(view, gpus) for view, gpus in choice))

    def explain(self, request: LeaseRequest) -> str:
        """Why the lease cannot be placed now: its terms, and which filters its model's nodes fail."""
        nodes, elsewhere = self._candidates(request)
        return explain(nodes, request, self.accept_simulated, elsewhere=elsewhere)

    def reserve(self, placement: Placement) -> None:
        """Takes the placement's GPUs; StalePlacement if the fleet no longer allows it."""
        self._check(placement, eligibility=True)
        self._commit(placement)

    def restore(self, placement: Placement) -> None:
        """Takes the GPUs of a placement already assigned on chain (coordinator start-up):
        the chain accepted it, so only the shape and the free GPUs are checked."""
        self._check(placement, eligibility=False)
        self._commit(placement)

    def release(self, lease: str) -> Placement:
        placement = self.reservation(lease)
        for share in placement.shares:
            self._move(self._nodes[share.node_key], -share.gpus)
            self._holders[share.node_key].discard(lease)
        del self._reservations[lease]
        return placement

    def spare(self, lease: str, node_key: Address) -> PlacedShare | NotPlaced:
        """Where `replace` would move the node's share of the lease now (changes nothing): a drain
        stops a job only when its share has somewhere to go."""
        placement = self.reservation(lease)
        share = next((s for s in placement.shares if s.node_key == node_key), None)
        if share is None:
            raise UnknownNode(f"node {node_key} holds no share of lease {lease}")
        in_lease = frozenset(placement.node_keys)
        choice = self._choose(placement.request, in_lease, share.gpus, single=True)
        if choice is None:

            def reason() -> str:
                nodes, elsewhere = self._candidates(placement.request)
                return explain(nodes, placement.request, self.accept_simulated, in_lease, share.gpus, elsewhere)

            return NotPlaced(placement.request, reason)
        return PlacedShare.of(choice[0][0], share.gpus)

    def replace(self, lease: str, lost_node_key: Address) -> Placement | NotPlaced:
        """Failover: moves the lost node's share of the lease to the best other qualifying node
        (never one already in the lease, as reassign_lease requires) and returns the new placement."""
        placement = self.reservation(lease)
        index = next((i for i, s in enumerate(placement.shares) if s.node_key == lost_node_key), None)
        if index is None:
            raise UnknownNode(f"node {lost_node_key} holds no share of lease {lease}")
        lost = placement.shares[index]
        request = placement.request
        in_lease = frozenset(placement.node_keys)
        choice = self._choose(request, in_lease, lost.gpus, single=True)
        if choice is None:

            def reason() -> str:
                nodes, elsewhere = self._candidates(request)
                return explain(nodes, request, self.accept_simulated, in_lease, lost.gpus, elsewhere)

            return NotPlaced(request, reason)
        target, gpus = choice[0]
        self._move(self._nodes[lost_node_key], -gpus)
        self._holders[lost_node_key].discard(lease)
        self._move(target, gpus)
        self._holders.setdefault(target.node_key, set()).add(lease)
        shares = list(placement.shares)
        shares[index] = PlacedShare.of(target, gpus)  # the chain keeps the assignment's index too
        moved = Placement(request, tuple(shares))
        self._reservations[lease] = moved
        return moved

    def reservation(self, lease: str) -> Placement:
        try:
            return self._reservations[lease]
        except KeyError:
            raise UnknownLease(f"no reservation for lease {lease}") from None

    @property
    def reservations(self) -> Mapping[str, Placement]:
        return MappingProxyType(self._reservations)

    def check_consistency(self) -> None:
        """Raises AssertionError if the index disagrees with the nodes (a debugging aid)."""
        expected = {n: v for n, v in self._nodes.items() if self._indexable(v)}
        assert set(self._entries) == set(expected), "indexed nodes differ from schedulable nodes"
        for node, (entry, free, shelf) in self._entries.items():
            view = expected[node]
            assert entry[2] is view and free == view.free_gpus
            assert entry[0] == self.scoring.effective_price(view)
            assert shelf == (view.vram_gb, self.scoring.quality_class(view))
            for key in pool_keys(view):
                assert entry in self._pools[key].shelves[free][shelf]
        for pool in self._pools.values():
            shelved = [e for level in pool.shelves for shelf in level.values() for e in shelf]
            assert len(shelved) == pool.size and all(e[0] >= pool.min_price for e in shelved)
            assert all(shelf == sorted(shelf) for level in pool.shelves for shelf in level.values())
        held: dict[Address, int] = {}
        for placement in self._reservations.values():
            for share in placement.shares:
                held[share.node_key] = held.get(share.node_key, 0) + share.gpus
        for node, gpus in held.items():
            assert self._nodes[node].gpus_leased >= gpus, f"node {node} leases fewer GPUs than reserved"

    # -- internals -------------------------------------------------------------------------------

    def _choose(
        self, request: LeaseRequest, exclude: Collection[Address], gpus: int, single: bool = False
    ) -> Choice | None:
        t = request.terms
        pool = self._pools.get((t.gpu_model, t.region))
        if pool is None:
            return None
        vram, price, scoring = t.min_vram_gb, t.max_price_per_gpu_hour, self.scoring
        per_node = request.gpus_per_node
        if per_node is not None and not single:
            k = gpus // per_node
            found = pool.best(per_node, vram, price, k, exclude, scoring)
            return [(view, per_node) for _, _, view in found] if len(found) == k else None
        if gpus <= MAX_GPUS_PER_NODE:
            found = pool.best(gpus, vram, price, 1, exclude, scoring)
            if found:
                return [(found[0][2], gpus)]
        if single or request.max_nodes == 1:
            return None
        # The fewest nodes: machines with the most free GPUs whole, then the best fit for the
        # rest. Taking the largest first maximises every prefix sum, so if any placement on
        # max_nodes nodes exists this finds one.
        choice: Choice = []
        used = set(exclude)
        remaining = gpus
        while len(choice) < request.max_nodes - 1:
            view = pool.largest(vram, price, used)
            if view is None:
                return None
            choice.append((view, view.free_gpus))
            used.add(view.node_key)
            remaining -= view.free_gpus
            if remaining <= MAX_GPUS_PER_NODE:
                found = pool.best(remaining, vram, price, 1, used, scoring)
                if found:
                    choice.append((found[0][2], remaining))
                    return choice
        return None

    def _candidates(self, request: LeaseRequest) -> tuple[Iterable[NodeView], int]:
        """The nodes of the request's model in its region, and how many of the model are elsewhere."""
        t = request.terms
        of_model = [(key, group) for key, group in self._groups.items() if t.gpu_model in (ANY, key[0])]
        inside = [group.values() for key, group in of_model if t.region in (ANY, key[1])]
        elsewhere = sum(len(group) for key, group in of_model if t.region not in (ANY, key[1]))
        return chain.from_iterable(inside), elsewhere

    def _check(self, placement: Placement, eligibility: bool) -> None:
        request, shares = placement.request, placement.shares
        lease = request.lease
        if lease in self._reservations:
            raise StalePlacement(f"lease {lease} is already reserved")
        nodes = [s.node_key for s in shares]
        if not 1 <= len(shares) <= min(request.max_nodes, MAX_LEASE_NODES) or len(set(nodes)) != len(nodes):
            raise StalePlacement(f"lease {lease}: {len(shares)} shares on {len(set(nodes))} distinct nodes")
        if any(s.gpus < 1 for s in shares) or sum(s.gpus for s in shares) != request.gpu_count:
            raise StalePlacement(f"lease {lease}: shares {[s.gpus for s in shares]} do not sum to {request.gpu_count}")
        if request.gpus_per_node is not None and any(s.gpus != request.gpus_per_node for s in shares):
            raise StalePlacement(f"lease {lease}: every share must have {request.gpus_per_node} GPUs")
        for share in shares:
            view = self._nodes.get(share.node_key)
            if view is None:
                raise StalePlacement(f"lease {lease}: node {share.node_key} is not in the fleet")
            if eligibility and not (view.is_schedulable(self.accept_simulated) and view.meets(request.terms)):
                raise StalePlacement(f"lease {lease}: node {share.node_key} no longer qualifies")
            # a new placement only on GPUs the node runs; one the chain holds (a restart) on what it registered
            free = view.free_gpus if eligibility else view.unleased_gpus
            if free < share.gpus:
                raise StalePlacement(
                    f"lease {lease}: node {share.node_key} has {free} free GPUs, the share needs {share.gpus}"
                )

    def _commit(self, placement: Placement) -> None:
        for share in placement.shares:
            self._move(self._nodes[share.node_key], share.gpus)
            self._holders.setdefault(share.node_key, set()).add(placement.lease)
        self._reservations[placement.lease] = placement

    def _node(self, node_key: Address) -> NodeView:
        try:
            return self._nodes[node_key]
        except KeyError:
            raise UnknownNode(f"no node {node_key} in the fleet") from None

    def _move(self, view: NodeView, gpus: int) -> None:
        """Leases (gpus > 0) or frees (gpus < 0) GPUs of a node, keeping the index in step."""
        indexed = self._entries.get(view.node_key)
        view.gpus_leased += gpus
        self._waiting.clear()
        if gpus > 0:
            self.taken(view.node_key)
        if indexed is None:
            self._index(view)
            return
        # The hot path of reserve/release: only the shelf changes, the entry (and its price) stays.
        entry, old_free, shelf = indexed
        free = view.free_gpus
        pools = [self._pools[key] for key in pool_keys(view)]
        for pool in pools:
            pool.remove(entry, old_free, shelf)
        if free:
            for pool in pools:
                pool.add(entry, free, shelf)
            self._entries[view.node_key] = (entry, free, shelf)
        else:
            del self._entries[view.node_key]

    def _put(self, view: NodeView) -> None:
        self._nodes[view.node_key] = view
        self._groups.setdefault((view.gpu_model, view.region), {})[view.node_key] = view
        self._index(view)

    def _drop(self, view: NodeView) -> None:
        self._unindex(view)
        del self._nodes[view.node_key]
        del self._groups[view.gpu_model, view.region][view.node_key]

    def _indexable(self, view: NodeView) -> bool:
        return view.free_gpus > 0 and view.is_schedulable(self.accept_simulated)

    def _index(self, view: NodeView) -> None:
        if not self._indexable(view):
            return
        entry: Entry = (self.scoring.effective_price(view), view.node_key, view)
        free = view.free_gpus
        shelf = (view.vram_gb, self.scoring.quality_class(view))
        for key in pool_keys(view):
            pool = self._pools.get(key)
            if pool is None:
                pool = self._pools[key] = Pool()
            pool.add(entry, free, shelf)
        self._entries[view.node_key] = (entry, free, shelf)

    def _unindex(self, view: NodeView) -> None:
        indexed = self._entries.pop(view.node_key, None)
        if indexed is None:
            return
        entry, free, shelf = indexed
        for key in pool_keys(entry[2]):  # the view it was indexed under (an update may bring a new one)
            self._pools[key].remove(entry, free, shelf)
