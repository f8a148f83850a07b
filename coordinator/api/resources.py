"""The ledger's tables as API resources: one declaration drives the query, the checks and the OpenAPI document."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from coordinator.api.params import Param
from gpunet.events import EVENT_NAMES
from gpunet.limits import MAX_VERIFICATION_TIER

__all__ = ["PAGE", "RESOURCES", "Resource", "page_body"]

PAGE = (
    Param("limit", "integer", minimum=1, maximum=500, default=100, description="rows per page"),
    Param("offset", "integer", minimum=0, maximum=10**9, default=0, description="rows to skip"),
)


def page_body(rows: Sequence[Any], limit: int, offset: int) -> dict[str, Any]:
    """Every list's answer: a page of `rows` (up to `limit` + 1 of them, from `offset` on: one more than
    a page says another follows), and where the next page starts (null: none)."""
    return {
        "items": list(rows[:limit]),
        "limit": limit,
        "offset": offset,
        "next_offset": offset + limit if len(rows) > limit else None,
    }


_SLOTS = (
    Param("from_slot", "integer", "slot", ">=", description="only rows at or after this slot"),
    Param("to_slot", "integer", "slot", "<=", description="only rows at or before this slot"),
)


@dataclass(frozen=True)
class Resource:
    name: str
    table: str
    key: str | None  # the column /{name}/{key} looks up; None: no item route (pages come in chain order)
    filters: tuple[Param, ...]
    description: str


RESOURCES = {
    r.name: r
    for r in (
        Resource(
            "providers",
            "providers",
            "provider",
            (Param("authority", "pubkey", "authority", description="the supplier's wallet"),),
            "Suppliers: stake position, earnings, slashes.",
        ),
        Resource(
            "nodes",
            "nodes",
            "node",
            (
                Param("provider", "pubkey", "provider"),
                Param("gpu_model", "integer", "gpu_model", maximum=65535),
                Param("region", "integer", "region", maximum=65535),
                Param("jailed", "boolean", "jailed"),
                Param("draining", "boolean", "draining"),
                Param("registered", "boolean", "registered"),
                Param("verification_tier", "integer", "verification_tier", maximum=MAX_VERIFICATION_TIER),
            ),
            "GPU nodes and their offer, with how each was last verified (tier, until when, evidence hash).",
        ),
        Resource(
            "leases",
            "leases",
            "lease",
            (
                Param("client", "pubkey", "client"),
                Param("status", "choice", "status", choices=("open", "active", "closing", "closed")),
            ),
            "Leases with their escrow totals; an item also lists its assignments.",
        ),
        Resource(
            "assignments",
            "assignments",
            None,
            (
                Param("lease", "pubkey", "lease"),
                Param("node", "pubkey", "node"),
                Param("provider", "pubkey", "provider"),
                Param("active", "boolean", "active"),
            ),
            "Leases' shares on nodes, each lease's active ones first (a lease item lists its first page).",
        ),
        Resource(
            "settlements",
            "settlements",
            None,
            (
                Param("lease", "pubkey", "lease"),
                Param("node", "pubkey", "node"),
                Param("provider", "pubkey", "provider"),
                *_SLOTS,
            ),
            "Usage settlements, in chain order.",
        ),
        Resource(
            "slashes",
            "slashes",
            None,
            (
                Param("provider", "pubkey", "provider"),
                Param("node", "pubkey", "node"),
                Param("lease", "pubkey", "lease"),
                *_SLOTS,
            ),
            "Slashes, in chain order.",
        ),
        Resource(
            "stake_changes",
            "stake_changes",
            None,
            (
                Param("provider", "pubkey", "provider"),
                Param(
                    "kind", "choice", "kind", choices=("staked", "unstake_requested", "unstake_withdrawn", "slashed")
                ),
                *_SLOTS,
            ),
            "Every movement of stake, with the position after it.",
        ),
        Resource(
            "events",
            "events",
            None,
            (
                Param("name", "choice", "name", choices=EVENT_NAMES),
                Param("signature", "signature", "signature"),
                Param("lease", "pubkey", "lease"),
                Param("provider", "pubkey", "provider"),
                Param("after_id", "integer", "id", ">", description="only events after this id (keyset paging)"),
                *_SLOTS,
            ),
            "Every indexed gpunet event, in chain order.",
        ),
    )
}
