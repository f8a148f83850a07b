"""The scheduler's view of the fleet, rebuilt from the ledger (registered nodes, their providers'
stake, their reliability history) and the gateway's liveness on every pass of the loops that
place or move shares. Placements already on chain are restored into it, so it never gives the
same GPUs twice, even after a restart."""

from __future__ import annotations

import contextlib
import time

import asyncpg
from solders.pubkey import Pubkey

from coordinator.db import leases as ledger
from coordinator.db.connection import Connection
from coordinator.db.nodes import registered_nodes
from coordinator.fleet import Fleet
from coordinator.scheduler import LeaseRequest, NodeView, PlacedShare, Placement, SchedulerError
from coordinator.state import Shared, WorkerLink
from gpunet.catalog import gpu_model_name
from gpunet.logs import get_logger
from gpunet.protocol import Inventory

__all__ = ["FleetView", "live_gpus", "verification_status"]

log = get_logger("gpunet.coordinator.view")


# NVML reports a GPU's memory a little under its nominal size (the driver keeps some): an 80 GB H100
# shows about 79.6 GiB. A GPU with less than this share of the registered VRAM does not count.
VRAM_REPORTED_SHARE = 0.95


def live_gpus(inventory: Inventory | None, gpu_model: int, vram_gb: int, gpu_count: int) -> int | None:
    """How many of its `gpu_count` registered GPUs (model, VRAM each) the worker reports running
    (None: it has reported none yet)."""
    if inventory is None:
        return None
    model, least_mib = gpu_model_name(gpu_model), vram_gb * 1024 * VRAM_REPORTED_SHARE
    return min(gpu_count, sum(1 for g in inventory.gpus if g.model == model and g.vram_mib >= least_mib))


def verification_status(tier: int, verified_until: int, now: float, unfit: bool) -> str:
    """What clients and the explorer are shown: failed (found unfit or failing by this coordinator),
    verified (a tier on chain, not run out), else unverified."""
    if unfit:
        return "failed"
    return "verified" if tier > 0 and verified_until > now else "unverified"


class FleetView:
    def __init__(self, shared: Shared, fleet: Fleet, link: WorkerLink) -> None:
        self.shared, self.fleet, self.link = shared, fleet, link

    async def refresh(self, conn: Connection) -> None:
        scheduler, fleet, now = self.shared.scheduler, self.fleet, time.time()
        rows = await registered_nodes(conn)
        for r in rows:
            key = Pubkey.from_string(r["node_key"])
            seen = fleet.nodes.get(key)
            scheduler.upsert_node(
                NodeView(
                    node=Pubkey.from_string(r["node"]),
                    node_key=key,
                    provider_authority=Pubkey.from_string(r["authority"]),
                    gpu_model=r["gpu_model"],
                    gpu_count=r["gpu_count"],
                    vram_gb=r["vram_gb"],
                    region=r["region"],
                    price_per_gpu_hour=int(r["price_per_gpu_hour"]),
                    gpus_leased=0,  # the scheduler counts reservations itself (restored below)
                    bonded_stake=int(r["bonded_stake"]),
                    provider_staked=int(r["staked"]),
                    provider_bonded=int(r["bonded"]),
                    jailed=r["jailed"],
                    draining=r["draining"],
                    online=fleet.online(key),
                    healthy=fleet.healthy(key),
                    verified=self._verified(key, r, now),
                    verification=self._verification(key, r, now),
                    simulated=bool(seen and seen.simulated),
                    latency_ms=self.link.latency_ms(key),
                    live_gpus=live_gpus(self.shared.inventories.get(key), r["gpu_model"], r["vram_gb"], r["gpu_count"]),
                    completed_shares=r["completed"],
                    failed_shares=r["failed"],
                )
            )
        registered = {Pubkey.from_string(r["node_key"]) for r in rows}
        for gone in [k for k in scheduler.nodes if k not in registered]:  # deregistered meanwhile
            with contextlib.suppress(SchedulerError):
                scheduler.remove_node(gone)
        # Leases assigned on chain that the scheduler does not hold (placed before a restart).
        by_lease: dict[str, list[ledger.ActiveShare]] = {}
        for share in await ledger.active_shares(conn):
            by_lease.setdefault(share.lease, []).append(share)
        for lease, shares in by_lease.items():
            if lease in scheduler.reservations or lease in self.shared.failovers:
                continue
            try:
                placed = tuple(PlacedShare.of(scheduler.nodes[s.node_key], s.gpus) for s in shares)
                scheduler.restore(Placement(LeaseRequest(lease, shares[0].terms), placed))
            except (KeyError, SchedulerError) as e:
                log.warning("placement.restore_failed", lease=lease, error=str(e))

    def _verified(self, key: Pubkey, node: asyncpg.Record, now: float) -> bool:
        """The node's GPUs are verified as the cluster requires (its config's tier, recorded on chain
        and not run out), and nothing this process found since says otherwise."""
        if key in self.shared.unfit:
            return False
        required = self.shared.required_tier
        return required == 0 or (node["verification_tier"] >= required and node["verified_until"] > now)

    def _verification(self, key: Pubkey, node: asyncpg.Record, now: float) -> str:
        return verification_status(node["verification_tier"], node["verified_until"], now, key in self.shared.unfit)

    def mark_offline(self, node_key: Pubkey) -> None:
        if node_key in self.shared.scheduler.nodes:
            self.shared.scheduler.update_node(node_key, online=False)
