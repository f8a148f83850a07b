"""What the feed's pages share: the template filters for amounts and times, a page's query checked (a
malformed one is a 400 page that says what is wrong), and the settlement rows as the templates take
them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from coordinator.api.params import Param, parse_query
from coordinator.db.chain import plain_row
from coordinator.db.connection import Connection
from coordinator.db.explorer import simulated_nodes
from coordinator.web import page, templates

if TYPE_CHECKING:
    import asyncpg

    from coordinator.settings import Settings

__all__ = ["error_page", "query", "settlement", "settlement_row_html", "settlements"]


def query(request: Request, params: Iterable[Param]) -> dict[str, Any]:
    """The page's query parameters, checked (coordinator.api.params.BadRequest if not)."""
    return parse_query(request.query_params, params)


def error_page(request: Request, settings: Settings, status: int, message: str, **context: Any) -> Response:
    return page(request, "feed/error.html", settings, status_code=status, message=message, **context)


def settlement(record: asyncpg.Record | dict[str, Any], simulated: set[str]) -> dict[str, Any]:
    """A settlement row with its amounts as ints (the ledger's numeric(20, 0) come as Decimals), and
    whether its node's GPUs are simulated (`simulated`: those node keys)."""
    row = plain_row(record)
    row["simulated"] = row["node_key"] in simulated
    return row


async def settlements(conn: Connection, records: Iterable[asyncpg.Record]) -> list[dict[str, Any]]:
    """Settlement rows as the pages show them, their nodes marked simulated by the explorer's rule
    (coordinator.db.explorer.simulated_nodes: one query for the lot)."""
    records = list(records)
    simulated = await simulated_nodes(conn, sorted({r["node_key"] for r in records if r["node_key"]}))
    return [settlement(r, simulated) for r in records]


def settlement_row_html(row: dict[str, Any]) -> str:
    """The feed table's row for a settlement: the page and the live feed render it the same way."""
    macros = templates.env.get_template("feed/_macros.html").module
    return str(macros.settlement_row(row))  # type: ignore[attr-defined]
