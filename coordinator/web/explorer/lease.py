"""/web/leases/{lease}: a lease's whole timeline (each row linking its transaction, each settlement
checked against the program's rule) and its escrow; /web/leases/{lease}/audit: the SDK's chain-only
audit of it, which the page loads once it has painted (the audit reads every transaction of the
lease from the chain: a long history must not hold the page back)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response

from coordinator.db import chain as ledger
from coordinator.db import explorer as queries
from coordinator.db import nodes as faults
from coordinator.db.chain import plain_row
from coordinator.db.explorer import simulated_nodes
from coordinator.web import page
from coordinator.web.explorer.common import (
    CHAIN_ERRORS,
    BadAddress,
    chain_client,
    error_page,
    parse_address,
    parse_offset,
)
from coordinator.web.explorer.rule import FeeHistory
from coordinator.web.explorer.timeline import timeline
from gpunet.accounts import chain_clock, escrow, fetch
from gpunet.catalog import gpu_model_name, region_name

if TYPE_CHECKING:
    import asyncpg
    from solana.rpc.async_api import AsyncClient
    from solders.pubkey import Pubkey

    from coordinator.settings import Settings

__all__ = ["TIMELINE_PAGE", "lease_page"]

TIMELINE_PAGE = 200  # timeline rows a page shows (every row is still checked: the rule needs those before it)


@dataclass(frozen=True)
class EscrowView:
    """What the lease's vault holds and burns now, read from the chain (gpunet.accounts.escrow)."""

    balance: int
    burn_per_hour: int
    runway_seconds: int | None  # how long the balance lasts at this burn (None: it burns nothing)
    ends_at: int
    seconds_left: int | None  # until the lease's end, by the chain's clock (None: not running)


async def _escrow(chain: AsyncClient, lease: Pubkey) -> tuple[EscrowView | None, str | None]:
    try:
        account = await fetch(chain, lease, "Lease")
        held = await escrow(chain, lease, account)
        now = await chain_clock(chain)
    except CHAIN_ERRORS as e:
        return None, f"{type(e).__name__}: {e}"
    running = type(account.status).__name__ == "Active"
    left = max(0, held.ends_at - now) if running else None
    return EscrowView(held.balance, held.burn_per_hour, held.runway_seconds, held.ends_at, left), None


def lease_page(pool: asyncpg.Pool, settings: Settings) -> Callable[[Request], Awaitable[Response]]:
    async def handler(request: Request) -> Response:
        try:
            lease = parse_address(request.path_params["lease"], "lease")
            offset = parse_offset(request)
        except BadAddress as e:
            return error_page(request, settings, 400, "Bad request", str(e))
        async with pool.acquire() as conn:
            row = await ledger.row(conn, "leases", "lease", str(lease))
            if row is None:
                return error_page(request, settings, 404, "No such lease", f"no lease {lease} in the ledger")
            events = await queries.events_of(conn, "lease", str(lease))
            fees = FeeHistory(await queries.fee_changes(conn))
            slashed_in = dict.fromkeys(e["signature"] for e in events if e["name"] == "ProviderSlashed")
            evidence = {signature: await faults.slash_evidence(conn, signature) for signature in slashed_in}
            # A share per node the lease was ever on (at most a few): the first hundred, like the API's.
            shares = [plain_row(a) for a in await ledger.lease_assignments(conn, str(lease), 100)][:100]
            simulated = await simulated_nodes(conn, [a["node_key"] for a in shares])
        rows = timeline(events, fees, evidence)
        async with chain_client(settings) as chain:
            held, escrow_error = await _escrow(chain, lease)
        checked = [r.check for r in rows if r.check is not None]
        return page(
            request,
            "lease.html",
            settings,
            lease=plain_row(row),
            model=gpu_model_name(row["gpu_model"]),
            region=region_name(row["region"]),
            shares=shares,
            simulated=simulated,
            rows=rows[offset : offset + TIMELINE_PAGE],
            offset=offset,
            total=len(rows),
            page_size=TIMELINE_PAGE,
            checks={s: sum(1 for c in checked if c.status == s) for s in ("checked", "mismatch", "unknown")},
            escrow=held,
            escrow_error=escrow_error,
        )

    return handler
