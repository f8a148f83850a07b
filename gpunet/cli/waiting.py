"""Why a lease cannot be placed, in words a client can act on: the numbers, the closest nodes and
what keeps each from the lease, and which `lease open` option to change."""

from __future__ import annotations

from gpunet.limits import MAX_LEASE_NODES
from gpunet.market import Reach, describe_node, describe_terms


def why_not(r: Reach) -> str:
    """Why the nodes `r` looked at cannot take the lease (assumes `not r.possible`)."""
    wants = f"it asks {describe_terms(r.terms)}"
    if r.nodes == 0:
        return f"{wants}, and no node is registered on this cluster"
    if r.fits:
        return (
            f"{wants}; the {len(r.fits)} matching node(s) have {r.gpus} GPUs in all "
            f"(a lease takes at most {MAX_LEASE_NODES} nodes)"
        )
    near = "; ".join(f"{describe_node(f)} ({', '.join(m.text for m in f.misses)})" for f in r.closest)
    return f"{wants}; none of the {r.nodes} registered node(s) matches; the closest: {near}"


def what_to_change(r: Reach) -> str:
    """The `lease open` options that would let the nodes take it (assumes `not r.possible`)."""
    if r.nodes == 0:
        return "wait until a supplier registers a node (`gpunet node list`)"
    if r.fits:
        return f"ask for --count {r.gpus} or fewer"
    options = sorted({m.option for m in r.closest[0].misses if m.option})
    if not options:
        return "the closest nodes are jailed, draining or busy: try again later (`gpunet node list`)"
    return f"change {', '.join(options)} to what the closest node offers (`gpunet node list` shows them all)"
