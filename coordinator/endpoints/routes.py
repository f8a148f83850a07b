"""The endpoints' routes (see coordinator.endpoints): the served URL itself, and the lease client's
signed routes to manage access and read the access log:

- `/endpoints/{lease}/{name}/{path}`, any method: the job's port `name` (`/endpoints/{lease}/{name}`
  redirects to it with its slash, for a page's relative links).
- `GET /leases/{lease}/endpoints`: the current job's exposed ports, their URLs, whether public, how
  the nodes serving them stand on this replica, the lease's live tokens (ids and labels, never the
  tokens) and the limits.
- `POST /leases/{lease}/endpoints/{name}` `{"public": bool}`: open a name to anyone, or close it again.
- `POST /leases/{lease}/endpoint-tokens` `{"label": text}` (or no body): a new bearer token,
  `{id, token, ...}`; the token is shown this once (the ledger keeps its SHA-256).
- `DELETE /leases/{lease}/endpoint-tokens/{id}`: revoke one (refused at once on this replica, within
  a second on the others).
- `GET /leases/{lease}/endpoints/log?after=&limit=` or `?tail=`: the access log.

The tokens are under a path of their own, not `/leases/{lease}/endpoints/tokens`, because `tokens`
may well be the name of an exposed port. Each signed route takes the request signature of the
lease's client (coordinator.api.signed); a bad body or parameter is a 400 that changes nothing."""

from __future__ import annotations

import re
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from coordinator.api.params import BadRequest, Param, parse_pubkey, parse_query
from coordinator.api.signed import Refused, check_signed
from coordinator.db import endpoints as rows
from coordinator.db.connection import Connection
from coordinator.endpoints.serve import NAME, Endpoints, new_token
from gpunet.json_input import NotJson, parse_json

__all__ = ["LOG_PARAMS", "MAX_LIVE_TOKENS", "endpoint_routes"]

MAX_BODY = 4096  # a signed management request's body
MAX_LIVE_TOKENS = 64  # per lease; revoke one to create more
KEEP_REVOKED = 256  # revoked tokens of a lease remembered (an older one is refused as unknown: 401)
LOG_PAGE = 1000
LABEL = re.compile(r"^[\w .:@/+-]{0,64}$")
TOKEN_ID = re.compile(r"^[0-9a-f]{16}$")
LOG_PARAMS = (
    Param("after", "integer", minimum=0, default=0, description="only entries after this id (pages forward)"),
    Param("limit", "integer", minimum=1, maximum=LOG_PAGE, default=100, description="entries per page"),
    Param("tail", "integer", minimum=1, maximum=LOG_PAGE, description="the last this many entries instead"),
)


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def _body_object(body: bytes, shape: str, allowed: set[str]) -> dict[str, Any]:
    if not body.strip():
        return {}
    try:
        value = parse_json(body)
    except NotJson as e:
        raise BadRequest(f"the body is not JSON: {e}") from None
    if not isinstance(value, dict) or set(value) - allowed:
        raise BadRequest(f"the body must be {shape}")
    return value


async def authorize(conn: Connection, request: Request, lease: str, body: bytes) -> Response | None:
    """None when the lease's client signed the request (coordinator.api.signed); else the 4xx to answer."""
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    try:
        await check_signed(conn, request.method, target, request.headers, body, lease, suppliers=False)
    except Refused as e:
        return _error(e.status, e.message)
    return None


def endpoint_routes(endpoints: Endpoints) -> list[Route]:
    pool, settings = endpoints.pool, endpoints.settings

    async def serve(request: Request) -> Response:
        return await endpoints.handle(request)

    async def slash(request: Request) -> Response:
        """/endpoints/{lease}/{name} -> .../{name}/ (a page's relative links need the slash)."""
        query = f"?{request.url.query}" if request.url.query else ""
        return RedirectResponse(request.url.path + "/" + query, status_code=308)

    async def listing(request: Request) -> Response:
        parse_query(request.query_params, ())
        lease = parse_pubkey("lease", request.path_params["key"])
        async with pool.acquire() as conn:
            refused = await authorize(conn, request, lease, b"")
            if refused is not None:
                return refused
            tokens = await rows.live_tokens(conn, lease)
        endpoints.forget(lease)
        serving = await endpoints.serving(lease)
        listed = []
        for expose in serving.exposes.values():
            http = expose.protocol == "http"
            nodes = []
            for node in serving.nodes if http else ():
                health = endpoints.health.get((lease, expose.name, node))
                nodes.append(
                    {
                        "node_key": str(node),
                        "linked": endpoints.relay.linked(node),
                        "healthy": None if health is None else health.healthy,
                        "reason": None if health is None or not health.reason else health.reason,
                    }
                )
            listed.append(
                {
                    "name": expose.name,
                    "port": expose.port,
                    "protocol": expose.protocol,
                    "url": endpoints.url(lease, expose.name) if http else None,
                    "public": http and expose.name in serving.public,
                    "nodes": nodes,
                }
            )
        return JSONResponse(
            {
                "lease": lease,
                "status": serving.status,
                "job_number": serving.job_number,
                "endpoints": listed,
                "tokens": [{"id": t.id, "label": t.label, "created_at": t.created_at.isoformat()} for t in tokens],
                "limits": {
                    "requests_per_second": settings.endpoint_requests_per_second,
                    "burst": settings.endpoint_burst,
                    "max_streams": settings.endpoint_max_streams,
                    "max_body_bytes": settings.endpoint_max_body_bytes,
                },
            }
        )

    async def set_public(request: Request) -> Response:
        parse_query(request.query_params, ())
        lease = parse_pubkey("lease", request.path_params["key"])
        name = request.path_params["name"]
        if not NAME.fullmatch(name):
            raise BadRequest(f"{name[:40]!r} is not an exposed port's name (a-z, 0-9 and -, at most 32)")
        body = await request.body()
        if len(body) > MAX_BODY:
            return _error(413, f"the body is at most {MAX_BODY} bytes")
        async with pool.acquire() as conn:
            refused = await authorize(conn, request, lease, body)
            if refused is not None:
                return refused
            payload = _body_object(body, '{"public": true or false}', {"public"})
            public = payload.get("public")
            if not isinstance(public, bool):
                raise BadRequest('the body must be {"public": true or false}')
            endpoints.forget(lease)
            serving = await endpoints.serving(lease)
            if serving.status in ("closing", "closed"):
                return _error(410, f"lease {lease} has ended ({serving.status}): its endpoints are gone")
            expose = serving.exposes.get(name)
            if expose is None or expose.protocol != "http":
                what = "exposes no port named" if expose is None else "exposes as tcp (not served over HTTP)"
                return _error(404, f"lease {lease}'s current job {what} {name!r}: nothing changed")
            await rows.set_public(conn, lease, name, public)
        endpoints.forget(lease)
        return JSONResponse({"lease": lease, "name": name, "public": public, "url": endpoints.url(lease, name)})

    async def create_token(request: Request) -> Response:
        parse_query(request.query_params, ())
        lease = parse_pubkey("lease", request.path_params["key"])
        body = await request.body()
        if len(body) > MAX_BODY:
            return _error(413, f"the body is at most {MAX_BODY} bytes")
        async with pool.acquire() as conn:
            refused = await authorize(conn, request, lease, body)
            if refused is not None:
                return refused
            label = _body_object(body, '{"label": text} or nothing', {"label"}).get("label", "")
            if not isinstance(label, str) or not LABEL.fullmatch(label):
                raise BadRequest("label: at most 64 letters, digits, spaces and . : @ / + - _")
            endpoints.forget(lease)
            serving = await endpoints.serving(lease)
            if serving.status in ("closing", "closed"):
                return _error(410, f"lease {lease} has ended ({serving.status}): its endpoints are gone")
            token_id, token, sha256 = new_token()
            created = await rows.create_token(
                conn, lease, token_id, sha256, label, max_live=MAX_LIVE_TOKENS, keep_revoked=KEEP_REVOKED
            )
        if created is None:
            return _error(409, f"lease {lease} has {MAX_LIVE_TOKENS} live endpoint tokens, its most: revoke one first")
        return JSONResponse(
            {
                "lease": lease,
                "id": created.id,
                "token": token,  # shown this once: only its SHA-256 is kept
                "label": created.label,
                "created_at": created.created_at.isoformat(),
            },
            status_code=201,
        )

    async def revoke_token(request: Request) -> Response:
        parse_query(request.query_params, ())
        lease = parse_pubkey("lease", request.path_params["key"])
        token_id = request.path_params["id"]
        if not TOKEN_ID.fullmatch(token_id):
            raise BadRequest(f"{token_id[:40]!r} is not a token id (16 hex digits, as the token's creation gave)")
        async with pool.acquire() as conn:
            refused = await authorize(conn, request, lease, b"")
            if refused is not None:
                return refused
            revoked = await rows.revoke_token(conn, lease, token_id)
        if revoked is None:
            return _error(404, f"lease {lease} has no endpoint token {token_id}")
        endpoints.revoked(token_id)
        assert revoked.revoked_at is not None
        return JSONResponse({"lease": lease, "id": revoked.id, "revoked_at": revoked.revoked_at.isoformat()})

    async def access_log(request: Request) -> Response:
        values = parse_query(request.query_params, LOG_PARAMS)
        lease = parse_pubkey("lease", request.path_params["key"])
        async with pool.acquire() as conn:
            refused = await authorize(conn, request, lease, b"")
            if refused is not None:
                return refused
        await endpoints.flush_log()  # what this replica answered so far is in it
        async with pool.acquire() as conn:
            entries, more = await rows.access_log(
                conn, lease, after=values["after"], limit=values["limit"], tail=values.get("tail")
            )
        return JSONResponse(
            {
                "lease": lease,
                "items": [{**dict(r), "at": r["at"].isoformat()} for r in entries],
                "more": more,
            }
        )

    return [
        Route("/endpoints/{lease}/{name}/{path:path}", serve, methods=_METHODS),
        Route("/endpoints/{lease}/{name}", slash, methods=_METHODS),
        Route("/leases/{key}/endpoints", listing),
        Route("/leases/{key}/endpoints/log", access_log),
        Route("/leases/{key}/endpoints/{name}", set_public, methods=["POST"]),
        Route("/leases/{key}/endpoint-tokens", create_token, methods=["POST"]),
        Route("/leases/{key}/endpoint-tokens/{id}", revoke_token, methods=["DELETE"]),
    ]


_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
