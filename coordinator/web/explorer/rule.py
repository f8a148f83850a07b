"""Each settlement checked against the program's rule (gpunet.amounts.settle, the SDK's copy of
math.rs): from the lease's own events, the share's price (fixed at its assignment), the GPU-seconds
the share was paid for before, the protocol fee in force (the config's last change before it) and
the escrow left before it, the rule gives the amount, fee and payout the event must carry.

A settlement whose inputs the ledger does not have (a share never assigned in it, no config event
before it) is "unknown", never "checked": an unchecked row says so."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpunet.amounts import SettlementSplit, settle, usage_cost

__all__ = ["FeeHistory", "SettlementCheck", "ShareBook", "check_settlement"]


@dataclass(frozen=True)
class SettlementCheck:
    status: str  # "checked" (the event is what the rule gives), "mismatch", or "unknown"
    reason: str
    price_per_gpu_hour: int | None = None
    fee_bps: int | None = None
    settled_before: int = 0  # the share's GPU-seconds paid for before this settlement
    expected: SettlementSplit | None = None
    cost: int | None = None  # GPU-seconds x price (the cumulative rounding's), before the escrow's cap


def check_settlement(
    event: dict[str, Any], price: int | None, settled_before: int, fee_bps: int | None
) -> SettlementCheck:
    """`event`: a UsageSettled event's data (integers in base units and GPU-seconds)."""
    if price is None:
        return SettlementCheck("unknown", "the share's assignment (its price) is not in the ledger")
    if fee_bps is None:
        return SettlementCheck("unknown", "no config event before it gives the protocol fee", price)
    gpu_seconds, amount = int(event["gpu_seconds"]), int(event["amount"])
    # The program capped the amount by the escrow left before it: the event's escrow_left is after it.
    escrow_before = int(event["escrow_left"]) + amount
    expected = settle(price, settled_before, gpu_seconds, fee_bps, escrow_before)
    cost = usage_cost(price, settled_before + gpu_seconds) - usage_cost(price, settled_before)
    found = SettlementSplit(amount, int(event["payout"]), int(event["fee"]))
    differs = [
        f"{k} {getattr(found, k)} (the rule: {getattr(expected, k)})"
        for k in ("amount", "fee", "payout")
        if getattr(found, k) != getattr(expected, k)
    ]
    # a pooled supplier's delegators get a part of the payout, never more (their stake at the time,
    # which sets the part, is not in the event: the provider's audit recomputes the stake vault)
    if (to_pool := int(event["to_pool"])) > found.payout:
        differs.append(f"to_pool {to_pool} exceeds the payout {found.payout}")
    if not differs:
        return SettlementCheck("checked", "as the program's rule gives", price, fee_bps, settled_before, expected, cost)
    return SettlementCheck("mismatch", "; ".join(differs), price, fee_bps, settled_before, expected, cost)


class FeeHistory:
    """The protocol fee in force at each event: the config's initialisation and each update, in chain
    order (event ids follow chain order)."""

    def __init__(self, changes: list[tuple[int, int]]) -> None:  # (event id, protocol_fee_bps)
        self.changes = sorted(changes)

    def at(self, event_id: int) -> int | None:
        fee = None
        for changed_at, bps in self.changes:
            if changed_at >= event_id:
                break
            fee = bps
        return fee


class ShareBook:
    """A lease's shares as its events set them: each (node, epoch)'s price and the GPU-seconds paid
    for so far (each assignment, a reassignment too, is a new epoch that starts at zero, as in the program)."""

    def __init__(self) -> None:
        self.price: dict[tuple[str, int], int] = {}
        self.paid: dict[tuple[str, int], int] = {}

    def assigned(self, assignment: dict[str, Any]) -> None:
        key = (assignment["node"], int(assignment["epoch"]))
        self.price[key] = int(assignment["price_per_gpu_hour"])

    def settle(self, event: dict[str, Any], fee_bps: int | None) -> SettlementCheck:
        key = (event["node"], int(event["epoch"]))
        before = self.paid.get(key, 0)
        self.paid[key] = before + int(event["gpu_seconds"])
        return check_settlement(event, self.price.get(key), before, fee_bps)
