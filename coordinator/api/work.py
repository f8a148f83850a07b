"""The client API of a running coordinator: give a lease its jobs (numbered 1, 2, ..., one at a
time, each signed by the lease's client), follow its placement, job status and logs, read its
latest checkpoint, give its job's secrets and its checkpoint key sealed to its nodes, ask for a
quote, and see the workers connected now (simulated ones say so). A lease's job view, logs, files,
secrets and checkpoint key are private: each request is signed (gpunet.protocol.request_message,
headers X-Gpunet-Time-Ms, X-Gpunet-Wallet, X-Gpunet-Nonce, X-Gpunet-Signature, within 60 s and used
once) by the lease's client (or, to read, by the supplier of a node the lease is on); anything else
is 401 and shows nothing. Errors are JSON `{"error": message}` with a 4xx status, like the read API;
a refused request changes nothing."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from pydantic import ValidationError
from solders.pubkey import Pubkey
from solders.signature import Signature
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from coordinator.api.params import BadRequest, Param, parse_pubkey, parse_query
from coordinator.api.resources import PAGE, page_body
from coordinator.api.signed import Refused, check_signed
from coordinator.checkpoints import TooLargeToServe, checkpoint_routes, latest_sealed
from coordinator.db import chain as indexed
from coordinator.db import jobs
from coordinator.db import leases as ledger
from coordinator.db import nodes as node_rows  # `nodes` names lists of node keys here
from coordinator.db.connection import Connection
from coordinator.endpoints import endpoint_routes
from coordinator.jobs import job_over, job_progress
from coordinator.scheduler import LeaseRequest, NotPlaced, Placement, Scheduler, SchedulerError
from gpunet import instructions as ix
from gpunet.amounts import U64_MAX, escrow_for, u64_json
from gpunet.catalog import CatalogError, gpu_model_name, region, region_name
from gpunet.json_input import NotJson, parse_json
from gpunet.limits import ANY, MAX_GPUS_PER_NODE, MAX_LEASE_GPUS, MAX_LEASE_NODES
from gpunet.protocol import (
    JobSpec,
    job_message,
    operator_message,
)
from gpunet.raycluster import ray_endpoints

if TYPE_CHECKING:
    from coordinator.service import Coordinator

__all__ = ["FILES_PARAMS", "JOB_VIEW_PARAMS", "QUOTE_PARAMS", "work_routes"]

MAX_BODY = 256 * 1024
OPERATOR_CLOCK_SKEW_SECONDS = 120  # a signed operator request older (or newer) than this is refused
LOG_LINES = 200
QUOTE_PARAMS = (
    Param("gpu_count", "integer", minimum=1, maximum=MAX_LEASE_GPUS, description="GPUs in all", required=True),
    Param("gpu_model", "gpu_model", default=ANY, description="a GPU model's name (H100, ...) or catalog code; any"),
    Param("min_vram_gb", "integer", minimum=0, maximum=65535, default=0, description="least GiB per GPU"),
    Param("region", "region", default=ANY, description="a region's name (eu-west, ...) or catalog code; any"),
    Param(
        "max_price_per_gpu_hour",
        "u64",
        minimum=1,
        description="IO base units, decimal digits; default: no ceiling (the escrow is then sized at the dearest "
        "node chosen)",
    ),
    Param(
        "gpus_per_node", "integer", minimum=1, maximum=MAX_GPUS_PER_NODE, description="equal shares of this many GPUs"
    ),
    Param(
        "duration_seconds",
        "integer",
        minimum=1,
        maximum=2**40,
        description="the lease's duration: the answer adds the escrow `lease open` would need for it",
    ),
)
QUOTE_CANDIDATES = 20  # the matching nodes a quote lists at most, cheapest first
JOB_VIEW_PARAMS = (
    Param("after", "integer", minimum=0, default=0, description="only log lines after this id (pages forward)"),
    Param("tail", "integer", minimum=1, maximum=LOG_LINES, description="the last this many log lines instead"),
)
FILES_PARAMS = (
    Param(
        "rank",
        "integer",
        minimum=0,
        maximum=MAX_LEASE_NODES - 1,
        default=0,
        description="whose checkpoint: the lease's node of this rank (a multi-node lease's nodes checkpoint one each)",
    ),
)


def _describe(placement: Placement | NotPlaced) -> dict[str, Any]:
    if isinstance(placement, NotPlaced):
        return {"placeable": False, "reason": placement.reason}
    return {
        "placeable": True,
        "shares": [
            {
                "node_key": str(s.node_key),
                "gpus": s.gpus,
                "price_per_gpu_hour": u64_json(s.price_per_gpu_hour),
                "simulated": s.simulated,
            }
            for s in placement.shares
        ],
        "burn_per_hour": _amount("the burn per hour", sum(s.gpus * s.price_per_gpu_hour for s in placement.shares)),
    }


def _candidates(scheduler: Scheduler, terms: ix.LeaseTerms, placement: Placement | NotPlaced) -> list[dict[str, Any]]:
    """The registered nodes whose hardware, region and price meet the terms, chosen ones first, then
    the cheapest, with what decides whether they can take it now (online, free GPUs, standing)."""
    chosen = {str(s.node_key): s.gpus for s in placement.shares} if isinstance(placement, Placement) else {}
    views = [v for v in scheduler.nodes.values() if v.meets(terms)]
    views.sort(key=lambda v: (str(v.node_key) not in chosen, v.price_per_gpu_hour, str(v.node_key)))
    return [
        {
            "node_key": str(v.node_key),
            "gpu_model": gpu_model_name(v.gpu_model),
            "gpu_count": v.gpu_count,
            "free_gpus": v.free_gpus,
            "missing_gpus": v.missing_gpus,
            "vram_gb": v.vram_gb,
            "region": region_name(v.region),
            "price_per_gpu_hour": u64_json(v.price_per_gpu_hour),
            "reliability": round(scheduler.scoring.reliability(v), 4),
            "online": v.online,
            "healthy": v.healthy,
            "jailed": v.jailed,
            "draining": v.draining,
            "simulated": v.simulated,
            "verification": v.verification,
            "chosen_gpus": chosen.get(str(v.node_key), 0),
        }
        for v in views[:QUOTE_CANDIDATES]
    ]


def _escrow(
    terms: ix.LeaseTerms, given_max_price: bool, placement: Placement | NotPlaced, seconds: int
) -> dict[str, Any]:
    """What `lease open` would escrow for `seconds`: at the maximum price asked, or else at the dearest
    chosen node's price (the least maximum price this placement needs); and the placement's own cost."""
    shares = placement.shares if isinstance(placement, Placement) else ()
    price: int | None = terms.max_price_per_gpu_hour
    if not given_max_price:
        price = max((s.price_per_gpu_hour for s in shares), default=None)
    needed = None if price is None else escrow_for(price, terms.gpu_count, seconds)
    cost = sum(escrow_for(s.price_per_gpu_hour, s.gpus, seconds) for s in shares) if shares else None
    return {
        "duration_seconds": seconds,
        "max_price_per_gpu_hour": _maybe_u64(price),
        "needed": None if needed is None else _amount(f"the escrow for {seconds} s", needed),
        "cost_at_quoted_prices": None if cost is None else _amount(f"the cost of {seconds} s", cost),
    }


def _maybe_u64(value: int | None) -> str | None:
    return None if value is None else u64_json(value)


def _amount(what: str, value: int) -> str:
    """An amount the quote computed, as the API gives u64s; one no token account could hold is refused
    (no lease could escrow it: the program's checked arithmetic would refuse it too)."""
    if value > U64_MAX:
        raise BadRequest(f"{what} would be {value} IO base units, more than a u64 holds: ask for less")
    return u64_json(value)


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def _json_body(body: bytes) -> Any:
    try:
        return parse_json(body)
    except NotJson as e:  # nested too deep included (the standard parser's RecursionError answered 500)
        raise BadRequest(f"the body is not JSON: {e}") from None


def work_routes(coordinator: Coordinator) -> list[Route]:
    pool = coordinator.pool

    async def submit_job(request: Request) -> Response:
        lease = parse_pubkey("lease", request.path_params["key"])
        body = await request.body()
        if len(body) > MAX_BODY:
            return _error(413, f"a job submission is at most {MAX_BODY} bytes")
        payload = _json_body(body)
        if (
            not isinstance(payload, dict)
            or set(payload) - {"job", "gpus_per_node", "job_number", "signature"}
            or "job" not in payload
        ):
            raise BadRequest(
                'the body must be {"job": {...}, "gpus_per_node": n or null, "job_number": n, "signature": base58}'
            )
        try:
            spec = JobSpec.model_validate(payload["job"])
        except ValidationError as e:
            first = e.errors()[0]
            raise BadRequest(f"job.{'.'.join(map(str, first['loc']))}: {first['msg']}") from None
        per_node = payload.get("gpus_per_node")
        if per_node is not None and (type(per_node) is not int or not 1 <= per_node <= MAX_GPUS_PER_NODE):
            raise BadRequest(f"gpus_per_node must be null or an integer 1..{MAX_GPUS_PER_NODE}")
        number = payload.get("job_number", 1)
        if type(number) is not int or not 1 <= number < 2**31:
            raise BadRequest("job_number must be an integer from 1 (the lease's first job) up")
        try:
            signature = Signature.from_string(str(payload.get("signature", "")))
        except ValueError:
            raise BadRequest("signature: not a base58 Ed25519 signature") from None
        async with pool.acquire() as conn:
            row = await ledger.lease_row(conn, lease)
            if row is None:
                return _error(404, f"lease {lease} is not indexed (yet): retry in a moment")
            message = job_message(Pubkey.from_string(lease), spec, per_node, number)
            if not signature.verify(Pubkey.from_string(row["client"]), message):
                return _error(401, "the signature is not the lease client's over this job and job number")
            if row["status"] == "closed":
                return _error(409, f"lease {lease} is closed")
            if per_node is not None and row["gpu_count"] % per_node:
                raise BadRequest(f"gpus_per_node {per_node} does not divide the lease's {row['gpu_count']} GPUs")
            current = await jobs.current_job_number(conn, lease)  # its spec may fail today's rules: no matter
            expected = 1 if current is None else current + 1
            if number != expected:
                raise BadRequest(
                    f"job_number {number} is not the lease's next job, {expected}"
                    + (f": job {number} was submitted already" if number < expected else "")
                )
            if current is not None:
                shares = await ledger.active_shares(conn, lease=lease)
                nodes = [s.node_key for s in shares]
                states = await jobs.job_states(conn, lease, current)
                if not job_over(states, nodes):
                    return _error(
                        409,
                        f"job {current} of lease {lease} is still running or waiting to "
                        f"({job_progress(states, nodes)}): one job at a time; submit job {number} "
                        "once it has ended",
                    )
                if per_node is not None and any(s.gpus != per_node for s in shares):
                    raise BadRequest(
                        f"lease {lease} is placed already, in shares of "
                        f"{', '.join(str(s.gpus) for s in shares)} GPUs: gpus_per_node must be null "
                        "or match them"
                    )
            if not await jobs.save_job(conn, lease, number, spec, per_node, row["client"], str(signature)):
                return _error(409, f"job {number} of lease {lease} was submitted meanwhile")
        return JSONResponse({"lease": lease, "job_number": number, "accepted": True}, status_code=201)

    async def job_view(request: Request) -> Response:
        """The lease's placement, job, node states and logs: for its client or a supplier of its nodes."""
        lease = parse_pubkey("lease", request.path_params["key"])
        query = parse_query(request.query_params, JOB_VIEW_PARAMS)
        after, tail = query["after"], query.get("tail")
        async with pool.acquire() as conn:
            refused = await authorize(conn, request, lease, b"", suppliers=True)
            if refused is not None:
                return refused
            view = await jobs.job_view(conn, lease, after=after, tail=tail, page=LOG_LINES)
            if view is None:
                return _error(404, f"no job or placement for lease {lease}")
            job, placement, statuses, logs, more = view
            sealed = await jobs.sealed_secrets(conn, lease, job["number"]) if job else {}
            keys = await jobs.sealed_checkpoint_keys(conn, lease)
            ray = await ray_head(conn, job, placement)
        checkpoint = await asyncio.to_thread(coordinator.checkpoints.summary, lease)
        return JSONResponse(
            {
                "lease": lease,
                "job_number": job["number"] if job else None,
                "job": json.loads(job["spec"]) if job else None,
                "gpus_per_node": job["gpus_per_node"] if job else None,
                "placement": {**dict(placement), "updated_at": placement["updated_at"].isoformat()}
                if placement
                else None,
                "nodes": [{**dict(s), "at": s["at"].isoformat()} for s in statuses],
                # the nodes the client sealed the current job's secrets to (the values never leave them)
                "secrets_sealed_to": sorted(sealed),
                # the nodes the client sealed the lease's checkpoint key to (the key never leaves them)
                "checkpoint_key_sealed_to": sorted(keys),
                "logs": [dict(r) for r in logs],
                "more": more,
                # the newest checkpoint in the store (sizes; None: none yet, or only a small one)
                "checkpoint": checkpoint,
                "ray": ray,
            }
        )

    async def ray_head(conn: Connection, job: Any, placement: Any) -> dict[str, str] | None:
        """A Ray job's head (rank 0) as the client reaches it: the address and cluster ports its
        worker advertised in its last session (from the ledger, so every replica answers), laid out
        by gpunet.raycluster. None: no Ray job, not placed, its worker never connected, or it
        advertises no usable ports."""
        if job is None or not json.loads(job["spec"]).get("ray") or not placement or not placement["nodes"]:
            return None
        head = Pubkey.from_string(placement["nodes"][0])
        reach = await node_rows.reach(conn, head)
        if reach is None or reach[1] is None:
            return None
        try:
            return {"head": str(head), **ray_endpoints(reach[0], reach[1])}
        except ValueError:  # too few ports: its worker refuses the job, saying so
            return None

    async def reach(request: Request) -> Response:
        """Where the client reaches its lease's nodes (gpunet.reach): this replica's relay (any replica
        relays for every node) and each node's direct address, if it takes clients directly. Only
        where to knock: the client pins each node's key from the chain."""
        parse_query(request.query_params, ())
        lease = parse_pubkey("lease", request.path_params["key"])
        async with pool.acquire() as conn:
            refused = await authorize(conn, request, lease, b"", suppliers=False)
            if refused is not None:
                return refused
            shares = await ledger.active_shares(conn, lease=lease)
            direct = {s.node_key: await node_rows.direct_tunnel(conn, s.node_key) for s in shares}
        gateway = urlsplit(coordinator.settings.advertise_gateway_url or coordinator.gateway.url)
        return JSONResponse(
            {
                "lease": lease,
                "relay": urlunsplit((gateway.scheme, gateway.netloc, "/client", "", "")),
                "nodes": [
                    {
                        "rank": s.rank,
                        "node_key": str(s.node_key),
                        "direct": f"ws://{direct[s.node_key]}/client" if direct[s.node_key] else None,
                    }
                    for s in shares
                ],
            }
        )

    def redispatch(lease: str, nodes: Iterable[str]) -> None:
        """These nodes of the lease get its job again, now with what the client sealed to them."""
        coordinator.shared.give_again([Pubkey.from_string(key) for key in nodes], lease)

    async def give_secrets(request: Request) -> Response:
        """The client's secrets of the lease's current job, sealed to each of its nodes (signed)."""
        parse_query(request.query_params, ())
        lease = parse_pubkey("lease", request.path_params["key"])
        body = await request.body()
        if len(body) > MAX_BODY:
            return _error(413, f"a secrets submission is at most {MAX_BODY} bytes")
        async with pool.acquire() as conn:
            refused = await authorize(conn, request, lease, body, suppliers=False)
            if refused is not None:
                return refused
            payload = _json_body(body)
            shape = '{"job_number": n, "nodes": {node key: {secret name: base64 sealed box}}}'
            if not isinstance(payload, dict) or set(payload) != {"job_number", "nodes"}:
                raise BadRequest(f"the body must be {shape}")
            number, nodes = payload["job_number"], payload["nodes"]
            if type(number) is not int or not isinstance(nodes, dict) or not nodes:
                raise BadRequest(f"the body must be {shape}, with at least one node")
            try:
                job = await jobs.current_job(conn, lease)
            except jobs.UnreadableJob as e:
                return _error(409, str(e))
            if job is None or job.number != number:
                return _error(409, f"job {number} is not lease {lease}'s current job")
            names = set(job.spec.secrets)
            for key, values in nodes.items():
                parse_pubkey("node key", key)
                if not isinstance(values, dict) or set(values) != names:
                    raise BadRequest(
                        f"node {key}: the secrets must be exactly the job's ({', '.join(sorted(names)) or 'none'})"
                    )
                for name, sealed in values.items():
                    if not isinstance(sealed, str) or not 0 < len(sealed) <= 65536:
                        raise BadRequest(f"node {key}: secret {name} must be a base64 sealed box")
            await jobs.save_secrets(conn, lease, number, nodes)
        redispatch(lease, nodes)
        return JSONResponse({"lease": lease, "job_number": number, "sealed_to": sorted(nodes)}, status_code=201)

    async def give_checkpoint_key(request: Request) -> Response:
        """The client's checkpoint key of the lease, sealed to each of its nodes (signed)."""
        parse_query(request.query_params, ())
        lease = parse_pubkey("lease", request.path_params["key"])
        body = await request.body()
        if len(body) > MAX_BODY:
            return _error(413, f"a checkpoint key submission is at most {MAX_BODY} bytes")
        async with pool.acquire() as conn:
            refused = await authorize(conn, request, lease, body, suppliers=False)
            if refused is not None:
                return refused
            payload = _json_body(body)
            shape = '{"nodes": {node key: base64 sealed box}}'
            nodes = payload.get("nodes") if isinstance(payload, dict) and set(payload) == {"nodes"} else None
            if not isinstance(nodes, dict) or not nodes:
                raise BadRequest(f"the body must be {shape}, with at least one node")
            for key, sealed in nodes.items():
                parse_pubkey("node key", key)
                if not isinstance(sealed, str) or not 0 < len(sealed) <= 1024:
                    raise BadRequest(f"node {key}: the sealed key must be a base64 sealed box")
            await jobs.save_checkpoint_keys(conn, lease, nodes)
        redispatch(lease, nodes)
        return JSONResponse({"lease": lease, "sealed_to": sorted(nodes)}, status_code=201)

    async def quote(request: Request) -> Response:
        values = parse_query(request.query_params, QUOTE_PARAMS)
        if "gpu_count" not in values:
            raise BadRequest("gpu_count is required")
        terms = ix.LeaseTerms(
            values["gpu_model"],
            values["min_vram_gb"],
            values["gpu_count"],
            values["region"],
            values.get("max_price_per_gpu_hour", 2**64 - 1),
            values.get("duration_seconds", 3600),
        )
        try:
            lease_request = LeaseRequest("quote", terms, gpus_per_node=values.get("gpus_per_node"))
        except SchedulerError as e:
            raise BadRequest(str(e)) from None
        placement = coordinator.quote(lease_request)
        answer = {
            "terms": {
                "gpu_model": gpu_model_name(terms.gpu_model),
                "gpu_count": terms.gpu_count,
                "min_vram_gb": terms.min_vram_gb,
                "region": region_name(terms.region),
                "max_price_per_gpu_hour": _maybe_u64(values.get("max_price_per_gpu_hour")),
                "gpus_per_node": values.get("gpus_per_node"),
            },
            **_describe(placement),
            "candidates": _candidates(coordinator.shared.scheduler, terms, placement),
        }
        if "duration_seconds" in values:
            given = "max_price_per_gpu_hour" in values
            answer["escrow"] = _escrow(terms, given, placement, values["duration_seconds"])
        return JSONResponse(answer)

    async def telemetry(request: Request) -> Response:
        """The node's last heartbeat as this coordinator received it: its GPUs' telemetry."""
        parse_query(request.query_params, ())
        key = parse_pubkey("key", request.path_params["key"])
        async with pool.acquire() as conn:  # a node account names its node key
            node = await indexed.row(conn, "nodes", "node", key)
        node_key = Pubkey.from_string(node["node_key"] if node is not None else key)
        last = coordinator.shared.telemetry.get(node_key)
        if last is None:
            return _error(404, f"no heartbeat from node {key} since this coordinator started")
        beat = last.heartbeat
        return JSONResponse(
            {
                "node_key": str(node_key),
                "received_at": last.received_at,
                "connected": coordinator.gateway.online(node_key),
                "healthy": beat.healthy,
                "gpus": [gpu.model_dump(mode="json") for gpu in beat.gpus],
            }
        )

    async def workers(request: Request) -> Response:
        values = parse_query(request.query_params, PAGE)
        limit, offset = values["limit"], values["offset"]
        fleet, outages = coordinator.fleet, coordinator.outages
        known = sorted(fleet.nodes.items(), key=lambda kv: str(kv[0]))
        return JSONResponse(
            {
                **page_body(
                    [
                        {
                            "node_key": str(key),
                            "connected": seen.connected,
                            "online": fleet.online(key),
                            "healthy": seen.healthy,
                            "simulated": seen.simulated,
                            "last_heartbeat": seen.last_heartbeat,
                        }
                        for key, seen in known[offset : offset + limit + 1]
                    ],
                    limit,
                    offset,
                ),
                # a correlated outage pauses slashing (and moving shares) until the fleet is heard again
                "slashing": {
                    "paused": outages.slashing_paused,
                    "reason": outages.slashing_paused_reason,
                    # a region's correlated outage pauses slashing there only
                    "paused_regions": [
                        {"region": region_name(r), "since": since}
                        for r, since in sorted(outages.paused_regions.items())
                    ],
                },
            }
        )

    async def authorize(
        conn: Connection, request: Request, lease: str, body: bytes, *, suppliers: bool
    ) -> Response | None:
        """None when the request is signed (coordinator.api.signed) by the lease's client (or, with
        `suppliers`, by the supplier of a node the lease is on); else the 4xx to answer."""
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        try:
            await check_signed(conn, request.method, target, request.headers, body, lease, suppliers=suppliers)
        except Refused as e:
            return _error(e.status, e.message)
        return None

    async def files(request: Request) -> Response:
        """The latest checkpoint files of the lease's rank `rank` (default 0), for the lease's client
        only (a signed GET)."""
        rank = parse_query(request.query_params, FILES_PARAMS)["rank"]
        lease = parse_pubkey("lease", request.path_params["key"])
        async with pool.acquire() as conn:
            refused = await authorize(conn, request, lease, b"", suppliers=False)
            if refused is not None:
                return refused
            latest = await jobs.latest_checkpoint(conn, lease, rank)  # a small one, through the gateway
            signers = set((await jobs.rank_holders(conn, lease)).get(rank, []))
        try:  # the checkpoint store's newest one, when newer than a small one sent through the gateway
            stored = await asyncio.to_thread(latest_sealed, coordinator.checkpoints, lease, signers, rank)
        except TooLargeToServe as e:
            return _error(413, f"{e}: it is kept for the lease's nodes (resume and failover)")
        if stored is not None and (latest is None or stored[0].manifest.seq / 1000 > latest[1].timestamp()):
            signed, chunks = stored
            return JSONResponse(
                {
                    "lease": lease,
                    "rank": rank,
                    "node_key": signed.manifest.node_key,
                    "received_at": datetime.fromtimestamp(signed.manifest.seq / 1000, UTC).isoformat(),
                    # sealed under the lease's key, which only the client and its nodes hold: the
                    # client checks and opens them (gpunet.checkpoint.open_checkpoint)
                    "sealed": {"manifest": signed.model_dump(mode="json"), "chunks": chunks},
                    "files": [],
                }
            )
        if latest is None:
            return _error(
                404,
                f"lease {lease} has no checkpoint yet of rank {rank}: a job's checkpoint is what it writes to "
                "$GPUNET_CHECKPOINT_DIR, sent by its node as it runs",
            )
        node_key, received_at, checkpoint = latest
        return JSONResponse(
            {
                "lease": lease,
                "rank": rank,
                "node_key": node_key,
                "received_at": received_at.isoformat(),
                "files": [f.model_dump() for f in checkpoint],
            }
        )

    used: dict[str, int] = {}  # operator signatures already acted on -> their 'at' (pruned past the window)

    async def resume_slashing(request: Request) -> Response:
        """The operator ends a correlated-outage pause (signed by the coordinator's attester key)."""
        body = await request.body()
        if len(body) > 4096:
            return _error(413, "the body is at most 4096 bytes")
        payload = _json_body(body)
        if not isinstance(payload, dict) or set(payload) != {"region", "at", "signature"}:
            raise BadRequest('the body must be {"region": name or null, "at": unix seconds, "signature": base58}')
        name, at = payload["region"], payload["at"]
        if (name is not None and not isinstance(name, str)) or type(at) is not int:
            raise BadRequest("region must be a region name or null, at an integer (unix seconds)")
        try:
            code = None if name is None else region(name)
            signature = Signature.from_string(str(payload["signature"]))
        except CatalogError as e:
            raise BadRequest(str(e)) from None
        except ValueError:
            raise BadRequest("signature: not a base58 Ed25519 signature") from None
        if not signature.verify(coordinator.attester_key.pubkey(), operator_message("resume-slashing", name, at)):
            return _error(401, "the signature is not this coordinator's attester key's over this request")
        now = time.time()
        for seen in [s for s, t in used.items() if t < now - OPERATOR_CLOCK_SKEW_SECONDS]:
            del used[seen]  # older requests are refused as stale anyway
        if abs(now - at) > OPERATOR_CLOCK_SKEW_SECONDS or str(signature) in used:
            return _error(
                401,
                f"a stale or replayed request (sign a fresh one: 'at' within "
                f"{OPERATOR_CLOCK_SKEW_SECONDS} s of the coordinator's clock)",
            )
        try:
            where = coordinator.outages.resume_slashing(code)
        except LookupError as e:
            return _error(409, str(e))
        used[str(signature)] = at
        return JSONResponse({"resumed": where})

    def leader_only(route: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
        """A route that answers from the leader's memory (the fleet it hears, the scheduler, its
        dispatches): a follower redirects it to the leader's API (307 keeps the method and body; the
        signature covers only the path, query and body), or says none leads right now (503)."""

        async def answer(request: Request) -> Response:
            if coordinator.leading:
                return await route(request)
            lead = await coordinator.other_leader()
            if lead is None:
                return _error(503, "no coordinator replica leads right now (an election is under way): retry shortly")
            url = lead.api_url.rstrip("/") + request.url.path + (f"?{request.url.query}" if request.url.query else "")
            return JSONResponse(
                {"error": f"this coordinator replica does not lead; the leader answers at {url}", "leader": url},
                status_code=307,
                headers={"Location": url},
            )

        return answer

    return [
        Route("/leases/{key}/job", submit_job, methods=["POST"]),
        Route("/leases/{key}/job", job_view),
        Route("/leases/{key}/files", files),
        Route("/leases/{key}/reach", reach),
        Route("/leases/{key}/secrets", leader_only(give_secrets), methods=["POST"]),
        Route("/leases/{key}/checkpoint-key", leader_only(give_checkpoint_key), methods=["POST"]),
        Route("/quote", leader_only(quote)),
        Route("/workers", leader_only(workers)),
        Route("/nodes/{key}/telemetry", leader_only(telemetry)),
        Route("/slashing/resume", leader_only(resume_slashing), methods=["POST"]),
        *checkpoint_routes(coordinator.checkpoints, coordinator.checkpoint_holder, coordinator.checkpoint_signers),
        *endpoint_routes(coordinator.endpoints),  # on every replica: the ledger and this replica's relay
    ]
