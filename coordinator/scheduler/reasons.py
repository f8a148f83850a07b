"""Why a lease cannot be placed, in words a client can act on (the slow path: only on failure)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable
from decimal import Decimal

from coordinator.scheduler.model import Address, LeaseRequest, NodeView
from gpunet.catalog import gpu_model_name, region_name
from gpunet.instructions import ANY
from gpunet.tokens import IO_DECIMALS

__all__ = ["describe", "explain", "io_amount"]

# The first filter a node fails names its group, in this order.
_GROUPS = (
    "already in the lease",
    "in another region",
    "offline",
    "unhealthy",
    "jailed",
    "draining",
    "not verified",
    "under-collateralised",
    "simulated",
    "short of VRAM",
    "above the price",
    "short of registered GPUs",
    "fully leased",
)


_NO_CEILING = 2**64 - 1


def io_amount(base_units: int) -> str:
    """Base units as IO, exactly: 2_000_000 -> '2', 1_500_000 -> '1.5'."""
    return format(Decimal(base_units).scaleb(-IO_DECIMALS).normalize(), "f")


def describe(request: LeaseRequest, gpus: int | None = None) -> str:
    """'4 H100 GPUs with >= 80 GB in eu-west at <= 2 IO/GPU-hour on up to 8 nodes'."""
    t = request.terms
    count = t.gpu_count if gpus is None else gpus
    model = "" if t.gpu_model == ANY else f" {gpu_model_name(t.gpu_model)}"
    text = f"{count}{model} GPU{'s' if count > 1 else ''}"
    if t.min_vram_gb:
        text += f" with >= {t.min_vram_gb} GB"
    if t.region != ANY:
        text += f" in {region_name(t.region)}"
    if t.max_price_per_gpu_hour < _NO_CEILING:  # a quote without a maximum price asks none
        text += f" at <= {io_amount(t.max_price_per_gpu_hour)} IO/GPU-hour"
    if gpus is None:
        if request.gpus_per_node is not None:
            text += f" as {t.gpu_count // request.gpus_per_node} nodes x {request.gpus_per_node} GPUs"
        elif request.max_nodes == 1:
            text += " on one node"
        else:
            text += f" on up to {request.max_nodes} nodes"
    return text


def _group(view: NodeView, request: LeaseRequest, accept_simulated: bool, exclude: Collection[Address]) -> str | None:
    """The first filter (in _GROUPS order) the node fails, or None if it qualifies."""
    t = request.terms
    if view.node_key in exclude:
        return "already in the lease"
    if t.region != ANY and view.region != t.region:
        return "in another region"
    if not view.online:
        return "offline"
    if not view.healthy:
        return "unhealthy"
    if view.jailed:
        return "jailed"
    if view.draining:
        return "draining"
    if not view.verified:
        return "not verified"
    if not view.is_collateralised():
        return "under-collateralised"
    if view.simulated and not accept_simulated:
        return "simulated"
    if view.vram_gb < t.min_vram_gb:
        return "short of VRAM"
    if view.price_per_gpu_hour > t.max_price_per_gpu_hour:
        return "above the price"
    if view.free_gpus == 0:
        return "short of registered GPUs" if view.missing_gpus else "fully leased"
    return None


def explain(
    nodes: Iterable[NodeView],
    request: LeaseRequest,
    accept_simulated: bool,
    exclude: Collection[Address] = (),
    gpus: int | None = None,
    elsewhere: int = 0,
) -> str:
    """`nodes`: at least every node of the requested model in its region; `elsewhere`: how many
    more of the model are in other regions; `gpus`: the one share being replaced, if so."""
    t = request.terms
    what = "" if t.gpu_model == ANY else f"{gpu_model_name(t.gpu_model)} "
    head = f"cannot place {describe(request, gpus)}"
    groups: Counter[str] = Counter({"in another region": elsewhere})
    qualifying: list[int] = []
    short = 0  # qualifying nodes whose worker runs fewer GPUs than registered (free only of those it runs)
    seen = elsewhere
    for view in nodes:
        if t.gpu_model != ANY and view.gpu_model != t.gpu_model:
            continue
        seen += 1
        group = _group(view, request, accept_simulated, exclude)
        if group is None:
            qualifying.append(view.free_gpus)
            short += view.missing_gpus > 0
        else:
            groups[group] += 1
    if not seen:
        return f"{head}: no {what}node is registered"
    parts = [f"{groups[g]} {g}" for g in _GROUPS if groups[g]]
    text = f"{head}: of {seen} {what}node{'s' if seen > 1 else ''}, " + (", ".join(parts) + "; " if parts else "")
    qualifying.sort(reverse=True)
    if not qualifying:
        return text + "none qualifies"
    text += f"{len(qualifying)} qualif{'y' if len(qualifying) > 1 else 'ies'}"
    if short:
        text += f" ({short} running fewer GPUs than {'they' if short > 1 else 'it'} registered)"
    if gpus is not None:
        return text + f", the most free GPUs on one is {qualifying[0]}"
    if request.gpus_per_node is not None:
        g = request.gpus_per_node
        able = sum(1 for free in qualifying if free >= g)
        return text + f", {able} with >= {g} free GPUs ({t.gpu_count // g} needed)"
    best = sum(qualifying[: request.max_nodes])
    nodes_word = "one node" if request.max_nodes == 1 else f"the best {request.max_nodes} nodes"
    return text + f" with {sum(qualifying)} free GPUs in all, {best} on {nodes_word}"
