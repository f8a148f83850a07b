"""/web/providers/{provider}: a provider's stake (active, bonded, unbonding), its earnings by period,
its slashes with their evidence, its nodes; /web/providers/{provider}/audit: the SDK's chain-only
audit of it, which the page loads once it has painted. The provider is
named by its account or by its supplier's wallet, as everywhere else."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response

from coordinator.db import chain as ledger
from coordinator.db import explorer as queries
from coordinator.db.chain import plain_row
from coordinator.db.explorer import simulated_nodes
from coordinator.web import page
from coordinator.web.explorer.common import (
    BadAddress,
    error_page,
    parse_address,
)
from gpunet.catalog import gpu_model_name, region_name
from gpunet.pda import provider_pda

if TYPE_CHECKING:
    import asyncpg

    from coordinator.settings import Settings

__all__ = ["provider_page"]

HOURLY_UNDER_SECONDS = 2 * 86_400  # a history shorter than two days reads better by the hour


def provider_page(pool: asyncpg.Pool, settings: Settings) -> Callable[[Request], Awaitable[Response]]:
    async def handler(request: Request) -> Response:
        try:
            key = parse_address(request.path_params["provider"], "provider")
        except BadAddress as e:
            return error_page(request, settings, 400, "Not a provider address", str(e))
        async with pool.acquire() as conn:
            row = await ledger.row(conn, "providers", "provider", str(key))
            if row is None:  # the supplier's wallet: its provider is its PDA
                row = await ledger.row(conn, "providers", "provider", str(provider_pda(key, settings.program)))
            if row is None:
                return error_page(
                    request,
                    settings,
                    404,
                    "No such provider",
                    f"no provider account or supplier wallet {key} in the ledger",
                )
            provider = row["provider"]
            period = "hour" if await queries.settlement_span(conn, provider) < HOURLY_UNDER_SECONDS else "day"
            earnings = [plain_row(r) for r in await queries.earnings_by_period(conn, provider, period)]
            slashes = [plain_row(r) for r in await ledger.page(conn, "slashes", [("provider", "=", provider)], 100, 0)]
            nodes = [plain_row(r) for r in await ledger.rows(conn, "nodes", "provider", provider)]
            simulated = await simulated_nodes(conn, [n["node_key"] for n in nodes])
        return page(
            request,
            "provider.html",
            settings,
            provider=plain_row(row),
            period=period,
            earnings=earnings,
            earned=sum(e["payout"] for e in earnings),
            slashes=slashes,
            nodes=nodes,
            simulated=simulated,
            model_name=gpu_model_name,
            region_name=region_name,
        )

    return handler
