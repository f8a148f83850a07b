"""The explorer's network page (/web/), settlements feed (/web/settlements, live at
/web/settlements/live), search (/web/search), CSV export (/web/settlements.csv) and transaction page
(/web/tx/{signature}): server-rendered from the indexer's ledger, no wallet needed."""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from coordinator.api.params import BadRequest, Param, parse_query, parse_signature
from coordinator.indexer.rpc import RpcError
from coordinator.web import page
from coordinator.web.feed import export, live, search, settlements, tx
from coordinator.web.feed.network import network
from coordinator.web.feed.pages import error_page, query

if TYPE_CHECKING:
    import asyncpg

    from coordinator.indexer.rpc import ChainRpc
    from coordinator.service import Coordinator
    from coordinator.settings import Settings

__all__ = ["feed_routes"]

_LIVE = (Param("after", "integer", minimum=0, default=0, description="the newest settlement id the page shows"),)


def feed_routes(
    pool: asyncpg.Pool, rpc: ChainRpc, settings: Settings, coordinator: Coordinator | None = None
) -> list[BaseRoute]:
    hub = live.SettlementHub(pool)

    async def network_page(request: Request) -> Response:
        try:
            query(request, ())
        except BadRequest as e:
            return error_page(request, settings, 400, str(e), title="Bad request")
        async with pool.acquire() as conn:
            net = await network(conn, coordinator)
        return page(request, "network.html", settings, net=net)

    async def feed_page(request: Request) -> Response:
        try:
            values = query(request, settlements.FEED_PAGE)
            if "before" in values and "after" in values:
                raise BadRequest("give before or after, not both")
        except BadRequest as e:
            return error_page(request, settings, 400, str(e), title="Bad request")
        async with pool.acquire() as conn:
            feed = await settlements.feed_page(conn, values["limit"], values.get("before"), values.get("after"))
        return page(request, "feed/settlements.html", settings, feed=feed)

    async def live_feed(request: Request) -> Response:
        try:
            after = query(request, _LIVE)["after"]
            if last := request.headers.get("last-event-id"):  # a reconnect: go on from what it saw
                after = parse_query({"after": last}, _LIVE)["after"]
        except BadRequest as e:
            return PlainTextResponse(str(e), status_code=400)
        return StreamingResponse(
            live.stream(hub, pool, after),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )

    async def search_page(request: Request) -> Response:
        if set(request.query_params) - {"q"} or len(request.query_params.getlist("q")) > 1:
            return error_page(request, settings, 400, "search takes one parameter, q", title="Bad request")
        return await _found(request, request.query_params.get("q", ""))

    async def address_page(request: Request) -> Response:
        """/web/address/{address}: where explorer links to an account (`gpunet --explorer`'s {kind}
        is "address" or "tx", as the demo's are) find its page."""
        try:
            query(request, ())
        except BadRequest as e:
            return error_page(request, settings, 400, str(e), title="Bad request")
        return await _found(request, request.path_params["address"])

    async def _found(request: Request, raw: str) -> Response:
        try:
            async with pool.acquire() as conn:
                found = await search.search(conn, raw)
        except search.BadQuery as e:
            return error_page(
                request, settings, 400, str(e), title="Not an address or a signature", query=raw[: search.MAX_QUERY]
            )
        if not found:
            return error_page(
                request,
                settings,
                404,
                f"Nothing found: no lease, node, provider, wallet or transaction {raw.strip()} in the ledger.",
                title="Nothing found",
                query=raw[: search.MAX_QUERY],
            )
        if len({m.url for m in found}) == 1:
            return RedirectResponse(found[0].url, status_code=303)
        return page(request, "feed/search.html", settings, found=found, query=raw.strip())

    async def settlements_csv(request: Request) -> Response:
        try:
            chosen = export.period(request.query_params)
        except BadRequest as e:
            return PlainTextResponse(str(e), status_code=400)
        return StreamingResponse(
            export.csv_rows(pool, chosen),
            media_type="text/csv; charset=utf-8",
            headers={"Content-Disposition": 'attachment; filename="settlements.csv"'},
        )

    async def tx_page(request: Request) -> Response:
        try:
            query(request, ())
            signature = parse_signature("signature", request.path_params["signature"])
        except BadRequest as e:
            return error_page(request, settings, 400, str(e), title="Not a transaction signature")
        async with pool.acquire() as conn:
            found = await tx.transaction(conn, signature)
        if found is None:
            return error_page(request, settings, 404, f"No gpunet transaction {signature} in the ledger.")
        return page(request, "feed/tx.html", settings, tx=found, amounts=tx.AMOUNT_FIELDS, linked=tx.LINKED_FIELDS)

    async def tx_raw(request: Request) -> Response:
        """The node's record of an indexed transaction, as getTransaction gives it (only transactions
        the ledger holds: this is no open door to the node's RPC)."""
        try:
            query(request, ())
            signature = parse_signature("signature", request.path_params["signature"])
        except BadRequest as e:
            return JSONResponse({"error": str(e)}, status_code=400)
        async with pool.acquire() as conn:
            if await tx.transaction(conn, signature) is None:
                return JSONResponse({"error": f"no gpunet transaction {signature} in the ledger"}, status_code=404)
        config = {"encoding": "json", "commitment": rpc.commitment, "maxSupportedTransactionVersion": 0}
        try:
            answer = await rpc.call("getTransaction", [signature, config])
        except RpcError as e:
            return JSONResponse({"error": f"the node could not be read: {e}"}, status_code=503)
        return JSONResponse(answer)

    return [
        Route("/web/", network_page),
        Route("/web/settlements", feed_page),
        Route("/web/settlements/live", live_feed),
        Route("/web/settlements.csv", settlements_csv),
        Route("/web/search", search_page),
        Route("/web/address/{address}", address_page),
        Route("/web/tx/{signature}", tx_page),
        Route("/web/tx/{signature}/raw", tx_raw),
    ]
