"""The audit pages: the SDK's chain-only audit of a lease or a provider, as `gpunet audit --lease` or
`--provider` runs it, with this coordinator's slash evidence; each its own page, which the account
page loads once it has painted (an audit reads every transaction of its subject from the chain)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Literal

from starlette.requests import Request
from starlette.responses import Response

from coordinator.web import page
from coordinator.web.explorer.common import BadAddress, audited, chain_client, error_page, parse_address
from gpunet.audit import audit_lease, audit_provider

if TYPE_CHECKING:
    from coordinator.settings import Settings

__all__ = ["audit_page"]


def audit_page(settings: Settings, kind: Literal["lease", "provider"]) -> Callable[[Request], Awaitable[Response]]:
    """/web/leases/{lease}/audit or /web/providers/{provider}/audit (a provider named by its account
    or its supplier's wallet)."""
    audit = audit_lease if kind == "lease" else audit_provider

    async def handler(request: Request) -> Response:
        try:
            key = parse_address(request.path_params[kind], kind)
        except BadAddress as e:
            return error_page(request, settings, 400, "Bad request", str(e))
        async with chain_client(settings) as chain:
            report, audit_error = await audited(audit(chain, key, coordinator=settings.api_url))
        return page(
            request,
            "audit.html",
            settings,
            subject=f"{kind} {key}",
            back=f"/web/{kind}s/{key}",
            what=f"--{kind} {key}",
            report=report,
            audit_error=audit_error,
        )

    return handler
