"""Routes of the read API. Every error is JSON `{"error": message}` with a 4xx status."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import asyncpg
from solders.pubkey import Pubkey
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

from coordinator.api.metrics import coordinator_metrics, render_metrics, render_readiness
from coordinator.api.openapi import openapi_document
from coordinator.api.params import BadRequest, parse_pubkey, parse_query, parse_signature
from coordinator.api.resources import PAGE, RESOURCES, Resource, page_body
from coordinator.api.u64 import event_data_json, integers_as_text
from coordinator.audit import NotFound, audit_lease, audit_provider
from coordinator.db import chain as ledger
from coordinator.db import nodes as faults
from coordinator.db import ping, rewards, verifications
from coordinator.indexer.rpc import ChainRpc, RpcError
from coordinator.settings import Settings
from coordinator.web import web_routes
from gpunet.amounts import u64_json
from gpunet.protocol import REQUEST_AT_HEADER, REQUEST_NONCE_HEADER, REQUEST_SIGNATURE_HEADER, REQUEST_WALLET_HEADER
from gpunet.reward_epoch import EpochInputs, epoch_leaves

if TYPE_CHECKING:
    from coordinator.service import Coordinator

__all__ = ["LEASE_ASSIGNMENTS", "create_app"]

LEASE_ASSIGNMENTS = 100  # a lease item's assignments at most; /assignments?lease= pages on from there


def _json_value(value: Any) -> Any:
    if isinstance(value, Decimal):
        return u64_json(int(value))  # numeric(20, 0): a u64 (coordinator.api.u64)
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def _row(record: asyncpg.Record) -> dict[str, Any]:
    row = {k: _json_value(v) for k, v in dict(record).items()}
    if isinstance(row.get("data"), str):
        row["data"] = event_data_json(row["name"], json.loads(row["data"]))
    return row


def _reward_epoch(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "epoch": row["epoch"],
        "root": row["root"],
        "total": str(row["total"]),
        "leaves": row["leaves"],
        "posted": row["posted"],
        "credited": row["credited"],
        "built_at": row["built_at"].isoformat(),
    }


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def create_app(
    pool: asyncpg.Pool,
    rpc: ChainRpc,
    settings: Settings,
    extra_routes: Sequence[Route] = (),
    coordinator: Coordinator | None = None,
) -> Starlette:
    """The read API; `extra_routes` are a running coordinator's client routes (coordinator.api.work)
    and `coordinator` adds its state to /metrics."""
    program: Pubkey = settings.program

    def listing(resource: Resource) -> Callable[[Request], Awaitable[Response]]:
        async def handler(request: Request) -> Response:
            values = parse_query(request.query_params, (*resource.filters, *PAGE))
            filters = [(p.column, p.op, values[p.name]) for p in resource.filters if p.name in values and p.column]
            limit, offset = values["limit"], values["offset"]
            async with pool.acquire() as conn:
                rows = [_row(r) for r in await ledger.page(conn, resource.table, filters, limit, offset)]
            return JSONResponse(page_body(rows, limit, offset))

        return handler

    def item(resource: Resource) -> Callable[[Request], Awaitable[Response]]:
        column = resource.key
        assert column is not None, "an item route needs the resource's key column"

        async def handler(request: Request) -> Response:
            parse_query(request.query_params, ())
            key = parse_pubkey(column, request.path_params["key"])
            async with pool.acquire() as conn:
                row = await ledger.row(conn, resource.table, column, key)
                if row is None:
                    return _error(404, f"no {resource.key} {key} in the ledger")
                body = _row(row)
                if resource.name == "leases":  # its first page of assignments; /assignments?lease= has the rest
                    rows = [_row(r) for r in await ledger.lease_assignments(conn, key, LEASE_ASSIGNMENTS)]
                    shown = page_body(rows, LEASE_ASSIGNMENTS, 0)
                    body["assignments"], body["assignments_next_offset"] = shown["items"], shown["next_offset"]
            return JSONResponse(body)

        return handler

    def audit(kind: str) -> Callable[[Request], Awaitable[Response]]:
        check = audit_lease if kind == "lease" else audit_provider

        async def handler(request: Request) -> Response:
            parse_query(request.query_params, ())
            subject = parse_pubkey(kind, request.path_params["key"])
            try:
                async with pool.acquire() as conn:
                    report = await check(conn, rpc, program, subject)
            except NotFound as e:
                return _error(404, str(e))
            except RpcError as e:
                return _error(503, f"the chain could not be read for the audit: {e}")
            body = report.to_json()
            for d in body["differences"]:
                d["indexed"], d["chain"] = integers_as_text(d["indexed"]), integers_as_text(d["chain"])
            return JSONResponse(body)

        return handler

    async def node_verifications(request: Request) -> Response:
        """The evidence behind a node's verification status: its challenges and verdicts, newest first."""
        values = parse_query(request.query_params, PAGE)
        limit, offset = values["limit"], values["offset"]
        key = parse_pubkey("key", request.path_params["key"])
        async with pool.acquire() as conn:
            node = await ledger.row(conn, "nodes", "node", key) or await ledger.row(conn, "nodes", "node_key", key)
            if node is None:
                return _error(404, f"no node with node account or node key {key} in the ledger")
            rows = await verifications.of_node(conn, node["node_key"], limit + 1, offset)
        page = page_body([_row(r) for r in rows], limit, offset)
        return JSONResponse({"node": node["node"], "node_key": node["node_key"], **page})

    async def reward_epochs(request: Request) -> Response:
        values = parse_query(request.query_params, PAGE)
        limit, offset = values["limit"], values["offset"]
        async with pool.acquire() as conn:
            rows = await rewards.epochs(conn, limit + 1, offset)
        return JSONResponse(page_body([_reward_epoch(r) for r in rows], limit, offset))

    async def reward_epoch(request: Request) -> Response:
        """An epoch's inputs, as its tree was built from them, and every pool's leaf."""
        parse_query(request.query_params, ())  # refuses any parameter
        text = request.path_params["epoch"]
        if not (text.isascii() and text.isdigit()) or int(text) >= 2**63:
            return _error(400, f"epoch must be a non-negative integer, got {text!r}")
        async with pool.acquire() as conn:
            row = await rewards.epoch(conn, int(text))
        if row is None:
            return _error(404, f"no reward tree for epoch {text}: it has not ended, or no coordinator built it")
        leaves = epoch_leaves(EpochInputs.from_json(row["inputs"]))
        claims = [
            {
                "provider": str(leaf.provider),
                "supplier_amount": str(leaf.supplier_amount),
                "delegators_amount": str(leaf.delegators_amount),
            }
            for leaf in leaves
        ]
        return JSONResponse({**_reward_epoch(row), "inputs": row["inputs"], "claims": claims})

    async def slash_evidence(request: Request) -> Response:
        values = parse_query(request.query_params, PAGE)
        limit, offset = values["limit"], values["offset"]
        signature = parse_signature("signature", request.path_params["signature"])
        async with pool.acquire() as conn:
            # all of them (one transaction holds a few), so that a page past the end is no 404
            items = await faults.slash_evidence(conn, signature)
        if not items:
            return _error(404, f"no slash in transaction {signature} in the ledger")
        rows = [{k: _json_value(v) for k, v in i.items()} for i in items[offset : offset + limit + 1]]
        return JSONResponse({"signature": signature, **page_body(rows, limit, offset)})

    async def health(request: Request) -> Response:
        try:
            async with pool.acquire() as conn:
                state = await ledger.indexer_state(conn)
        except (OSError, asyncpg.PostgresError) as e:
            return JSONResponse({"status": "unavailable", "database": str(e)}, status_code=503)
        return JSONResponse(
            {"status": "ok", **{k: state[k] for k in ("cursor_signature", "cursor_slot", "synced_slot")}}
        )

    async def healthz(request: Request) -> Response:
        """Liveness: the process answers (nothing else is checked)."""
        return JSONResponse({"status": "ok"})

    async def readiness() -> dict[str, str]:
        """Readiness, check by check ("ok" or why not): the database and the chain RPC answer now and,
        where the coordinator runs, its attester holds at least the minimum SOL (as last read). /readyz
        answers it, and /metrics gives it as gauges, for the alert on it."""
        checks: dict[str, str] = {}
        try:
            async with asyncio.timeout(3):
                await ping(pool)
            checks["database"] = "ok"
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError) as e:
            checks["database"] = f"does not answer: {e or type(e).__name__}"
        try:
            async with asyncio.timeout(3):
                await rpc.slot()
            checks["rpc"] = "ok"
        except (RpcError, TimeoutError) as e:
            checks["rpc"] = f"does not answer: {e or type(e).__name__}"
        if coordinator is not None:
            lamports, minimum = coordinator.metrics.attester_balance, settings.attester_min_lamports
            if lamports is None:
                checks["attester_balance"] = "not read yet"
            elif lamports < minimum:
                checks["attester_balance"] = f"{lamports} lamports, under the minimum {minimum}"
            else:
                checks["attester_balance"] = "ok"
        return checks

    async def readyz(request: Request) -> Response:
        """Readiness (see readiness()); 503 names what failed."""
        checks = await readiness()
        ready = all(v == "ok" for v in checks.values())
        return JSONResponse(
            {"status": "ready" if ready else "not_ready", "checks": checks}, status_code=200 if ready else 503
        )

    async def metrics(request: Request) -> Response:
        text = coordinator_metrics(coordinator) if coordinator else ""
        try:
            async with pool.acquire() as conn:
                state = await ledger.indexer_state(conn)
        except (OSError, asyncpg.PostgresError) as e:
            if not text:
                return _error(503, f"the ledger could not be read: {e}")
            state = None  # the database is down: what the coordinator knows is still worth scraping
        if state is not None:
            try:
                head: int | None = await rpc.slot()
            except RpcError:
                head = None  # the lag is then unknown, not zero
            text = render_metrics(dict(state), head) + text
        text += render_readiness(await readiness())
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4; charset=utf-8")

    async def openapi(request: Request) -> Response:
        return JSONResponse(openapi_document())

    routes: list[BaseRoute] = [
        Route("/health", health),
        Route("/healthz", healthz),
        Route("/readyz", readyz),
        Route("/metrics", metrics),
        Route("/openapi.json", openapi),
    ]
    for resource in RESOURCES.values():
        routes.append(Route(f"/{resource.name}", listing(resource)))
        if resource.key:
            routes.append(Route(f"/{resource.name}/{{key}}", item(resource)))
    routes.append(Route("/slashes/{signature}/evidence", slash_evidence))
    routes += [Route("/audit/leases/{key}", audit("lease")), Route("/audit/providers/{key}", audit("provider"))]
    routes.append(Route("/nodes/{key}/verifications", node_verifications))
    routes += [Route("/rewards/epochs", reward_epochs), Route("/rewards/epochs/{epoch}", reward_epoch)]
    routes += list(extra_routes)
    routes += web_routes(pool, rpc, settings, coordinator)  # the explorer and the wallet app, under /web/

    async def bad_request(request: Request, exc: Exception) -> Response:
        return _error(400, str(exc))

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return _error(exc.status_code, exc.detail or "error")

    return Starlette(
        routes=routes,
        exception_handlers={BadRequest: bad_request, HTTPException: http_error},
        middleware=_cors(settings),
    )


def _cors(settings: Settings) -> list[Middleware]:
    """CORS for the origins GPUNET_API_CORS_ORIGINS names, none by default (no header at all). A page of
    another origin may read the API and call the client routes (DELETE: an endpoint token's revocation);
    signed requests carry their wallet's signature in headers, never a cookie, so no credentials are
    allowed (or needed)."""
    if not settings.cors_origins:
        return []
    headers = [REQUEST_AT_HEADER, REQUEST_WALLET_HEADER, REQUEST_NONCE_HEADER, REQUEST_SIGNATURE_HEADER]
    return [
        Middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "POST", "DELETE"],
            allow_headers=[*headers, "Content-Type"],
            expose_headers=["Location"],  # a follower replica's 307 names the leader in it
        )
    ]
