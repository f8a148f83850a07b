"""The OpenAPI 3.1 document of the read API, built from the same declarations as the routes."""

from __future__ import annotations

from functools import cache
from typing import Any

from coordinator.api.params import PUBKEY_SCHEMA, SIGNATURE_SCHEMA, Param
from coordinator.api.resources import PAGE, RESOURCES

__all__ = ["openapi_document"]

_ERROR = {
    "description": "bad parameter",
    "content": {
        "application/json": {
            "schema": {"type": "object", "properties": {"error": {"type": "string"}}, "required": ["error"]}
        }
    },
}
_KEY = {"name": "key", "in": "path", "required": True, "schema": PUBKEY_SCHEMA}


def _query(p: Param) -> dict[str, Any]:
    return {
        "name": p.name,
        "in": "query",
        "required": False,
        "schema": p.schema(),
        **({"description": p.description} if p.description else {}),
    }


def _op(summary: str, parameters: list[dict[str, Any]], json_body: bool = True) -> dict[str, Any]:
    content = (
        {"application/json": {"schema": {"type": "object"}}}
        if json_body
        else {"text/plain": {"schema": {"type": "string"}}}
    )
    return {
        "get": {
            "summary": summary,
            "parameters": parameters,
            "responses": {"200": {"description": "ok", "content": content}, "400": _ERROR, "404": _ERROR},
        }
    }


@cache
def openapi_document() -> dict[str, Any]:
    paths: dict[str, Any] = {
        "/health": _op("Database reachable; where the indexer stands.", []),
        "/metrics": _op("Prometheus metrics (gpunet_indexer_*).", [], json_body=False),
    }
    for r in RESOURCES.values():
        paths[f"/{r.name}"] = _op(r.description, [_query(p) for p in (*r.filters, *PAGE)])
        if r.key:
            paths[f"/{r.name}/{{key}}"] = _op(f"One of {r.name}, by {r.key} account.", [_KEY])
    paths["/audit/leases/{key}"] = _op("Check a lease's events, rows, account and vault against the chain.", [_KEY])
    paths["/audit/providers/{key}"] = _op(
        "Check a provider's events, rows, account and stake vault against the chain.", [_KEY]
    )
    # A running coordinator's client routes (coordinator.api.work).
    from coordinator.api.work import JOB_VIEW_PARAMS, QUOTE_PARAMS

    job = _op(
        "A lease's placement, its current job and number, the job's state per node and log lines: a page "
        "after ?after= (`more` says whether another follows), or the last ?tail= lines.",
        [_KEY, *(_query(p) for p in JOB_VIEW_PARAMS)],
    )
    job["post"] = {
        "summary": "Give a lease its next job (number 1, 2, ...; one at a time: the current one must have "
        "ended), signed by the lease's client (gpunet.protocol.job_message).",
        "parameters": [_KEY],
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {
                    "schema": {
                        "type": "object",
                        "required": ["job", "signature"],
                        "properties": {
                            "job": {"type": "object"},
                            "gpus_per_node": {"type": ["integer", "null"]},
                            "job_number": {"type": "integer", "minimum": 1, "default": 1},
                            "signature": {"type": "string"},
                        },
                    }
                }
            },
        },
        "responses": {"201": {"description": "accepted"}, "400": _ERROR, "401": _ERROR, "404": _ERROR, "409": _ERROR},
    }
    paths["/leases/{key}/job"] = job
    from gpunet.protocol import FILES_AT_HEADER, FILES_SIGNATURE_HEADER

    files = _op(
        "The lease's latest checkpoint files (path, sha256, base64 content), the node that sent them and "
        "when: the only job outputs the coordinator keeps. Readable only by the lease's client: headers "
        f"{FILES_AT_HEADER} (unix milliseconds, within 120 s of the coordinator's clock) and {FILES_SIGNATURE_HEADER} "
        "(its wallet's signature over gpunet.protocol.files_message, each used once); 401 otherwise.",
        [
            _KEY,
            {"name": FILES_AT_HEADER, "in": "header", "required": True, "schema": {"type": "string"}},
            {"name": FILES_SIGNATURE_HEADER, "in": "header", "required": True, "schema": SIGNATURE_SCHEMA},
        ],
    )
    files["get"]["responses"]["401"] = _ERROR
    paths["/leases/{key}/files"] = files
    paths["/quote"] = _op(
        "Which nodes a lease would get now, at what burn rate, or why none; the matching nodes (price, region, "
        "reliability, online state); with ?duration_seconds= the escrow `lease open` needs. GPU models and "
        "regions by name (or catalog code), answered by name.",
        [_query(p) for p in QUOTE_PARAMS],
    )
    paths["/workers"] = _op(
        "Workers connected to the gateway now (simulated ones say so), and whether a "
        "correlated outage pauses slashing (for the fleet, or per region).",
        [],
    )
    paths["/slashing/resume"] = {
        "post": {
            "summary": "The operator ends a correlated-outage pause of slashing (the fleet's, or one region's): "
            "signed with the coordinator's attester key over gpunet.protocol.operator_message.",
            "requestBody": {
                "required": True,
                "content": {
                    "application/json": {
                        "schema": {
                            "type": "object",
                            "required": ["region", "at", "signature"],
                            "properties": {
                                "region": {"type": ["string", "null"]},
                                "at": {"type": "integer"},
                                "signature": {"type": "string"},
                            },
                        }
                    }
                },
            },
            # 404: an API without a running coordinator (`coordinator api`) has no such route
            "responses": {
                "200": {"description": "resumed"},
                "400": _ERROR,
                "401": _ERROR,
                "404": _ERROR,
                "409": _ERROR,
            },
        }
    }
    return {"openapi": "3.1.0", "info": {"title": "gpunet coordinator API", "version": "1"}, "paths": paths}
