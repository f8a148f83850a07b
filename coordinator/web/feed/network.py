"""The network page (/web/): GPUs and nodes by model and region, verified or not, online and leased,
and their prices. The offer, the GPUs leased and the verification are the chain's (the ledger's
nodes); online and simulated are what this coordinator's gateway hears from the workers now (a
replica that does not lead holds no worker sessions, and the page says online is unknown)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from solders.pubkey import Pubkey

from coordinator.db import feed as ledger
from coordinator.db.connection import Connection
from coordinator.db.explorer import simulated_nodes
from coordinator.view import verification_status
from gpunet.catalog import gpu_model_name, region_name

if TYPE_CHECKING:
    from coordinator.service import Coordinator

__all__ = ["Group", "Network", "NodeState", "network"]


@dataclass(frozen=True)
class NodeState:
    node: str
    node_key: str
    provider: str
    model: str
    region: str
    gpus: int
    vram_gb: int
    price_per_gpu_hour: int
    leased: int
    verification: str  # verified, unverified or failed (coordinator.view.verification_status)
    online: bool | None  # None: this replica does not hold the worker sessions
    simulated: bool
    jailed: bool
    draining: bool


@dataclass
class Group:
    """The nodes of one model, region, or model in a region, summed."""

    label: str
    nodes: int = 0
    gpus: int = 0
    verified: int = 0
    simulated: int = 0
    online: int | None = 0  # None once a node's online state is unknown
    leased: int = 0
    prices: list[int] = field(default_factory=list)  # per GPU-hour, one per node

    def add(self, n: NodeState) -> None:
        self.nodes += 1
        self.gpus += n.gpus
        self.verified += n.gpus if n.verification == "verified" else 0
        self.simulated += n.gpus if n.simulated else 0
        self.online = None if self.online is None or n.online is None else self.online + (n.gpus if n.online else 0)
        self.leased += n.leased
        self.prices.append(n.price_per_gpu_hour)

    @property
    def min_price(self) -> int | None:
        return min(self.prices, default=None)

    @property
    def max_price(self) -> int | None:
        return max(self.prices, default=None)


@dataclass
class Network:
    nodes: list[NodeState]
    total: Group
    by_model: list[Group]
    by_region: list[Group]
    by_model_region: list[Group]
    online_known: bool
    settlements: int
    settled_gpu_seconds: int
    settled_amount: int


def _grouped(nodes: list[NodeState], label: str) -> list[Group]:
    groups: dict[str, Group] = {}
    for n in nodes:
        name = {"model": n.model, "region": n.region}.get(label, f"{n.model} · {n.region}")
        groups.setdefault(name, Group(name)).add(n)
    return sorted(groups.values(), key=lambda g: (-g.gpus, g.label))


async def network(conn: Connection, coordinator: Coordinator | None) -> Network:
    rows = await ledger.network_nodes(conn)
    simulated = await simulated_nodes(conn, [r["node_key"] for r in rows])
    totals = await ledger.settlement_totals(conn)
    # Only the leading replica holds the workers' sessions; a follower's fleet is empty, not offline.
    live = coordinator if coordinator is not None and coordinator.leading else None
    now = time.time()
    nodes = []
    for r in rows:
        key = Pubkey.from_string(r["node_key"])
        seen = live.fleet.nodes.get(key) if live else None
        nodes.append(
            NodeState(
                node=r["node"],
                node_key=r["node_key"],
                provider=r["provider"],
                model=gpu_model_name(r["gpu_model"]),
                region=region_name(r["region"]),
                gpus=r["gpu_count"],
                vram_gb=r["vram_gb"],
                price_per_gpu_hour=int(r["price_per_gpu_hour"]),
                leased=r["gpus_leased"],
                verification=verification_status(
                    r["verification_tier"], r["verified_until"], now, bool(live and key in live.shared.unfit)
                ),
                online=live.fleet.online(key) if live else None,
                # as the explorer's pages mark them, or its worker says so now (verified or not yet)
                simulated=r["node_key"] in simulated or bool(seen and seen.simulated),
                jailed=r["jailed"],
                draining=r["draining"],
            )
        )
    total = Group("all")
    for n in nodes:
        total.add(n)
    return Network(
        nodes=nodes,
        total=total,
        by_model=_grouped(nodes, "model"),
        by_region=_grouped(nodes, "region"),
        by_model_region=_grouped(nodes, "model and region"),
        online_known=live is not None,
        settlements=totals["count"],
        settled_gpu_seconds=int(totals["gpu_seconds"]),
        settled_amount=int(totals["amount"]),
    )
