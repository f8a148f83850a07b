"""The explorer's account pages (no wallet needed): a lease, a provider, a node, and the rewards of
each epoch. Each figure comes
from the coordinator's ledger (the chain's events as indexed) or the chain itself, and the lease and
provider pages end with the SDK's chain-only audit (gpunet.audit) recomputed against the chain there
and then (loaded once the page has painted, from its own page .../audit)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.routing import BaseRoute, Route

from coordinator.web.explorer.audit import audit_page
from coordinator.web.explorer.lease import lease_page
from coordinator.web.explorer.node import node_page
from coordinator.web.explorer.provider import provider_page
from coordinator.web.explorer.rewards import reward_epoch_page, reward_epochs_page

if TYPE_CHECKING:
    import asyncpg

    from coordinator.indexer.rpc import ChainRpc
    from coordinator.service import Coordinator
    from coordinator.settings import Settings

__all__ = ["explorer_routes"]


def explorer_routes(
    pool: asyncpg.Pool, rpc: ChainRpc, settings: Settings, coordinator: Coordinator | None = None
) -> list[BaseRoute]:
    return [
        Route("/web/leases/{lease}", lease_page(pool, settings)),
        Route("/web/leases/{lease}/audit", audit_page(settings, "lease")),
        Route("/web/providers/{provider}", provider_page(pool, settings)),
        Route("/web/providers/{provider}/audit", audit_page(settings, "provider")),
        Route("/web/nodes/{key}", node_page(pool, settings, coordinator)),
        Route("/web/rewards", reward_epochs_page(pool, settings)),
        Route("/web/rewards/{epoch}", reward_epoch_page(pool, settings)),
    ]
