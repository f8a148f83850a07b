"""Random fleets and requests for the scheduler tests, and a brute-force oracle to judge them.

The oracle restates the chain's rules (assign_lease.rs, Node::meets, Provider::is_collateralised)
from the raw fields, independently of the scheduler's own predicates.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import combinations

from hypothesis import strategies as st

from coordinator.scheduler import (
    MAX_LEASE_NODES,
    LeaseRequest,
    NodeView,
    Placement,
    Scheduler,
)
from gpunet.amounts import IO
from gpunet.instructions import LeaseTerms

H100, A100 = 1, 3
US_EAST, EU_WEST = 1, 3


def node(
    name: str,
    *,
    model: int = H100,
    gpus: int = 8,
    leased: int = 0,
    vram: int = 80,
    region: int = EU_WEST,
    price: float = 2.0,
    online: bool = True,
    **extra: object,
) -> NodeView:
    """A staked, online node whose node key is `name` (its account and provider derive from it)."""
    fields: dict[str, object] = {
        "node": f"pda-{name}",
        "provider_authority": f"wallet-{name}",
        "provider_staked": 100 * IO,
        "provider_bonded": 8 * IO,
        "bonded_stake": 8 * IO,
    }
    fields.update(extra)
    return NodeView(
        node_key=name,
        gpu_model=model,
        gpu_count=gpus,
        gpus_leased=leased,
        vram_gb=vram,
        region=region,
        price_per_gpu_hour=int(price * IO),
        online=online,
        **fields,
    )  # type: ignore[arg-type]


def request(
    lease: str = "lease-1",
    *,
    model: int = H100,
    vram: int = 80,
    gpus: int = 4,
    region: int = EU_WEST,
    max_price: float = 2.0,
    max_nodes: int = MAX_LEASE_NODES,
    gpus_per_node: int | None = None,
) -> LeaseRequest:
    terms = LeaseTerms(model, vram, gpus, region, int(max_price * IO), 3_600)
    return LeaseRequest(lease, terms, max_nodes=max_nodes, gpus_per_node=gpus_per_node)


def scheduler_of(nodes: Iterable[NodeView], **kwargs: object) -> Scheduler:
    scheduler = Scheduler(**kwargs)  # type: ignore[arg-type]
    for view in nodes:
        scheduler.upsert_node(view)
    return scheduler


def leased(scheduler: Scheduler) -> dict[str, int]:
    return {name: view.gpus_leased for name, view in scheduler.nodes.items()}


# -- hypothesis strategies -------------------------------------------------------------------------


@st.composite
def node_views(draw: st.DrawFn, name: str) -> NodeView:
    gpus = draw(st.sampled_from([1, 2, 4, 8, 8, 16]))
    bonded = draw(st.integers(0, 4)) * IO
    return NodeView(
        node=f"pda-{name}",
        node_key=name,
        provider_authority=f"wallet-{name}",
        gpu_model=draw(st.sampled_from([H100, A100])),
        gpu_count=gpus,
        gpus_leased=draw(st.integers(0, gpus)),
        vram_gb=draw(st.sampled_from([40, 80])),
        region=draw(st.sampled_from([US_EAST, EU_WEST])),
        price_per_gpu_hour=draw(st.sampled_from([1, 2, 3])) * IO,
        bonded_stake=bonded,
        provider_staked=draw(st.sampled_from([0, 1, 4, 8])) * IO,  # sometimes below the bond: slashed
        provider_bonded=bonded,
        jailed=draw(st.integers(0, 3)) == 0,
        draining=draw(st.integers(0, 4)) == 0,
        verified=draw(st.integers(0, 5)) > 0,
        online=draw(st.integers(0, 4)) > 0,
        healthy=draw(st.integers(0, 6)) > 0,
        simulated=draw(st.booleans()),
        latency_ms=draw(st.one_of(st.none(), st.sampled_from([1.0, 20.0, 150.0, 2_000.0]))),
        live_gpus=draw(st.one_of(st.none(), st.integers(0, gpus))),  # its worker may run fewer than registered
        completed_shares=draw(st.integers(0, 5)),
        failed_shares=draw(st.integers(0, 5)),
    )


@st.composite
def fleets(draw: st.DrawFn, max_nodes: int = 8) -> list[NodeView]:
    size = draw(st.integers(0, max_nodes))
    return [draw(node_views(f"node-{i:02d}")) for i in range(size)]


@st.composite
def lease_requests(draw: st.DrawFn, lease: str = "lease-1") -> LeaseRequest:
    max_nodes = draw(st.integers(1, MAX_LEASE_NODES))
    count = draw(st.integers(1, min(40, 16 * max_nodes)))
    splits = [g for g in range(1, 17) if count % g == 0 and count // g <= max_nodes]
    per_node = draw(st.one_of(st.none(), st.sampled_from(splits))) if splits else None
    terms = LeaseTerms(
        draw(st.sampled_from([0, H100, A100])),
        draw(st.sampled_from([0, 40, 80])),
        count,
        draw(st.sampled_from([0, US_EAST, EU_WEST])),
        draw(st.sampled_from([1, 2, 3])) * IO,
        3_600,
    )
    return LeaseRequest(lease, terms, max_nodes=max_nodes, gpus_per_node=per_node)


# -- the oracle ------------------------------------------------------------------------------------


def free(view: NodeView) -> int:
    """GPUs a node can take new work on, recomputed: registered and running (its worker's live
    inventory, when it reported one), less those leased."""
    running = view.gpu_count if view.live_gpus is None else min(view.gpu_count, view.live_gpus)
    return max(0, running - view.gpus_leased)


def qualifies(view: NodeView, req: LeaseRequest, accept_simulated: bool = True) -> bool:
    """Would assign_lease accept this node for some share of the lease, and is it live?"""
    t = req.terms
    return (
        view.online
        and view.healthy
        and not view.jailed
        and not view.draining
        and view.verified
        and view.provider_staked >= view.provider_bonded
        and (accept_simulated or not view.simulated)
        and t.gpu_model in (0, view.gpu_model)
        and t.region in (0, view.region)
        and view.vram_gb >= t.min_vram_gb
        and view.price_per_gpu_hour <= t.max_price_per_gpu_hour
        and free(view) > 0
    )


def fewest_nodes(nodes: Iterable[NodeView], req: LeaseRequest, exclude: Iterable[str] = ()) -> int | None:
    """The fewest nodes any valid placement needs, or None when none exists (exhaustive search)."""
    skip = set(exclude)
    able = [v for v in nodes if qualifies(v, req) and v.node_key not in skip]
    count, per_node = req.gpu_count, req.gpus_per_node
    if per_node is not None:
        k = count // per_node
        return k if sum(1 for v in able if free(v) >= per_node) >= k else None
    for size in range(1, min(req.max_nodes, len(able), count) + 1):
        for combo in combinations(able, size):
            # size nodes can take count GPUs, >= 1 each, iff their free GPUs add up to count.
            if sum(free(v) for v in combo) >= count:
                return size
    return None


def violations(placement: Placement, fleet: dict[str, NodeView]) -> list[str]:
    """Every way the placement breaks what assign_lease (and the request's shape) demands."""
    req, shares = placement.request, placement.shares
    found = []
    if not 1 <= len(shares) <= min(MAX_LEASE_NODES, req.max_nodes):
        found.append(f"{len(shares)} shares")
    if sum(s.gpus for s in shares) != req.gpu_count:
        found.append("shares do not sum to gpu_count")
    if len({s.node_key for s in shares}) != len(shares):
        found.append("a node twice")
    for s in shares:
        view = fleet[s.node_key]
        if s.gpus < 1 or s.gpus > free(view):
            found.append(f"{s.node_key}: {s.gpus} GPUs, {free(view)} free")
        if not qualifies(view, req):
            found.append(f"{s.node_key} does not qualify")
        if req.gpus_per_node is not None and s.gpus != req.gpus_per_node:
            found.append(f"{s.node_key}: share of {s.gpus}, not {req.gpus_per_node}")
        if (s.node_key, s.provider_authority, s.price_per_gpu_hour) != (
            view.node_key,
            view.provider_authority,
            view.price_per_gpu_hour,
        ):
            found.append(f"{s.node_key}: share names the wrong key, provider or price")
    return found


@st.composite
def cluster_cases(draw: st.DrawFn) -> tuple[list[NodeView], LeaseRequest]:
    """Live H100 fleets that differ only in free GPUs, price and history, with a lease sized
    near what they can hold: the cases where splitting, node counts and ranking matter."""
    size = draw(st.integers(1, 10))
    fleet = []
    for i in range(size):
        gpus = draw(st.sampled_from([2, 4, 8, 16]))
        fleet.append(
            node(
                f"node-{i:02d}",
                gpus=gpus,
                leased=draw(st.integers(0, gpus)),
                price=draw(st.sampled_from([1.0, 1.5, 2.0])),
                latency_ms=draw(st.one_of(st.none(), st.sampled_from([5.0, 80.0]))),
                failed_shares=draw(st.integers(0, 3)),
            )
        )
    free_gpus = sum(free(v) for v in fleet)
    max_nodes = draw(st.integers(1, MAX_LEASE_NODES))
    count = draw(st.integers(1, max(1, min(free_gpus + 2, 16 * max_nodes))))
    splits = [g for g in range(1, 17) if count % g == 0 and count // g <= max_nodes]
    per_node = draw(st.one_of(st.none(), st.sampled_from(splits))) if splits else None
    return fleet, request(gpus=count, max_nodes=max_nodes, gpus_per_node=per_node)
