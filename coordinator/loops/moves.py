"""Moving one node's share of a lease to another node: what failover and drain both do."""

from __future__ import annotations

from solders.pubkey import Pubkey

from coordinator.attester import Attester
from coordinator.keys import NodeKey
from coordinator.scheduler import NotPlaced, PlacedShare, Placement, Scheduler

__all__ = ["move_share"]


async def move_share(
    scheduler: Scheduler, attester: Attester, lease: str, from_key: NodeKey
) -> tuple[Placement, PlacedShare] | str:
    """Moves `from_key`'s share of the lease to the best other qualifying node, in the scheduler and
    on chain (`reassign_lease`); the new placement and the share's new node, or why not (the
    scheduler's reservation is then left as it was)."""
    before = scheduler.reservation(lease)
    decision = scheduler.replace(lease, from_key)
    if isinstance(decision, NotPlaced):
        return f"no replacement yet: {decision.reason}"
    target = next(s for s in decision.shares if s.node_key not in before.node_keys)
    try:
        await attester.reassign(Pubkey.from_string(lease), from_key, target.to_sdk())
    except Exception as e:
        scheduler.release(lease)
        scheduler.restore(before)
        return f"reassign failed ({e}); retrying"
    return decision, target
