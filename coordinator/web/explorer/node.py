"""/web/nodes/{node account or node key}: a node's spec and status, its verification history with
the evidence (each challenge, its timing and verdict), its uptime as this coordinator saw it, the
faults recorded against it and its slashes, and its GPUs' telemetry when this coordinator runs."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from solders.pubkey import Pubkey
from starlette.requests import Request
from starlette.responses import Response

from coordinator.db import chain as ledger
from coordinator.db import verifications
from coordinator.db.chain import plain_row
from coordinator.web import page
from coordinator.web.explorer import queries
from coordinator.web.explorer.common import BadAddress, error_page, parse_address, simulated_nodes
from gpunet import instructions as ix
from gpunet.catalog import gpu_model_name, region_name

if TYPE_CHECKING:
    import asyncpg

    from coordinator.service import Coordinator
    from coordinator.settings import Settings

__all__ = ["node_page"]

TIERS = {
    ix.TIER_UNVERIFIED: "unverified",
    ix.TIER_SIMULATED: "simulated",
    ix.TIER_GPU: "GPU",
    ix.TIER_CONFIDENTIAL: "confidential computing",
}


@dataclass(frozen=True)
class Uptime:
    """The share of the time this coordinator has watched the node (since it first heard from it, at
    most the fleet's memory of 24 h) that the node was online: heartbeating, each beat covering the
    gateway's reach after it. Kept in memory: a restarted coordinator starts counting again."""

    online_seconds: int
    watched_seconds: int

    @property
    def percent(self) -> str:
        return f"{100 * self.online_seconds / self.watched_seconds:.1f} %" if self.watched_seconds else "—"


def _status(node: dict[str, Any], online: bool | None, now: float) -> str:
    if not node["registered"]:
        return "deregistered"
    if node["jailed"] and node["jail_ends_at"] > now:
        return "jailed"
    if node["draining"]:
        return "draining"
    if node["gpus_leased"]:
        return "leased"
    if online is None:
        return "registered"  # no coordinator here to say whether it is online
    return "online" if online else "offline"


def node_page(
    pool: asyncpg.Pool, settings: Settings, coordinator: Coordinator | None
) -> Callable[[Request], Awaitable[Response]]:
    async def handler(request: Request) -> Response:
        try:
            key = str(parse_address(request.path_params["key"], "node"))
        except BadAddress as e:
            return error_page(request, settings, 400, "Not a node address", str(e))
        async with pool.acquire() as conn:
            row = await ledger.row(conn, "nodes", "node", key) or await ledger.row(conn, "nodes", "node_key", key)
            if row is None:
                return error_page(
                    request, settings, 404, "No such node", f"no node with node account or node key {key} in the ledger"
                )
            node = plain_row(row)
            history = [dict(r) for r in await verifications.of_node(conn, node["node_key"])]
            faults = await queries.node_faults(conn, node["node_key"])
            slashes = [plain_row(r) for r in await ledger.page(conn, "slashes", [("node", "=", node["node"])], 100, 0)]
            simulated = bool(await simulated_nodes(conn, [node["node_key"]]))
        now = time.time()
        node_key = Pubkey.from_string(node["node_key"])
        online: bool | None = None
        uptime = telemetry = None
        if coordinator is not None:
            fleet = coordinator.fleet
            online = fleet.online(node_key)
            seen = fleet.nodes.get(node_key)
            if seen is not None and seen.intervals:
                first = seen.intervals[0][0]
                uptime = Uptime(fleet.online_seconds(node_key, first, now), int(now - first))
            telemetry = coordinator.shared.telemetry.get(node_key)
        return page(
            request,
            "node.html",
            settings,
            node=node,
            model=gpu_model_name(node["gpu_model"]),
            region=region_name(node["region"]),
            tier=TIERS.get(node["verification_tier"], f"tier {node['verification_tier']}"),
            status=_status(node, online, now),
            online=online,
            simulated=simulated,
            history=history,
            faults=faults,
            slashes=slashes,
            uptime=uptime,
            telemetry=telemetry,
        )

    return handler
