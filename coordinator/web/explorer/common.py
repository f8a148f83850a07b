"""What the explorer's pages share: reading an address from the URL (a bad one is a clear 400 page,
never a crash), the chain client the audits run on, and times shown in UTC."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import httpx
from solana.exceptions import SolanaRpcException
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solders.pubkey import Pubkey
from starlette.requests import Request
from starlette.responses import Response

from coordinator.db.connection import Connection
from coordinator.web import page, templates
from gpunet.amounts import format_io
from gpunet.audit import ChainAuditReport
from gpunet.errors import GpunetError
from gpunet.instructions import TIER_SIMULATED

if TYPE_CHECKING:
    from coordinator.settings import Settings

__all__ = [
    "CHAIN_ERRORS",
    "BadAddress",
    "audited",
    "chain_client",
    "error_page",
    "parse_address",
    "parse_offset",
    "simulated_nodes",
    "utc",
]


class BadAddress(ValueError):
    """A path segment that is not a base58 public key."""


def parse_address(text: str, what: str) -> Pubkey:
    try:
        return Pubkey.from_string(text)
    except ValueError:
        raise BadAddress(f"{text[:100]!r} is not a {what} address (a base58 public key)") from None


def parse_offset(request: Request) -> int:
    """A list page's `offset` query parameter (0 when absent): a whole number, at most a billion."""
    raw = request.query_params.get("offset", "0")
    if not raw.isdigit() or int(raw) > 10**9:
        raise BadAddress(f"offset {raw[:30]!r} is not a whole number of rows (0 to 1,000,000,000)")
    return int(raw)


def error_page(request: Request, settings: Settings, status: int, title: str, message: str) -> Response:
    return page(request, "explorer_error.html", settings, status_code=status, title=title, message=message)


@asynccontextmanager
async def chain_client(settings: Settings) -> AsyncIterator[AsyncClient]:
    """The chain as the coordinator reads it (its RPC), for the SDK's chain-only audit: the same
    code an auditor runs with `gpunet audit`, pointed at the same chain."""
    async with AsyncClient(settings.rpc_url, commitment=Confirmed, timeout=30) as client:
        yield client


def utc(unix: int | float | None) -> str:
    if not unix:
        return "—"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(unix))


# The errors reading the chain (or the coordinator's evidence) can end in: the page says what failed.
CHAIN_ERRORS = (GpunetError, SolanaRpcException, httpx.HTTPError, OSError)


async def audited(run: Awaitable[ChainAuditReport]) -> tuple[ChainAuditReport | None, str | None]:
    """The SDK's chain-only audit's report, or why it could not run (never a verdict then)."""
    try:
        return await run, None
    except CHAIN_ERRORS as e:
        return None, f"{type(e).__name__}: {e}"


async def simulated_nodes(conn: Connection, node_keys: list[str]) -> set[str]:
    """The node keys whose GPUs are simulated: verified on chain at the simulated tier, or whose
    verification records say so (a simulated worker verified at no tier yet)."""
    rows = await conn.fetch(
        """SELECT node_key FROM nodes WHERE node_key = ANY($1::text[]) AND verification_tier = $2
           UNION SELECT node_key FROM verifications WHERE node_key = ANY($1::text[]) AND simulated""",
        node_keys,
        TIER_SIMULATED,
    )
    return {r["node_key"] for r in rows}


templates.env.filters["io"] = format_io
templates.env.filters["utc"] = utc
