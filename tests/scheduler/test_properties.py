"""Properties of placement on random fleets, judged by a brute-force oracle (tests/scheduler/fleets.py)."""

from __future__ import annotations

import copy

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from coordinator.scheduler import LeaseRequest, NodeView, NotPlaced, Placement, Scheduler, Scoring, StalePlacement
from tests.scheduler.fleets import (
    cluster_cases,
    fewest_nodes,
    fleets,
    free,
    lease_requests,
    leased,
    qualifies,
    scheduler_of,
    violations,
)

# Generous for a loaded 2-core machine: no deadline, a bounded number of examples.
PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def cost(scoring: Scoring, view: NodeView, gpus: int) -> tuple[float, str]:
    """The documented ranking, recomputed: effective price x packing factor, then address."""
    factor = 1.0 + scoring.packing_weight * (free(view) - gpus)
    return (scoring.effective_price(view) * factor, view.node_key)


any_case = st.tuples(fleets(), lease_requests()) | cluster_cases()


@PROPERTY
@given(any_case)
def test_a_placement_meets_every_constraint_and_none_is_missed(case) -> None:
    fleet, req = case
    scheduler = scheduler_of(fleet)
    before = copy.deepcopy(dict(scheduler.nodes))
    decision = scheduler.place(req)
    assert leased(scheduler) == {n: v.gpus_leased for n, v in before.items()}, "place() changed the fleet"
    needed = fewest_nodes(before.values(), req)
    if isinstance(decision, NotPlaced):
        assert needed is None, f"a placement on {needed} nodes exists; scheduler said: {decision.reason}"
        assert decision.reason.startswith("cannot place")
        return
    assert violations(decision, before) == []
    assert len(decision.shares) == needed, "not the fewest nodes"
    scheduler.reserve(decision)
    scheduler.check_consistency()
    for share in decision.shares:
        assert scheduler.nodes[share.node_key].gpus_leased == before[share.node_key].gpus_leased + share.gpus


@PROPERTY
@given(any_case)
def test_a_one_node_or_equal_share_placement_is_the_cheapest(case) -> None:
    """The index's pruning is exact: the chosen nodes are the k best by (cost, address)."""
    fleet, req = case
    scheduler = scheduler_of(fleet)
    decision = scheduler.place(req)
    if not isinstance(decision, Placement):
        return
    per_node = req.gpus_per_node or (req.gpu_count if len(decision.shares) == 1 else None)
    if per_node is None:
        return  # a multi-node free split is ranked by node count first (checked above)
    able = [v for v in fleet if qualifies(v, req) and free(v) >= per_node]
    best = sorted(able, key=lambda v: cost(scheduler.scoring, v, per_node))[: len(decision.shares)]
    assert sorted(s.node_key for s in decision.shares) == sorted(v.node_key for v in best)


@PROPERTY
@given(any_case, st.data())
def test_a_placement_that_went_stale_reserves_nothing(case, data: st.DataObject) -> None:
    fleet, req = case
    scheduler = scheduler_of(fleet)
    decision = scheduler.place(req)
    if not isinstance(decision, Placement):
        return
    lost = data.draw(st.sampled_from(decision.shares)).node_key
    scheduler.update_node(lost, online=False)  # between the decision and its reservation
    before = leased(scheduler)
    try:
        scheduler.reserve(decision)
    except StalePlacement:
        pass
    else:
        raise AssertionError("reserved a placement with an offline node")
    assert leased(scheduler) == before and decision.lease not in scheduler.reservations
    scheduler.check_consistency()


@PROPERTY
@given(any_case)
def test_reserve_then_release_restores_the_fleet(case) -> None:
    fleet, req = case
    scheduler = scheduler_of(fleet)
    before = leased(scheduler)
    decision = scheduler.place(req)
    if not isinstance(decision, Placement):
        return
    scheduler.reserve(decision)
    assert leased(scheduler) != before
    assert scheduler.release(req.lease) == decision
    assert leased(scheduler) == before and not scheduler.reservations
    scheduler.check_consistency()
    assert scheduler.place(req) == decision, "the same fleet gave a different decision"


@PROPERTY
@given(any_case, st.data())
def test_failover_picks_a_qualifying_node_outside_the_lease(case, data: st.DataObject) -> None:
    fleet, req = case
    scheduler = scheduler_of(fleet)
    decision = scheduler.place(req)
    if not isinstance(decision, Placement):
        return
    scheduler.reserve(decision)
    index = data.draw(st.integers(0, len(decision.shares) - 1))
    lost = decision.shares[index]
    scheduler.update_node(lost.node_key, online=False)
    fleet_now = copy.deepcopy(dict(scheduler.nodes))
    moved = scheduler.replace(req.lease, lost.node_key)
    if isinstance(moved, NotPlaced):
        able = [
            v
            for v in fleet_now.values()
            if qualifies(v, req) and v.node_key not in decision.node_keys and free(v) >= lost.gpus
        ]
        assert able == [], f"{[v.node_key for v in able]} could take the share; scheduler said: {moved.reason}"
        assert leased(scheduler) == {n: v.gpus_leased for n, v in fleet_now.items()}
        assert scheduler.reservation(req.lease) == decision
        return
    new = moved.shares[index]
    assert new.node_key not in decision.node_keys and new.gpus == lost.gpus
    assert moved.shares[:index] + moved.shares[index + 1 :] == decision.shares[:index] + decision.shares[index + 1 :]
    assert qualifies(fleet_now[new.node_key], req) and free(fleet_now[new.node_key]) >= lost.gpus
    assert scheduler.nodes[lost.node_key].gpus_leased == fleet_now[lost.node_key].gpus_leased - lost.gpus
    assert scheduler.nodes[new.node_key].gpus_leased == fleet_now[new.node_key].gpus_leased + lost.gpus
    scheduler.check_consistency()


class FleetLifecycle(RuleBasedStateMachine):
    """Leases come and go, nodes drop out and come back: the books always balance."""

    @initialize(fleet=fleets(max_nodes=8))
    def start(self, fleet: list[NodeView]) -> None:
        self.scheduler = scheduler_of(fleet)
        self.base = leased(self.scheduler)  # GPUs leased outside this scheduler's reservations
        self.serial = 0
        self.waiting: dict[str, LeaseRequest] = {}  # leases not placed yet, retried as the fleet changes

    @rule(req=lease_requests())
    def open_lease(self, req) -> None:
        self.serial += 1
        req = type(req)(f"lease-{self.serial}", req.terms, req.max_nodes, req.gpus_per_node)
        decision = self.scheduler.place(req)
        if isinstance(decision, Placement):
            assert violations(decision, dict(self.scheduler.nodes)) == []
            self.scheduler.reserve(decision)
        else:
            self.waiting[req.lease] = req

    @precondition(lambda self: bool(self.waiting))
    @rule()
    def retry_waiting(self) -> None:
        """The placement loop's retry of every waiting lease: a NotPlaced kept from before the fleet
        changed must never hide a placement that exists now."""
        for lease, req in list(self.waiting.items()):
            decision = self.scheduler.place(req)
            needed = fewest_nodes(self.scheduler.nodes.values(), req)
            if isinstance(decision, NotPlaced):
                assert needed is None, f"a placement on {needed} nodes exists; scheduler said: {decision.reason}"
                continue
            assert violations(decision, dict(self.scheduler.nodes)) == []
            self.scheduler.reserve(decision)
            del self.waiting[lease]

    @precondition(lambda self: bool(self.scheduler.nodes))
    @rule(data=st.data(), latency=st.none() | st.floats(0, 2_000))
    def latency_changes(self, data: st.DataObject, latency: float | None) -> None:
        self.scheduler.update_node(data.draw(st.sampled_from(sorted(self.scheduler.nodes))), latency_ms=latency)

    @precondition(lambda self: bool(self.scheduler.reservations))
    @rule(data=st.data())
    def close_lease(self, data: st.DataObject) -> None:
        self.scheduler.release(data.draw(st.sampled_from(sorted(self.scheduler.reservations))))

    @precondition(lambda self: bool(self.scheduler.nodes))
    @rule(data=st.data(), online=st.booleans())
    def heartbeat_changes(self, data: st.DataObject, online: bool) -> None:
        self.scheduler.update_node(data.draw(st.sampled_from(sorted(self.scheduler.nodes))), online=online)

    @precondition(lambda self: bool(self.scheduler.reservations))
    @rule(data=st.data())
    def lose_a_node(self, data: st.DataObject) -> None:
        lease = data.draw(st.sampled_from(sorted(self.scheduler.reservations)))
        node = data.draw(st.sampled_from(self.scheduler.reservation(lease).node_keys))
        self.scheduler.update_node(node, online=False)
        self.scheduler.replace(lease, node)

    @invariant()
    def books_balance(self) -> None:
        if not hasattr(self, "scheduler"):
            return
        self.scheduler.check_consistency()
        expected = dict(self.base)
        for placement in self.scheduler.reservations.values():
            for share in placement.shares:
                expected[share.node_key] += share.gpus
        assert leased(self.scheduler) == expected


FleetLifecycle.TestCase.settings = settings(
    max_examples=100, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
test_fleet_lifecycle = FleetLifecycle.TestCase


def test_oracle_sees_a_placement_when_there_is_one() -> None:
    """The oracle itself is not vacuous: it finds the obvious placements."""
    from tests.scheduler.fleets import node, request

    fleet = [node("a", leased=4), node("b")]
    assert fewest_nodes(fleet, request(gpus=4)) == 1
    assert fewest_nodes(fleet, request(gpus=12)) == 2
    assert fewest_nodes(fleet, request(gpus=13)) is None
    assert fewest_nodes(fleet, request(gpus=8, gpus_per_node=4)) == 2
    assert isinstance(Scheduler(), Scheduler)
