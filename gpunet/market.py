"""Which registered nodes could take a lease, read from the chain alone: the check a client makes
before escrowing, and, when no node can, the closest ones and what keeps each from the lease.

The rules are those `assign_lease` applies (programs/gpunet/src/instructions/assign_lease.rs):
model, VRAM, region and price (`Node::meets`), not jailed, not draining, 1..=MAX_LEASE_NODES
distinct nodes. Whether a node is online, healthy or real (not simulated) only the coordinator knows,
and a provider's collateral is not read here, so "could take" is necessary, never sufficient."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from solana.rpc.async_api import AsyncClient
from solders.pubkey import Pubkey

from gpunet import catalog
from gpunet.accounts import program_accounts
from gpunet.amounts import format_io
from gpunet.limits import ANY, MAX_LEASE_NODES

__all__ = ["Miss", "NodeFit", "Reach", "describe_node", "describe_terms", "lease_reach", "reach"]


@dataclass(frozen=True)
class Miss:
    """One thing that keeps a node from a lease, and the lease option that would change it."""

    option: str  # e.g. "--region"; "" when only the node's supplier can change it (jailed, draining)
    text: str


@dataclass(frozen=True)
class NodeFit:
    address: Pubkey
    node: Any  # the decoded Node account
    misses: tuple[Miss, ...]  # empty when the node could take (a share of) the lease

    @property
    def gpus(self) -> int:
        return self.node.spec.gpu_count


@dataclass(frozen=True)
class Reach:
    """What the registered nodes offer a lease."""

    terms: Any
    fits: tuple[NodeFit, ...]  # the nodes that could take a share, most GPUs first
    gpus: int  # the most GPUs the lease could get (its MAX_LEASE_NODES largest fitting nodes)
    closest: tuple[NodeFit, ...]  # nodes that miss, fewest misses first, then cheapest
    nodes: int  # registered nodes looked at

    @property
    def possible(self) -> bool:
        return self.gpus >= self.terms.gpu_count


def describe_terms(terms: Any) -> str:
    model = "any GPU" if terms.gpu_model == ANY else catalog.gpu_model_name(terms.gpu_model)
    region = "any region" if terms.region == ANY else catalog.region_name(terms.region)
    return (
        f"{terms.gpu_count}x {model} >= {terms.min_vram_gb} GB in {region} at <= "
        f"{format_io(terms.max_price_per_gpu_hour)}/GPU-hour"
    )


def describe_node(fit: NodeFit) -> str:
    spec = fit.node.spec
    return (
        f"node {fit.node.node_key}: {spec.gpu_count}x {catalog.gpu_model_name(spec.gpu_model)} {spec.vram_gb} GB "
        f"in {catalog.region_name(spec.region)} at {format_io(spec.price_per_gpu_hour)}/GPU-hour"
    )


def _misses(node: Any, terms: Any, free_now: bool) -> tuple[Miss, ...]:
    spec, found = node.spec, []
    if terms.gpu_model != ANY and spec.gpu_model != terms.gpu_model:
        found.append(
            Miss("--gpu", f"{catalog.gpu_model_name(spec.gpu_model)}, not {catalog.gpu_model_name(terms.gpu_model)}")
        )
    if spec.vram_gb < terms.min_vram_gb:
        found.append(Miss("--vram", f"{spec.vram_gb} GB per GPU, under {terms.min_vram_gb} GB"))
    if terms.region != ANY and spec.region != terms.region:
        found.append(
            Miss("--region", f"in {catalog.region_name(spec.region)}, not {catalog.region_name(terms.region)}")
        )
    if spec.price_per_gpu_hour > terms.max_price_per_gpu_hour:
        found.append(
            Miss(
                "--max-price",
                f"asks {format_io(spec.price_per_gpu_hour)}/GPU-hour, over {format_io(terms.max_price_per_gpu_hour)}",
            )
        )
    if node.deregistered_at:
        found.append(Miss("", "deregistered (its supplier took it off the market)"))
    if node.jailed:
        found.append(Miss("", "jailed (until its supplier unjails it)"))
    if node.draining:
        found.append(Miss("", "draining (its supplier's maintenance)"))
    if free_now and not found and node.gpus_leased >= spec.gpu_count:
        found.append(Miss("", f"all its {spec.gpu_count} GPUs are leased now"))
    return tuple(found)


def reach(nodes: list[tuple[Pubkey, Any]], terms: Any, *, free_now: bool = False, closest: int = 3) -> Reach:
    """What `nodes` offer a lease with `terms`; with `free_now`, counting only GPUs not leased now
    (why an open lease waits), otherwise every GPU (whether it could ever be placed)."""
    judged = [NodeFit(address, node, _misses(node, terms, free_now)) for address, node in nodes]
    fits = sorted((f for f in judged if not f.misses), key=lambda f: -_usable(f, free_now))
    near = sorted(
        (f for f in judged if f.misses), key=lambda f: (len(f.misses), f.node.spec.price_per_gpu_hour, bytes(f.address))
    )
    gpus = sum(_usable(f, free_now) for f in fits[:MAX_LEASE_NODES])
    return Reach(terms, tuple(fits), gpus, tuple(near[:closest]), len(judged))


def _usable(fit: NodeFit, free_now: bool) -> int:
    return fit.gpus - fit.node.gpus_leased if free_now else fit.gpus


async def lease_reach(client: AsyncClient, terms: Any, *, free_now: bool = False) -> Reach:
    """`reach` over every Node account on the cluster."""
    return reach(await program_accounts(client, "Node"), terms, free_now=free_now)
