"""The derived tables (providers, stake changes, nodes, leases, assignments, settlements, slashes)
as a fold over gpunet events, in memory.

The indexer preloads the rows a batch of events touches, applies the events in chain order
and writes back what changed; the audit applies a lease's or a provider's events to nothing
and compares the result with the tables and the chain. One fold, so both agree on what an
event means. A row the events need but nobody loaded (an audit of one lease does not load
its nodes) is left alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["TABLE_KEYS", "IndexedEvent", "Ledger"]

Row = dict[str, Any]

# A node's verification as the chain has it before any, or once cleared (the 32-byte evidence hash in hex).
_UNVERIFIED: Row = {"verification_tier": 0, "verified_until": 0, "verification_evidence": "00" * 32}

# Primary key columns of the tables the fold keeps rows of.
TABLE_KEYS: dict[str, tuple[str, ...]] = {
    "providers": ("provider",),
    "nodes": ("node",),
    "leases": ("lease",),
    "assignments": ("lease", "node"),
}


@dataclass(frozen=True)
class IndexedEvent:
    signature: str
    event_index: int
    slot: int
    block_time: int | None
    name: str
    data: dict[str, Any]


@dataclass
class Ledger:
    providers: dict[str, Row] = field(default_factory=dict)
    nodes: dict[str, Row] = field(default_factory=dict)
    leases: dict[str, Row] = field(default_factory=dict)
    assignments: dict[tuple[str, str], Row] = field(default_factory=dict)
    # Append-only tables: the rows this fold added.
    stake_changes: list[Row] = field(default_factory=list)
    settlements: list[Row] = field(default_factory=list)
    slashes: list[Row] = field(default_factory=list)
    # (table, key) of every row changed, to write back.
    dirty: set[tuple[str, Any]] = field(default_factory=set)

    def apply(self, event: IndexedEvent) -> None:
        handler = _HANDLERS.get(event.name)
        if handler is not None:
            handler(self, event, event.data)

    # --- row access

    def _get(self, table: str, key: Any, event: IndexedEvent) -> Row | None:
        row = getattr(self, table).get(key)
        if row is not None:
            row["signature"] = event.signature
            self.dirty.add((table, key))
        return row

    def _put(self, table: str, key: Any, row: Row, event: IndexedEvent) -> None:
        row["signature"] = event.signature
        getattr(self, table)[key] = row
        self.dirty.add((table, key))

    def _stake_change(self, e: IndexedEvent, provider: Row, kind: str, amount: int) -> None:
        self.stake_changes.append(
            {
                "signature": e.signature,
                "event_index": e.event_index,
                "provider": provider["provider"],
                "kind": kind,
                "amount": amount,
                "staked": provider["staked"],
                "unbonding": provider["unbonding"],
                "slot": e.slot,
            }
        )

    def _take_gpus(self, e: IndexedEvent, lease: str, a: dict[str, Any]) -> None:
        self._put(
            "assignments",
            (lease, a["node"]),
            {
                "lease": lease,
                "node": a["node"],
                "node_key": a["node_key"],
                "provider": a["provider"],
                "gpus": a["gpus"],
                "price_per_gpu_hour": a["price_per_gpu_hour"],
                "epoch": a["epoch"],
                "assigned_at": a["assigned_at"],
                "settled_until": a["settled_until"],
                "receipt_gpu_seconds": a["receipt_gpu_seconds"],
                "gpu_seconds": a["gpu_seconds"],
                "active": True,
                "assigned_by": e.signature,  # the share's epoch (row["signature"] moves on with each change)
            },
            e,
        )
        if (node := self._get("nodes", a["node"], e)) is not None:
            node["gpus_leased"] += a["gpus"]

    def _release_gpus(self, e: IndexedEvent, lease: str, node_account: str) -> None:
        share = self._get("assignments", (lease, node_account), e)
        if share is None:
            return
        share["active"] = False
        if (node := self._get("nodes", node_account, e)) is not None:
            node["gpus_leased"] -= share["gpus"]


# --- one handler per event that changes a derived table (config events live in `events` only)


def _provider_registered(ledger: Ledger, e: IndexedEvent, d: dict[str, Any]) -> None:
    ledger._put(
        "providers",
        d["provider"],
        {
            "provider": d["provider"],
            "authority": d["authority"],
            "staked": 0,
            "bonded": 0,
            "unbonding": 0,
            "unbonding_ends_at": 0,
            "slashed": 0,
            "earned": 0,
            "node_count": 0,
        },
        e,
    )


def _staked(ledger: Ledger, e: IndexedEvent, d: dict[str, Any]) -> None:
    if (p := ledger._get("providers", d["provider"], e)) is not None:
        p["staked"] = d["staked"]
        ledger._stake_change(e, p, "staked", d["amount"])


def _unstake_requested(ledger: Ledger, e: IndexedEvent, d: dict[str, Any]) -> None:
    if (p := ledger._get("providers", d["provider"], e)) is not None:
        p.update(staked=d["staked"], unbonding=d["unbonding"], unbonding_ends_at=d["unbonding_ends_at"])
        ledger._stake_change(e, p, "unstake_requested", d["amount"])


def _unstake_withdrawn(ledger: Ledger, e: IndexedEvent, d: dict[str, Any]) -> None:
    if (p := ledger._get("providers", d["provider"], e)) is not None:
        p["unbonding"] = 0
        ledger._stake_change(e, p, "unstake_withdrawn", d["amount"])


def _node_registered(ledger: Ledger, e: IndexedEvent, d: dict[str, Any]) -> None:
    spec = d["spec"]
    ledger._put(
        "nodes",
        d["node"],
        {
            "node": d["node"],
            "provider": d["provider"],
            "node_key": d["node_key"],
            "gpu_model": spec["gpu_model"],
            "gpu_count": spec["gpu_count"],
            "vram_gb": spec["vram_gb"],
            "region": spec["region"],
            "price_per_gpu_hour": spec["price_per_gpu_hour"],
            "inventory_hash": spec["inventory_hash"],
            "bonded_stake": d["bonded_stake"],
            "gpus_leased": 0,
            "jailed": False,
            "jail_ends_at": 0,
            "registered": True,
            "draining": False,
            **_UNVERIFIED,
        },
        e,
    )
    if (p := ledger._get("providers", d["provider"], e)) is not None:
        p["bonded"] += d["bonded_stake"]
        p["node_count"] += 1


def _node_updated(ledger: Ledger, e: IndexedEvent, d: dict[str, Any]) -> None:
    if (n := ledger._get("nodes", d["node"], e)) is not None:
        if d["inventory_hash"] != n["inventory_hash"]:  # the program clears a changed inventory's verification
            n.update(_UNVERIFIED)
        n.update(region=d["region"], price_per_gpu_hour=d["price_per_gpu_hour"], inventory_hash=d["inventory_hash"])


def _node_deregistered(ledger: Ledger, e: IndexedEvent, d: dict[str, Any]) -> None:
    # It takes no more leases; its stake stays bonded (and slashable) until NodeReleased.
    if (n := ledger._get("nodes", d["node"], e)) is not None:
        n["registered"] = False


def _node_released(ledger: Ledger, e: IndexedEvent, d: dict[str, Any]) -> None:
    if (p := ledger._get("providers", d["provider"], e)) is not None:
        p["bonded"] -= d["released_stake"]
        p["node_count"] -= 1


def _node_unjailed(ledger: Ledger, e: IndexedEvent, d: dict[str, Any]) -> None:
    if (n := ledger._get("nodes", d["node"], e)) is not None:
        n["jailed"] = False


def _node_draining_set(ledger: Ledger, e: IndexedEvent, d: dict[str, Any]) -> None:
    if (n := ledger._get("nodes", d["node"], e)) is not None:
        n["draining"] = d["draining"]


def _node_verified(ledger: Ledger, e: IndexedEvent, d: dict[str, Any]) -> None:
    if (n := ledger._get("nodes", d["node"], e)) is not None:
        n.update(verification_tier=d["tier"], verified_until=d["valid_until"], verification_evidence=d["evidence_hash"])


def _lease_opened(ledger: Ledger, e: IndexedEvent, d: dict[str, Any]) -> None:
    ledger._put(
        "leases",
        d["lease"],
        {
            "lease": d["lease"],
            "client": d["client"],
            "lease_id": d["lease_id"],
            **d["terms"],
            "status": "open",
            "started_at": 0,
            "deposited": d["deposit"],
            "paid": 0,
            "fees": 0,
            "fees_swept": 0,
            "refunded": 0,
            "donations": 0,
            "nodes": [],
            "downtime_tolerance_seconds": d.get("downtime_tolerance_seconds", 0),
        },
        e,
    )


def _lease_assigned(ledger: Ledger, e: IndexedEvent, d: dict[str, Any]) -> None:
    if (lease := ledger._get("leases", d["lease"], e)) is not None:
        lease.update(status="active", started_at=d["started_at"], nodes=[a["node"] for a in d["assignments"]])
    for a in d["assignments"]:
        ledger._take_gpus(e, d["lease"], a)


def _lease_topped_up(ledger: Ledger, e: IndexedEvent, d: dict[str, Any]) -> None:
    if (lease := ledger._get("leases", d["lease"], e)) is not None:
        lease["deposited"] = d["deposited"]
        lease["duration_seconds"] += d["extra_seconds"]


def _lease_reassigned(ledger: Ledger, e: IndexedEvent, d: dict[str, Any]) -> None:
    to = d["assignment"]
    ledger._release_gpus(e, d["lease"], d["from_node"])
    ledger._take_gpus(e, d["lease"], to)
    if (lease := ledger._get("leases", d["lease"], e)) is not None:
        lease["nodes"] = [to["node"] if n == d["from_node"] else n for n in lease["nodes"]]


def _usage_settled(ledger: Ledger, e: IndexedEvent, d: dict[str, Any]) -> None:
    if (lease := ledger._get("leases", d["lease"], e)) is not None:
        lease["paid"] += d["payout"]
        lease["fees"] += d["fee"]
    if (share := ledger._get("assignments", (d["lease"], d["node"]), e)) is not None:
        share.update(
            settled_until=d["through"],
            receipt_gpu_seconds=d["receipt_gpu_seconds"],
            gpu_seconds=share["gpu_seconds"] + d["gpu_seconds"],
        )
    # The provider's lifetime earnings: no account counts them (a settlement writes no shared
    # account), the events do.
    if (p := ledger._get("providers", d["provider"], e)) is not None:
        p["earned"] += d["payout"]
    ledger.settlements.append(
        {
            "signature": e.signature,
            "event_index": e.event_index,
            "slot": e.slot,
            "block_time": e.block_time,
            **{k: d[k] for k in _SETTLEMENT_FIELDS},
        }
    )


def _lease_closed(ledger: Ledger, e: IndexedEvent, d: dict[str, Any]) -> None:
    """Closed for use: the nodes are free; usage up to the close may still be settled."""
    if (lease := ledger._get("leases", d["lease"], e)) is None:
        return
    lease["status"] = "closing"
    lease["refunded"] += d["refund"]
    for node in lease["nodes"]:
        ledger._release_gpus(e, d["lease"], node)


def _lease_finalized(ledger: Ledger, e: IndexedEvent, d: dict[str, Any]) -> None:
    if (lease := ledger._get("leases", d["lease"], e)) is not None:
        lease["status"] = "closed"
        lease["refunded"] += d["refund"]
        lease["donations"] += d["donations"]
        lease["fees_swept"] += d["fees_to_treasury"]


def _fees_swept(ledger: Ledger, e: IndexedEvent, d: dict[str, Any]) -> None:
    if (lease := ledger._get("leases", d["lease"], e)) is not None:
        lease["fees_swept"] = d["fees_swept"]


def _provider_slashed(ledger: Ledger, e: IndexedEvent, d: dict[str, Any]) -> None:
    amount = d["amount"]
    if (p := ledger._get("providers", d["provider"], e)) is not None:
        # Of the supplier's own stake (the rest came from its pool's rewards and delegators) the
        # program takes active stake first, then unbonding stake.
        own = d["from_own"]
        from_active = min(own, p["staked"])
        p["staked"] -= from_active
        p["unbonding"] -= own - from_active
        p["slashed"] += amount
        ledger._stake_change(e, p, "slashed", amount)
    if (n := ledger._get("nodes", d["node"], e)) is not None:
        n.update(jailed=True, jail_ends_at=d["jail_ends_at"])
        if d["fault"] == "FailedVerification":  # the program clears the failed node's verification
            n.update(_UNVERIFIED)
    ledger.slashes.append(
        {
            "signature": e.signature,
            "event_index": e.event_index,
            "slot": e.slot,
            "block_time": e.block_time,
            **{k: d[k] for k in _SLASH_FIELDS},
        }
    )


_SETTLEMENT_FIELDS = (
    "lease",
    "node",
    "provider",
    "epoch",
    "receipt_gpu_seconds",
    "through",
    "gpu_seconds",
    "amount",
    "payout",
    "fee",
    "escrow_left",
)
_SLASH_FIELDS = (
    "provider",
    "node",
    "attester",
    "fault",
    "evidence_hash",
    "amount",
    "to_treasury",
    "to_client",
    "lease",
    "jail_ends_at",
)

_HANDLERS: dict[str, Callable[[Ledger, IndexedEvent, dict[str, Any]], None]] = {
    "ProviderRegistered": _provider_registered,
    "Staked": _staked,
    "UnstakeRequested": _unstake_requested,
    "UnstakeWithdrawn": _unstake_withdrawn,
    "NodeRegistered": _node_registered,
    "NodeUpdated": _node_updated,
    "NodeDeregistered": _node_deregistered,
    "NodeReleased": _node_released,
    "NodeUnjailed": _node_unjailed,
    "NodeDrainingSet": _node_draining_set,
    "NodeVerified": _node_verified,
    "LeaseOpened": _lease_opened,
    "LeaseAssigned": _lease_assigned,
    "LeaseToppedUp": _lease_topped_up,
    "LeaseReassigned": _lease_reassigned,
    "UsageSettled": _usage_settled,
    "FeesSwept": _fees_swept,
    "LeaseClosed": _lease_closed,
    "LeaseFinalized": _lease_finalized,
    "ProviderSlashed": _provider_slashed,
}
