"""What the feed's pages share: the template filters for amounts and times, a page's query checked (a
malformed one is a 400 page that says what is wrong), and the settlement rows as the templates take
them."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from coordinator.api.params import Param, parse_query
from coordinator.db.chain import plain_row
from coordinator.web import page, templates
from gpunet.amounts import format_io

if TYPE_CHECKING:
    import asyncpg

    from coordinator.settings import Settings

__all__ = ["error_page", "query", "settlement", "settlement_row_html"]


def _utc(seconds: int) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


# Amounts in IO at full precision (never a float); times in UTC, as the chain's block times are.
templates.env.filters["format_io"] = lambda units: format_io(int(units))
templates.env.filters["utc_iso"] = lambda seconds: _utc(seconds).isoformat().replace("+00:00", "Z")
templates.env.filters["utc_text"] = lambda seconds: _utc(seconds).strftime("%Y-%m-%d %H:%M:%S UTC")


def query(request: Request, params: Iterable[Param]) -> dict[str, Any]:
    """The page's query parameters, checked (coordinator.api.params.BadRequest if not)."""
    return parse_query(request.query_params, params)


def error_page(request: Request, settings: Settings, status: int, message: str, **context: Any) -> Response:
    return page(request, "feed/error.html", settings, status_code=status, message=message, **context)


def settlement(record: asyncpg.Record | dict[str, Any]) -> dict[str, Any]:
    """A settlement row with its amounts as ints (the ledger's numeric(20, 0) come as Decimals)."""
    return plain_row(record)


def settlement_row_html(row: dict[str, Any]) -> str:
    """The feed table's row for a settlement: the page and the live feed render it the same way."""
    macros = templates.env.get_template("feed/_macros.html").module
    return str(macros.settlement_row(row))  # type: ignore[attr-defined]
