"""gpunet.market.reach: which nodes could take a lease, by assign_lease's rules, without a chain."""

from __future__ import annotations

from types import SimpleNamespace

from solders.pubkey import Pubkey

from gpunet import instructions as ix
from gpunet.amounts import IO
from gpunet.limits import MAX_LEASE_NODES
from gpunet.market import reach

H100, A100, US_EAST, EU_WEST = 1, 3, 1, 3


def _node(
    gpus: int = 1,
    model: int = H100,
    vram: int = 80,
    region: int = US_EAST,
    price: int = 2 * IO,
    leased: int = 0,
    jailed: bool = False,
    draining: bool = False,
    deregistered_at: int = 0,
) -> tuple[Pubkey, SimpleNamespace]:
    key = Pubkey.new_unique()
    spec = SimpleNamespace(gpu_model=model, gpu_count=gpus, vram_gb=vram, region=region, price_per_gpu_hour=price)
    return key, SimpleNamespace(
        node_key=key, spec=spec, gpus_leased=leased, jailed=jailed, draining=draining, deregistered_at=deregistered_at
    )


def _terms(gpus: int, model: int = H100, region: int = ix.ANY, price: int = 3 * IO, vram: int = 0) -> ix.LeaseTerms:
    return ix.LeaseTerms(model, vram, gpus, region, price, 3600)


def test_a_lease_spans_at_most_max_lease_nodes_nodes() -> None:
    ones = [_node(gpus=1) for _ in range(MAX_LEASE_NODES + 1)]
    assert reach(ones, _terms(MAX_LEASE_NODES)).possible
    too_many = reach(ones, _terms(MAX_LEASE_NODES + 1))
    assert not too_many.possible and too_many.gpus == MAX_LEASE_NODES  # 9 GPUs exist, 8 nodes at most


def test_jailed_draining_and_deregistered_nodes_never_count_and_leased_gpus_count_only_for_ever() -> None:
    nodes = [_node(gpus=4, jailed=True), _node(gpus=4, draining=True), _node(gpus=4, leased=4)]
    assert reach(nodes, _terms(4)).gpus == 4, "the leased node could take it once free"
    now = reach(nodes, _terms(4), free_now=True)
    assert now.gpus == 0 and [m.text for f in now.closest for m in f.misses][-1] == "all its 4 GPUs are leased now"
    # a deregistered node keeps its account, bonded, until released: it is off the market all the same
    gone = reach([_node(gpus=4, deregistered_at=1_750_000_000)], _terms(4))
    assert gone.gpus == 0 and [m.text for f in gone.closest for m in f.misses] == [
        "deregistered (its supplier took it off the market)"
    ]


def test_the_closest_nodes_come_first_with_what_keeps_each_away() -> None:
    near = _node(region=EU_WEST)  # one miss
    far = _node(model=A100, region=EU_WEST, price=9 * IO)  # three misses
    r = reach([far, near], _terms(1, region=US_EAST))
    assert not r.possible and [f.address for f in r.closest] == [near[0], far[0]]
    assert [(m.option, m.text) for m in r.closest[0].misses] == [("--region", "in eu-west, not us-east")]
    assert [m.option for m in r.closest[1].misses] == ["--gpu", "--region", "--max-price"]
