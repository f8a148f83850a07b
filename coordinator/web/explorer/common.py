"""What the explorer's pages share: reading an address from the URL (a bad one is a clear 400 page,
never a crash), the chain client the audits run on, and an audit's outcome."""

from __future__ import annotations

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

from coordinator.web import page
from gpunet.audit import ChainAuditReport
from gpunet.errors import GpunetError

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


# The errors reading the chain (or the coordinator's evidence) can end in: the page says what failed.
CHAIN_ERRORS = (GpunetError, SolanaRpcException, httpx.HTTPError, OSError)


async def audited(run: Awaitable[ChainAuditReport]) -> tuple[ChainAuditReport | None, str | None]:
    """The SDK's chain-only audit's report, or why it could not run (never a verdict then)."""
    try:
        return await run, None
    except CHAIN_ERRORS as e:
        return None, f"{type(e).__name__}: {e}"
