"""Bad input gets a clear SchedulerError and changes nothing."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest

from coordinator.scheduler import (
    InvalidLeaseRequest,
    InvalidNodeView,
    LeaseRequest,
    NodeBusy,
    Placement,
    StalePlacement,
    UnknownLease,
    UnknownNode,
)
from gpunet.instructions import LeaseTerms
from tests.scheduler.fleets import node, request, scheduler_of


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"gpu_model": 0}, "gpu_model=0"),  # ANY is never a node's model (NodeSpec::is_valid)
        ({"region": 0}, "region=0"),
        ({"gpu_count": 17}, "gpu_count=17"),
        ({"bonded_stake": -1}, "bonded_stake=-1"),
        ({"price_per_gpu_hour": 0}, "price_per_gpu_hour=0"),
        ({"vram_gb": 2.5}, "vram_gb=2.5"),
        ({"online": 1}, "online must be a bool"),
        ({"latency_ms": -1.0}, "latency_ms=-1.0"),
        ({"provider_authority": ""}, "provider_authority must be"),
    ],
)
def test_a_node_the_chain_could_not_hold_is_refused(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidNodeView, match=message):
        dataclasses.replace(node("a"), **changes)
    scheduler = scheduler_of([node("a", leased=2)])
    before = copy.deepcopy(dict(scheduler.nodes))
    with pytest.raises(InvalidNodeView, match=message):
        scheduler.update_node("a", **changes)
    assert dict(scheduler.nodes) == before
    scheduler.check_consistency()


def test_updates_that_would_break_the_books_are_refused() -> None:
    with pytest.raises(InvalidNodeView, match="gpus_leased=9"):
        node("a", leased=9)
    scheduler = scheduler_of([node("a", leased=6)])
    before = copy.deepcopy(dict(scheduler.nodes))
    with pytest.raises(InvalidNodeView, match="not updatable"):
        scheduler.update_node("a", gpus_leased=0)
    with pytest.raises(InvalidNodeView, match="not updatable"):
        scheduler.update_node("a", node_key="b")
    with pytest.raises(InvalidNodeView, match="gpus_leased=6 is not an integer in \\[0, 4\\]"):
        scheduler.update_node("a", gpu_count=4)
    with pytest.raises(InvalidNodeView, match="below its 6 leased GPUs"):
        scheduler.upsert_node(node("a", gpus=4))
    with pytest.raises(InvalidNodeView, match="unexpected keyword"):
        scheduler.update_node("a", colour="red")
    with pytest.raises(UnknownNode, match="no node b"):
        scheduler.update_node("b", online=False)
    assert dict(scheduler.nodes) == before


@pytest.mark.parametrize(
    "terms, shape, message",
    [
        (LeaseTerms(1, 80, 0, 3, 1, 60), {}, "gpu_count=0"),
        (LeaseTerms(1, 80, 129, 3, 1, 60), {}, "gpu_count=129"),
        (LeaseTerms(1, 80, 4, 3, 0, 60), {}, "max_price_per_gpu_hour=0"),
        (LeaseTerms(1, 80, 4, 3, 1, 0), {}, "duration_seconds=0"),
        (LeaseTerms(1, 2**16, 4, 3, 1, 60), {}, "min_vram_gb=65536"),
        (LeaseTerms(1, 80, 4, 3, 1, 60), {"max_nodes": 9}, "max_nodes=9"),
        (LeaseTerms(1, 80, 17, 3, 1, 60), {"max_nodes": 1}, "17 GPUs cannot fit on 1 node"),
        (LeaseTerms(1, 80, 12, 3, 1, 60), {"gpus_per_node": 5}, "gpus_per_node=5 must"),
        (LeaseTerms(1, 80, 12, 3, 1, 60), {"gpus_per_node": 2, "max_nodes": 4}, "6 shares of 2 GPUs exceed"),
    ],
)
def test_a_lease_the_chain_would_refuse_is_refused(terms: LeaseTerms, shape: dict[str, int], message: str) -> None:
    with pytest.raises(InvalidLeaseRequest, match=message):
        LeaseRequest("lease-1", terms, **shape)


def test_reservations_refuse_what_assign_lease_would_refuse() -> None:
    scheduler = scheduler_of([node("a"), node("b")])
    decision = scheduler.place(request(gpus=8))
    assert isinstance(decision, Placement)
    share = decision.shares[0]
    bad = [
        (dataclasses.replace(decision, shares=(share, share)), "2 shares on 1 distinct nodes"),
        (dataclasses.replace(decision, shares=(dataclasses.replace(share, gpus=7),)), "do not sum to 8"),
        (dataclasses.replace(decision, shares=(dataclasses.replace(share, node_key="zz"),)), "zz is not in the fleet"),
        (dataclasses.replace(decision, request=request(gpus=8, max_price=1.0)), "no longer qualifies"),
    ]
    for placement, message in bad:
        with pytest.raises(StalePlacement, match=message):
            scheduler.reserve(placement)
    assert {v.gpus_leased for v in scheduler.nodes.values()} == {0}
    scheduler.reserve(decision)
    with pytest.raises(StalePlacement, match="already reserved"):
        scheduler.reserve(decision)
    with pytest.raises(StalePlacement, match="has 0 free GPUs"):
        scheduler.reserve(dataclasses.replace(decision, request=request("lease-2", gpus=8)))
    with pytest.raises(NodeBusy, match="lease-1"):
        scheduler.remove_node(share.node_key)
    with pytest.raises(UnknownLease):
        scheduler.release("lease-2")
    with pytest.raises(UnknownNode, match="holds no share"):
        scheduler.replace("lease-1", "b" if share.node_key == "a" else "a")
    assert scheduler.reservations == {"lease-1": decision}
    scheduler.check_consistency()
