"""Placement decisions on small hand-made fleets: what wins, what is refused, and the reason given."""

from __future__ import annotations

from solders.keypair import Keypair

from coordinator.scheduler import NotPlaced, PlacedShare, Placement, Scheduler, StalePlacement
from gpunet.amounts import IO
from gpunet.instructions import ANY, Share
from tests.scheduler.fleets import A100, US_EAST, leased, node, request, scheduler_of


def placed(decision: Placement | NotPlaced) -> list[tuple[str, int]]:
    assert isinstance(decision, Placement), decision.reason  # type: ignore[union-attr]
    return [(s.node_key, s.gpus) for s in decision.shares]


def refused(decision: Placement | NotPlaced) -> str:
    assert isinstance(decision, NotPlaced), f"placed on {decision.node_keys}"  # type: ignore[union-attr]
    return decision.reason


def test_an_exact_fit_wins_over_a_whole_machine_at_the_same_price() -> None:
    scheduler = scheduler_of([node("whole"), node("half-used", leased=4)])
    assert placed(scheduler.place(request(gpus=4))) == [("half-used", 4)]


def test_a_much_cheaper_node_outweighs_the_packing_penalty() -> None:
    # One GPU left free costs 25 % of the price; this node is 50 % cheaper.
    scheduler = scheduler_of([node("exact", leased=4, price=2.0), node("cheap", leased=3, price=1.0)])
    assert placed(scheduler.place(request(gpus=4))) == [("cheap", 4)]


def test_reliability_and_latency_break_a_price_tie() -> None:
    flaky = node("a-flaky", completed_shares=5, failed_shares=5)
    steady = node("b-steady", completed_shares=10)
    assert placed(scheduler_of([flaky, steady]).place(request(gpus=8))) == [("b-steady", 8)]
    far, near = node("a-far", latency_ms=400.0), node("b-near", latency_ms=10.0)
    assert placed(scheduler_of([far, near]).place(request(gpus=8))) == [("b-near", 8)]


def test_equal_nodes_are_chosen_by_address() -> None:
    assert placed(scheduler_of([node("n2"), node("n1"), node("n3")]).place(request(gpus=8))) == [("n1", 8)]


def test_a_large_lease_takes_the_fewest_nodes_whole_machines_first() -> None:
    scheduler = scheduler_of([node("eight-a"), node("eight-b"), node("four-a", leased=4), node("two", leased=6)])
    assert placed(scheduler.place(request(gpus=12))) == [("eight-a", 8), ("four-a", 4)]
    assert placed(scheduler.place(request(gpus=10))) == [("eight-a", 8), ("two", 2)]


def test_a_cluster_lease_is_all_or_nothing() -> None:
    scheduler = scheduler_of([node(f"m{i}") for i in range(3)] + [node("busy", leased=1)])
    before = leased(scheduler)
    reason = refused(scheduler.place(request(gpus=32, gpus_per_node=8)))
    assert reason == (
        "cannot place 32 H100 GPUs with >= 80 GB in eu-west at <= 2 IO/GPU-hour as 4 nodes x 8 GPUs: "
        "of 4 H100 nodes, 4 qualify, 3 with >= 8 free GPUs (4 needed)"
    )
    assert leased(scheduler) == before
    scheduler.upsert_node(node("m3"))
    decision = scheduler.place(request(gpus=32, gpus_per_node=8))
    assert isinstance(decision, Placement)
    assert placed(decision) == [("m0", 8), ("m1", 8), ("m2", 8), ("m3", 8)]
    scheduler.update_node("m2", jailed=True)  # slashed before the reservation
    try:
        scheduler.reserve(decision)
    except StalePlacement as e:
        assert "m2 no longer qualifies" in str(e)
    else:
        raise AssertionError("reserved a placement with a jailed node")
    assert leased(scheduler) == {**before, "m3": 0} and not scheduler.reservations


def test_the_reason_counts_why_nodes_of_the_model_do_not_qualify() -> None:
    fleet = [
        node("off-1", online=False),
        node("off-2", online=False),
        node("off-3", online=False),
        node("jailed", jailed=True),
        node("slashed", provider_staked=1 * IO),  # staked below its bond
        node("sick", healthy=False),
        node("small", vram=40),
        node("dear", price=3.0),
        node("full", leased=8),
        node("elsewhere", region=US_EAST),
        node("a100", model=A100),
    ]
    reason = refused(scheduler_of(fleet).place(request(gpus=4)))
    assert reason == (
        "cannot place 4 H100 GPUs with >= 80 GB in eu-west at <= 2 IO/GPU-hour on up to 8 nodes: "
        "of 10 H100 nodes, 1 in another region, 3 offline, 1 unhealthy, 1 jailed, "
        "1 under-collateralised, 1 short of VRAM, 1 above the price, 1 fully leased; none qualifies"
    )
    assert refused(Scheduler().place(request(model=A100, max_price=1.5))) == (
        "cannot place 4 A100 GPUs with >= 80 GB in eu-west at <= 1.5 IO/GPU-hour on up to 8 nodes: "
        "no A100 node is registered"
    )


def test_simulated_gpus_only_where_accepted() -> None:
    fleet = [node("sim", simulated=True)]
    assert placed(scheduler_of(fleet).place(request(gpus=2))) == [("sim", 2)]
    production = scheduler_of([node("sim", simulated=True)], accept_simulated=False)
    assert refused(production.place(request(gpus=2))).endswith("of 1 H100 node, 1 simulated; none qualifies")


def test_reserve_release_and_failover_keep_the_books() -> None:
    scheduler = scheduler_of([node("a"), node("b"), node("c", leased=4), node("d", price=1.5)])
    decision = scheduler.place(request(gpus=16, gpus_per_node=8))
    assert isinstance(decision, Placement)
    assert placed(decision) == [("d", 8), ("a", 8)]
    scheduler.reserve(decision)
    scheduler.update_node("d", online=False)
    moved = scheduler.replace("lease-1", "d")
    assert placed(moved) == [("b", 8), ("a", 8)]  # the share keeps its index, as on chain
    assert leased(scheduler) == {"a": 8, "b": 8, "c": 4, "d": 0}
    reason = refused(scheduler.replace("lease-1", "b"))
    assert reason == (
        "cannot place 8 H100 GPUs with >= 80 GB in eu-west at <= 2 IO/GPU-hour: of 4 H100 nodes, "
        "2 already in the lease, 1 offline; 1 qualifies, the most free GPUs on one is 4"
    )
    assert scheduler.reservation("lease-1") == moved and leased(scheduler)["b"] == 8
    scheduler.release("lease-1")
    assert leased(scheduler) == {"a": 0, "b": 0, "c": 4, "d": 0}
    scheduler.check_consistency()


def test_a_node_update_keeps_the_scheduler_s_lease_count() -> None:
    scheduler = scheduler_of([node("a")])
    scheduler.reserve(scheduler.place(request(gpus=6)))  # type: ignore[arg-type]
    scheduler.upsert_node(node("a", price=1.0))  # fresh chain facts: new price, leased=0 in the event
    assert scheduler.nodes["a"].gpus_leased == 6 and scheduler.nodes["a"].price_per_gpu_hour == IO
    assert placed(scheduler.place(request("lease-2", gpus=2))) == [("a", 2)]
    scheduler.check_consistency()


def test_a_placement_already_on_chain_is_restored_without_liveness_checks() -> None:
    live = scheduler_of([node("a"), node("b")])
    decision = live.place(request(gpus=16))
    restarted = scheduler_of([node("a", online=False), node("b", online=False)])  # no sessions yet
    restarted.restore(decision)  # type: ignore[arg-type]
    assert leased(restarted) == {"a": 8, "b": 8}
    restarted.check_consistency()


def test_shares_convert_to_the_sdk_s_assign_lease_shares() -> None:
    key, wallet = Keypair().pubkey(), Keypair().pubkey()
    scheduler = scheduler_of([node(str(key), provider_authority=str(wallet))])
    decision = scheduler.place(request(gpus=3))
    assert isinstance(decision, Placement)
    assert decision.sdk_shares() == [Share(key, wallet, 3, decision.shares[0].price_per_gpu_hour)]


def test_history_moves_a_node_down_the_ranking() -> None:
    scheduler = scheduler_of([node("a"), node("b")])
    assert placed(scheduler.place(request(gpus=8))) == [("a", 8)]
    scheduler.record_outcome("a", completed=False)
    scheduler.record_outcome("b", completed=True)
    assert placed(scheduler.place(request(gpus=8))) == [("b", 8)]
    assert (scheduler.nodes["a"].failed_shares, scheduler.nodes["b"].completed_shares) == (1, 1)
    scheduler.check_consistency()


def test_a_node_that_changes_model_and_region_or_leaves_is_found_only_where_it_is() -> None:
    scheduler = scheduler_of([node("a"), node("b", region=US_EAST)])
    scheduler.upsert_node(node("a", region=US_EAST, model=A100))
    assert refused(scheduler.place(request(gpus=8))) == (
        "cannot place 8 H100 GPUs with >= 80 GB in eu-west at <= 2 IO/GPU-hour on up to 8 nodes: "
        "of 1 H100 node, 1 in another region; none qualifies"
    )
    assert placed(scheduler.place(request(gpus=16, model=ANY, region=US_EAST))) == [("a", 8), ("b", 8)]
    scheduler.remove_node("b")
    assert refused(scheduler.place(request(gpus=8, region=US_EAST))) == (
        "cannot place 8 H100 GPUs with >= 80 GB in us-east at <= 2 IO/GPU-hour on up to 8 nodes: "
        "no H100 node is registered"
    )
    assert sorted(scheduler.nodes) == ["a"]
    scheduler.check_consistency()


def test_a_draining_node_gets_no_new_share_and_undraining_restores_it() -> None:
    scheduler = scheduler_of([node("a-draining", draining=True), node("b-control")])
    # the cheaper-by-address draining node would win; it is skipped, the control takes the lease
    assert placed(scheduler.place(request(gpus=8))) == [("b-control", 8)]
    assert refused(scheduler.place(request(gpus=16))).endswith(
        "1 draining; 1 qualifies with 8 free GPUs in all, 8 on the best 8 nodes"
    )
    # nor is it a failover target: a share leaving the control finds no spare
    decision = scheduler.place(request(gpus=8))
    scheduler.reserve(decision)
    assert "1 draining" in refused(scheduler.replace("lease-1", "b-control"))
    scheduler.update_node("a-draining", draining=False)  # maintenance over
    moved = scheduler.replace("lease-1", "b-control")
    assert isinstance(moved, Placement) and moved.node_keys == ("a-draining",)
    scheduler.check_consistency()


def test_a_node_not_verified_gets_no_share_and_the_reason_says_so() -> None:
    scheduler = scheduler_of([node("a-unverified", verified=False), node("b-control")])
    assert placed(scheduler.place(request(gpus=8))) == [("b-control", 8)]
    assert refused(scheduler.place(request(gpus=16))).endswith(
        "1 not verified; 1 qualifies with 8 free GPUs in all, 8 on the best 8 nodes"
    )
    scheduler.update_node("a-unverified", verified=True)  # its GPUs proved what was registered
    assert placed(scheduler.place(request(gpus=16))) == [("a-unverified", 8), ("b-control", 8)]
    scheduler.check_consistency()


def test_a_node_is_placed_only_on_the_gpus_its_worker_runs() -> None:
    # Registered with 8, its worker reports 4 (a cheat, or GPUs lost): never placed on the other 4.
    short = scheduler_of([node("a-short", live_gpus=4), node("b-control", live_gpus=8)])
    assert placed(short.place(request(gpus=8, max_nodes=1))) == [("b-control", 8)]  # the control: all it runs
    assert refused(short.place(request(gpus=16))).endswith(
        "2 qualify (1 running fewer GPUs than it registered) with 12 free GPUs in all, 12 on the best 8 nodes"
    )
    assert placed(short.place(request(gpus=4, max_nodes=1))) == [("a-short", 4)]  # what it runs, it may take
    # A placement the chain already holds is restored on what the node registered (it is moved, not lost).
    restarted = scheduler_of([node("a-short", live_gpus=0)])
    restarted.restore(Placement(request(gpus=8), (PlacedShare.of(node("a-short"), 8),)))
    assert leased(restarted) == {"a-short": 8}
    short.check_consistency()
    restarted.check_consistency()


def test_a_waiting_lease_is_explained_again_only_when_the_fleet_changed_in_what_decides() -> None:
    """The placement loop retries every waiting lease on every step; working out why one waits walks
    every node of its model, so the same NotPlaced comes back while nothing that decides changed."""
    scheduler = scheduler_of([node("small", gpus=4), node("away", online=False)])
    waiting = scheduler.place(request(gpus=8))
    assert refused(waiting).startswith("cannot place 8 H100 GPUs")
    assert scheduler.place(request(gpus=8)) is waiting
    scheduler.update_node("small", latency_ms=250.0)  # ranks it, cannot make it qualify
    scheduler.record_outcome("small", completed=True)
    assert scheduler.place(request(gpus=8)) is waiting
    # the control: facts that decide each bring a fresh decision, and the lease is placed once it can be
    scheduler.update_node("small", healthy=False)
    again = scheduler.place(request(gpus=8))
    assert again is not waiting and refused(again)
    scheduler.upsert_node(node("late", gpus=2, leased=2))
    assert scheduler.place(request(gpus=8)) is not again
    scheduler.update_node("away", online=True)
    assert placed(scheduler.place(request(gpus=8))) == [("away", 8)]


def test_a_waiting_lease_is_placed_on_the_gpus_a_closed_lease_frees() -> None:
    scheduler = scheduler_of([node("only")])
    scheduler.reserve(scheduler.place(request("first", gpus=8)))  # type: ignore[arg-type]
    waiting = scheduler.place(request("second", gpus=8))
    assert refused(waiting) and scheduler.place(request("second", gpus=8)) is waiting
    scheduler.release("first")
    assert placed(scheduler.place(request("second", gpus=8))) == [("only", 8)]
