"""gpunet on the web, served by the coordinator beside its API under /web/: the explorer (server-rendered
pages anyone can audit from; every figure recomputed from chain data) and the wallet app (a small
TypeScript module, web/src, bundled by scripts/setup into static/wallet.js). No asset comes from a CDN.

The bundle's SHA-256 is published on every page and at /web/bundle, with the program ID, so a user can
tell this app from a phishing copy of it."""

from __future__ import annotations

import hashlib
import time
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from gpunet.amounts import format_io

if TYPE_CHECKING:
    import asyncpg

    from coordinator.indexer.rpc import ChainRpc
    from coordinator.service import Coordinator
    from coordinator.settings import Settings

__all__ = ["BUNDLE", "STATIC", "bundle_sha256", "templates", "utc", "web_routes"]

HERE = Path(__file__).parent
STATIC = HERE / "static"
BUNDLE = STATIC / "wallet.js"  # built by scripts/setup (web/): not in git

templates = Jinja2Templates(directory=HERE / "templates")


def utc(unix: int | float | None) -> str:
    """A block time as people read it."""
    if not unix:
        return "—"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(unix))


# Every page's filters, here with the templates (a template rendered before the module that once
# registered a filter was imported failed: "No filter named 'io'")
templates.env.filters["io"] = format_io
templates.env.filters["utc"] = utc
# a block time as a machine reads it
templates.env.filters["utc_iso"] = lambda seconds: datetime.fromtimestamp(seconds, UTC).isoformat()[:19] + "Z"


@cache
def bundle_sha256() -> str:
    """The SHA-256 (hex) of the wallet bundle served at /web/static/wallet.js; "not built" when
    scripts/setup has not built it (the explorer still works; the wallet app says so)."""
    try:
        return hashlib.sha256(BUNDLE.read_bytes()).hexdigest()
    except FileNotFoundError:
        return "not built"


def page(request: Request, template: str, settings: Settings, status_code: int = 200, **context: Any) -> Response:
    """A page in the site's layout: every page shows the program ID and the bundle's hash."""
    return templates.TemplateResponse(
        request,
        template,
        {"program": str(settings.program), "bundle_sha256": bundle_sha256(), **context},
        status_code=status_code,
    )


def web_routes(
    pool: asyncpg.Pool, rpc: ChainRpc, settings: Settings, coordinator: Coordinator | None = None
) -> list[BaseRoute]:
    """The site's routes (mounted beside the API by coordinator.api.create_app)."""
    # The pages' modules render with this module's page() and templates: imported here, not above.
    from coordinator.web.app import app_routes
    from coordinator.web.explorer import explorer_routes
    from coordinator.web.feed import feed_routes

    async def bundle(request: Request) -> Response:
        """What a user checks the app against: the bundle's SHA-256 and the program ID."""
        return JSONResponse(
            {"bundle": "/web/static/wallet.js", "sha256": bundle_sha256(), "program": str(settings.program)}
        )

    async def root(request: Request) -> Response:
        return RedirectResponse("/web/")

    return [
        *app_routes(pool, settings),
        Route("/", root),
        *feed_routes(pool, rpc, settings, coordinator),
        Route("/web/bundle", bundle),
        *explorer_routes(pool, rpc, settings, coordinator),
        Mount("/web/static", app=StaticFiles(directory=STATIC), name="static"),
    ]
