"""A lease's timeline from its events as the ledger indexed them: one row per event, in chain order,
each with its transaction; settlements checked against the program's rule (rule.py) and slashes
with the evidence this coordinator recorded for them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from coordinator.web.explorer.rule import FeeHistory, SettlementCheck, ShareBook

__all__ = ["Row", "timeline"]

# What each event is called on the page.
LABELS = {
    "LeaseOpened": "opened",
    "LeaseAssigned": "assigned",
    "LeaseToppedUp": "topped up",
    "UsageSettled": "settlement",
    "LeaseReassigned": "reassigned",
    "ProviderSlashed": "slash",
    "FeesSwept": "fees swept",
    "LeaseClosed": "closing",
    "LeaseFinalized": "finalized",
    "LeaseReclaimed": "reclaimed",
}


@dataclass
class Row:
    kind: str  # the event's name
    label: str
    signature: str
    block_time: int | None
    data: dict[str, Any]
    check: SettlementCheck | None = None  # a settlement's
    evidence: list[dict[str, Any]] = field(default_factory=list)  # a slash's, as recorded here


def timeline(events: list[dict[str, Any]], fees: FeeHistory, evidence: dict[str, list[dict[str, Any]]]) -> list[Row]:
    """`events`: the lease's, in chain order (queries.events_of); `evidence`: signature -> the
    slashes of that transaction with their recorded evidence (coordinator.db.nodes.slash_evidence)."""
    shares = ShareBook()
    rows = []
    for e in events:
        d = e["data"]
        row = Row(e["name"], LABELS.get(e["name"], e["name"]), e["signature"], e["block_time"], d)
        if e["name"] == "LeaseAssigned":
            for a in d["assignments"]:
                shares.assigned(a)
        elif e["name"] == "LeaseReassigned":
            shares.assigned(d["assignment"])
        elif e["name"] == "UsageSettled":
            row.check = shares.settle(d, fees.at(e["id"]))
        elif e["name"] == "ProviderSlashed":
            row.evidence = [s for s in evidence.get(e["signature"], []) if s["node"] == d["node"]]
        rows.append(row)
    return rows
