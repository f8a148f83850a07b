"""The OpenAPI 3.1 document of the read API, built from the same declarations as the routes."""

from __future__ import annotations

from functools import cache
from typing import Any

from coordinator.api import schemas
from coordinator.api.params import PUBKEY_SCHEMA, SIGNATURE_SCHEMA, Param
from coordinator.api.resources import PAGE, RESOURCES

__all__ = ["openapi_document"]

_KEY = {"name": "key", "in": "path", "required": True, "schema": PUBKEY_SCHEMA}
_WHY = {
    400: "a bad parameter or body (the message says which and why)",
    401: "not signed by whom it must be",
    403: "signed by a node that holds no share of the lease now",
    404: "not found (or no such route on this server)",
    409: "refused in the current state",
    410: "the lease has ended (closing or closed)",
    413: "too large",
    429: "over the lease's limits (Retry-After says when to try again)",
    503: "the database or the chain could not be read",
}


def _json(description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _errors(*statuses: int) -> dict[str, Any]:
    return {str(status): _json(_WHY[status], schemas.ERROR) for status in statuses}


def _query(p: Param) -> dict[str, Any]:
    return {
        "name": p.name,
        "in": "query",
        "required": p.required,
        "schema": p.schema(),
        **({"description": p.description} if p.description else {}),
    }


def _op(
    summary: str, parameters: list[dict[str, Any]], ok: dict[str, Any], *errors: int, status: int = 200
) -> dict[str, Any]:
    """One operation: its answer `ok` (a response object) and its documented errors (400 and 404 always:
    any route refuses unknown parameters, and a read-only API has no client routes)."""
    return {
        "summary": summary,
        "parameters": parameters,
        "responses": {str(status): ok, **_errors(400, 404, *errors)},
    }


def _checkpoint_paths(paths: dict[str, Any]) -> None:
    """The checkpoint store's routes, for the lease's nodes (coordinator.checkpoints.checkpoint_routes)."""
    from gpunet.checkpoint import AT_HEADER, NODE_HEADER, SIGNATURE_HEADER

    signed = [
        {"name": NODE_HEADER, "in": "header", "required": True, "schema": PUBKEY_SCHEMA},
        {"name": AT_HEADER, "in": "header", "required": True, "schema": {"type": "string"}},
        {"name": SIGNATURE_HEADER, "in": "header", "required": True, "schema": SIGNATURE_SCHEMA},
    ]
    how = (
        f"For the lease's nodes only: signed by a node key that holds a share of the lease now ({NODE_HEADER}, "
        f"{AT_HEADER} in unix milliseconds within 120 s, {SIGNATURE_HEADER} over "
        "gpunet.checkpoint.request_message: method, path and query, time and the body's SHA-256)."
    )
    chunk = {"name": "id", "in": "path", "required": True, "schema": {"type": "string", "pattern": "^[0-9a-f]{64}$"}}
    seq = {"name": "seq", "in": "path", "required": True, "schema": {"type": "string", "pattern": "^[0-9]+$"}}
    rank = {
        "name": "rank",
        "in": "query",
        "required": False,
        "description": "whose checkpoints: the lease's node of this rank (a multi-node lease's nodes have one each)",
        "schema": {"type": "integer", "minimum": 0, "default": 0},
    }
    octets = {"description": "bytes", "content": {"application/octet-stream": {"schema": {"type": "string"}}}}
    base = "/leases/{key}/checkpoint"
    paths[base + "/chunks/{id}"] = {
        "put": {
            **_op(
                f"Store one sealed chunk (the body; its SHA-256 is its id), streamed to the store. {how}",
                [_KEY, chunk, *signed],
                _json("stored", schemas.CHUNK_STORED),
                401,
                403,
                413,
                status=201,
            ),
            "requestBody": {"required": True, "content": {"application/octet-stream": {"schema": {"type": "string"}}}},
        },
        "get": _op(f"One sealed chunk of the lease, streamed. {how}", [_KEY, chunk, *signed], octets, 401, 403),
    }
    paths[base + "/missing"] = {
        "post": {
            **_op(
                f"Of the chunks a signed manifest (the body) names, those not in the store yet. {how}",
                [_KEY, *signed],
                _json("the chunks to send", schemas.CHUNKS_MISSING),
                401,
                403,
                413,
            ),
            "requestBody": {"required": True, "content": {"application/json": {"schema": schemas.SIGNED_MANIFEST}}},
        }
    }
    paths[base + "/manifests"] = {
        "get": _op(
            f"The stored checkpoints of the lease's rank ?rank= (manifest sequence numbers), newest first. {how}",
            [_KEY, rank, *signed],
            _json("ok", schemas.MANIFEST_SEQS),
            400,
            401,
            403,
        )
    }
    paths[base + "/manifests/{seq}"] = {
        "put": {
            **_op(
                "Store a checkpoint's manifest of the sending node's rank (the manifest's `rank`), signed by that "
                "node, once every chunk it names is in the store (403 if the node never held that rank of the "
                f"lease, 409 if a chunk is missing). {how}",
                [_KEY, seq, *signed],
                _json("stored", schemas.MANIFEST_STORED),
                401,
                403,
                409,
                413,
                status=201,
            ),
            "requestBody": {"required": True, "content": {"application/json": {"schema": schemas.SIGNED_MANIFEST}}},
        },
        "get": _op(
            "One stored manifest of the lease's rank ?rank= (409: its signer never held that rank of the lease, "
            "it is not served). " + how,
            [_KEY, seq, rank, *signed],
            _json("the signed manifest", schemas.SIGNED_MANIFEST),
            400,
            401,
            403,
            409,
        ),
    }


def _endpoint_paths(paths: dict[str, Any], signed: list[dict[str, Any]], how: str) -> None:
    """The served endpoints and the client's routes that manage them (coordinator.endpoints)."""
    from coordinator.endpoints.routes import LOG_PARAMS

    name = {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}
    lease = {**_KEY, "name": "lease"}
    rest = {"name": "path", "in": "path", "required": True, "schema": {"type": "string"}}
    bearer = {
        "name": "Authorization",
        "in": "header",
        "required": False,
        "description": "Bearer <token> (a token the lease's client created); none for a public endpoint",
        "schema": {"type": "string"},
    }
    answer = {"description": "the job's answer, streamed as it sends it", "content": {"*/*": {"schema": {}}}}
    unavailable = _json("no node of the lease serves it now (Retry-After says when to try again)", schemas.ERROR)
    served: dict[str, Any] = {}
    for method in ("get", "post", "put", "patch", "delete"):
        served[method] = {
            "summary": "The lease's job's exposed HTTP port `name`, at the same URL whichever node serves it: "
            "the request (the path after the name, the query, the body) goes to one of the lease's nodes "
            "through the relay and the answer streams back. Open to anyone if the client made it public, "
            "else to a bearer token of the lease (401: none, or one never issued; 403: revoked, or another "
            "lease's). Not billed apart from the lease.",
            "parameters": [lease, name, rest, bearer],
            "responses": {
                "200": answer,
                **_errors(400, 401, 403, 404, 410, 413, 429),
                "503": unavailable,
            },
        }
    paths["/endpoints/{lease}/{name}/{path}"] = served
    paths["/endpoints/{lease}/{name}"] = {
        "get": {
            "summary": "Redirects to the endpoint's URL with its slash (a page's relative links need it).",
            "parameters": [lease, name],
            "responses": {"308": {"description": "to /endpoints/{lease}/{name}/"}, **_errors(404)},
        }
    }
    paths["/leases/{key}/endpoints"] = {
        "get": _op(
            "The lease's current job's exposed ports: each one's URL (http ones), whether it is public, and "
            "how its nodes stand on this replica; the lease's live endpoint tokens (ids and labels, never "
            f"the tokens) and the limits. Only for the lease's client, as {how}.",
            [_KEY, *signed],
            _json("ok", schemas.ENDPOINTS),
            401,
        )
    }
    paths["/leases/{key}/endpoints/log"] = {
        "get": _op(
            "The access log of the lease's endpoints, oldest first: a page after ?after= (`more` says whether "
            "another follows), or the last ?tail= entries; every request to them, refused ones too (the path "
            f"without its query). Only for the lease's client, as {how}.",
            [_KEY, *(_query(p) for p in LOG_PARAMS), *signed],
            _json("ok", schemas.ENDPOINT_LOG),
            401,
        )
    }
    paths["/leases/{key}/endpoints/{name}"] = {
        "post": {
            "summary": "Make one of the job's exposed HTTP ports public (anyone may call it, no token) or not. "
            f"Only by the lease's client, as {how}.",
            "parameters": [_KEY, name, *signed],
            "requestBody": {
                "required": True,
                "content": {
                    "application/json": {
                        "schema": {
                            "type": "object",
                            "required": ["public"],
                            "properties": {"public": {"type": "boolean"}},
                        }
                    }
                },
            },
            "responses": {"200": _json("set", schemas.ENDPOINT_PUBLIC), **_errors(400, 401, 404, 410, 413)},
        }
    }
    paths["/leases/{key}/endpoint-tokens"] = {
        "post": {
            "summary": "A new bearer token for the lease's endpoints, shown this once (the coordinator keeps only "
            f"its SHA-256); at most 64 live ones (409). Only by the lease's client, as {how}.",
            "parameters": [_KEY, *signed],
            "requestBody": {
                "required": False,
                "content": {
                    "application/json": {
                        "schema": {"type": "object", "properties": {"label": {"type": "string", "maxLength": 64}}}
                    }
                },
            },
            "responses": {"201": _json("created", schemas.ENDPOINT_TOKEN), **_errors(400, 401, 404, 409, 410, 413)},
        }
    }
    paths["/leases/{key}/endpoint-tokens/{id}"] = {
        "delete": {
            "summary": "Revoke one of the lease's endpoint tokens (then 403 wherever it is shown). Only by the "
            f"lease's client, as {how}.",
            "parameters": [
                _KEY,
                {
                    "name": "id",
                    "in": "path",
                    "required": True,
                    "schema": {"type": "string", "pattern": "^[0-9a-f]{16}$"},
                },
                *signed,
            ],
            "responses": {"200": _json("revoked", schemas.ENDPOINT_TOKEN_REVOKED), **_errors(400, 401, 404)},
        }
    }


@cache
def openapi_document() -> dict[str, Any]:
    paths: dict[str, Any] = {
        "/health": {
            "get": {
                **_op("Database reachable; where the indexer stands.", [], _json("ok", schemas.HEALTH)),
                "responses": {
                    "200": _json("ok", schemas.HEALTH),
                    "400": _json(_WHY[400], schemas.ERROR),
                    "503": _json(
                        "the database is unreachable",
                        {
                            "type": "object",
                            "properties": {"status": {"enum": ["unavailable"]}, "database": {"type": "string"}},
                            "required": ["status", "database"],
                            "additionalProperties": False,
                        },
                    ),
                },
            }
        },
        "/healthz": {
            "get": _op("Liveness: the process answers (nothing else is checked).", [], _json("ok", schemas.HEALTHZ))
        },
        "/readyz": {
            "get": {
                **_op(
                    "Readiness: the database and the chain RPC answer now and, on a coordinator, its attester holds "
                    "at least GPUNET_ATTESTER_MIN_LAMPORTS (as last read); each check says ok or why not.",
                    [],
                    _json("ready", schemas.READINESS),
                ),
                "responses": {
                    "200": _json("ready", schemas.READINESS),
                    "400": _json(_WHY[400], schemas.ERROR),
                    "503": _json("not ready: the checks say which failed", schemas.READINESS),
                },
            }
        },
        "/metrics": {
            "get": _op(
                "Prometheus metrics (gpunet_indexer_*, gpunet_coordinator_*).",
                [],
                {"description": "ok", "content": {"text/plain": {"schema": {"type": "string"}}}},
                503,
            )
        },
    }
    for r in RESOURCES.values():
        paths[f"/{r.name}"] = {
            "get": _op(
                r.description, [_query(p) for p in (*r.filters, *PAGE)], _json("a page", schemas.page_schema(r.table))
            )
        }
        if r.key:
            paths[f"/{r.name}/{{key}}"] = {
                "get": _op(f"One of {r.name}, by {r.key} account.", [_KEY], _json("ok", schemas.item_schema(r.table)))
            }
    paths["/slashes/{signature}/evidence"] = {
        "get": _op(
            "The slashes of one transaction, each with the evidence the coordinator recorded for it (null when it "
            "holds none): its canonical JSON (sorted keys, no spaces) hashes (SHA-256) to the slash's evidence_hash "
            "on chain.",
            [
                {"name": "signature", "in": "path", "required": True, "schema": SIGNATURE_SCHEMA},
                *(_query(p) for p in PAGE),
            ],
            _json("a page", schemas.SLASH_EVIDENCE),
        )
    }
    audit = _json("the audit's verdict (ok) and every difference", schemas.AUDIT)
    paths["/audit/leases/{key}"] = {
        "get": _op("Check a lease's events, rows, account and vault against the chain.", [_KEY], audit, 503)
    }
    paths["/audit/providers/{key}"] = {
        "get": _op(
            "Check a provider's events, rows, account and stake vault against the chain; the key is its "
            "supplier's wallet or its provider account (`given` says which).",
            [_KEY],
            audit,
            503,
        )
    }
    paths["/nodes/{key}/verifications"] = {
        "get": _op(
            "A node's GPU verification challenges and verdicts, newest first (by node account or node key).",
            [_KEY, *(_query(p) for p in PAGE)],
            _json("a page", schemas.NODE_VERIFICATIONS),
        )
    }
    paths["/rewards/epochs"] = {
        "get": _op(
            "Every epoch's reward tree the coordinator built, newest first: its root, total and leaves, and "
            "whether its root landed and its claims were cranked.",
            [_query(p) for p in PAGE],
            _json("a page", schemas.REWARD_EPOCHS),
        )
    }
    paths["/rewards/epochs/{epoch}"] = {
        "get": _op(
            "One epoch's reward inputs (the uptime samples per node, the open pools' stake, the multipliers) and "
            "every pool's leaf: `gpunet rewards audit EPOCH` rebuilds the tree from the inputs and compares its "
            "root with the chain's.",
            [
                {
                    "name": "epoch",
                    "in": "path",
                    "required": True,
                    "schema": {"type": "integer", "minimum": 0, "maximum": 2**63 - 1},
                }
            ],
            _json("ok", schemas.REWARD_EPOCH),
        )
    }
    # A running coordinator's client routes (coordinator.api.work).
    from coordinator.api.work import FILES_PARAMS, JOB_VIEW_PARAMS, QUOTE_PARAMS
    from gpunet.protocol import (
        REQUEST_AT_HEADER,
        REQUEST_NONCE_HEADER,
        REQUEST_SIGNATURE_HEADER,
        REQUEST_WALLET_HEADER,
    )

    signed = [
        {"name": REQUEST_AT_HEADER, "in": "header", "required": True, "schema": {"type": "string"}},
        {"name": REQUEST_WALLET_HEADER, "in": "header", "required": True, "schema": {"type": "string"}},
        {"name": REQUEST_NONCE_HEADER, "in": "header", "required": False, "schema": {"type": "string"}},
        {"name": REQUEST_SIGNATURE_HEADER, "in": "header", "required": True, "schema": SIGNATURE_SCHEMA},
    ]
    how = (
        f"a signed request: {REQUEST_AT_HEADER} (unix milliseconds, within 60 s of the coordinator's clock), "
        f"{REQUEST_WALLET_HEADER} and {REQUEST_SIGNATURE_HEADER} (the wallet's signature over "
        "gpunet.protocol.request_message: method, path and query, the body's SHA-256, the time; each used once)"
    )
    paths["/leases/{key}/job"] = {
        "get": _op(
            "A lease's placement, its current job and number, the job's state per node, the nodes its secrets "
            "are sealed to, and log lines: a page after ?after= (`more` says whether another follows), or the "
            "last ?tail= lines. Private: readable only by the lease's client or the supplier of a node the lease "
            f"is on, as {how}; anyone else gets 401 and nothing of the lease (its placement is on chain).",
            [_KEY, *(_query(p) for p in JOB_VIEW_PARAMS), *signed],
            _json("ok", schemas.JOB_VIEW),
            401,
        ),
        "post": {
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
            "responses": {"201": _json("accepted", schemas.JOB_ACCEPTED), **_errors(400, 401, 404, 409, 413)},
        },
    }
    paths["/leases/{key}/files"] = {
        "get": _op(
            "The lease's latest checkpoint files (path, sha256, base64 content) of one rank (?rank=, default 0: a "
            "multi-node lease's nodes checkpoint one each), the node that sent them and when: the only job outputs "
            f"the coordinator keeps. Readable only by the lease's client, as {how}.",
            [_KEY, *(_query(p) for p in FILES_PARAMS), *signed],
            _json("the checkpoint", schemas.LEASE_FILES),
            401,
        )
    }
    paths["/leases/{key}/secrets"] = {
        "post": {
            "summary": "The lease's client gives its current job's secrets, each sealed to a node's key "
            "(gpunet.secrets: X25519 from the node's Ed25519 key, a libsodium sealed box); the coordinator keeps "
            "and relays only the ciphertext, and the nodes get the job again with them. Every secret the job "
            f"names, for each node given. Only by the lease's client, as {how}.",
            "parameters": [_KEY, *signed],
            "requestBody": {
                "required": True,
                "content": {
                    "application/json": {
                        "schema": {
                            "type": "object",
                            "required": ["job_number", "nodes"],
                            "properties": {
                                "job_number": {"type": "integer", "minimum": 1},
                                "nodes": {
                                    "type": "object",
                                    "description": "node key -> secret name -> base64 sealed box",
                                    "additionalProperties": {
                                        "type": "object",
                                        "additionalProperties": {"type": "string"},
                                    },
                                },
                            },
                        }
                    }
                },
            },
            "responses": {
                "201": _json("kept and relayed", schemas.SECRETS_ACCEPTED),
                **_errors(400, 401, 404, 409, 413),
            },
        }
    }
    paths["/leases/{key}/checkpoint-key"] = {
        "post": {
            "summary": "The lease's client gives the lease's checkpoint key (derived from its wallet, "
            "gpunet.checkpoint.lease_key), sealed to each node's key as secrets are; the coordinator keeps and "
            "relays only the ciphertext, and the nodes get the job again with it (a node that takes a share over "
            "after a failover waits for it before it restores the lease's checkpoint). Only by the lease's client, "
            f"as {how}.",
            "parameters": [_KEY, *signed],
            "requestBody": {
                "required": True,
                "content": {
                    "application/json": {
                        "schema": {
                            "type": "object",
                            "required": ["nodes"],
                            "properties": {
                                "nodes": {
                                    "type": "object",
                                    "description": "node key -> base64 sealed box of the key",
                                    "additionalProperties": {"type": "string"},
                                },
                            },
                        }
                    }
                },
            },
            "responses": {
                "201": _json("kept and relayed", schemas.CHECKPOINT_KEY_ACCEPTED),
                **_errors(400, 401, 404, 413),
            },
        }
    }
    _checkpoint_paths(paths)
    _endpoint_paths(paths, signed, how)
    paths["/quote"] = {
        "get": _op(
            "Which nodes a lease would get now, at what burn rate, or why none; the matching nodes (price, region, "
            "reliability, online state); with ?duration_seconds= the escrow `lease open` needs. GPU models and "
            "regions by name (or catalog code), answered by name.",
            [_query(p) for p in QUOTE_PARAMS],
            _json("the placement, or why none", schemas.QUOTE),
        )
    }
    paths["/nodes/{key}/telemetry"] = {
        "get": _op(
            "A node's last heartbeat as this coordinator received it (by node key or node account): its GPUs' "
            "telemetry (utilisation, memory, temperature, power, ECC and Xid errors, throttling). Kept in memory: "
            "404 until the node's first heartbeat since the coordinator started.",
            [_KEY],
            _json("ok", schemas.TELEMETRY),
        )
    }
    paths["/workers"] = {
        "get": _op(
            "Workers connected to the gateway now (simulated ones say so), and whether a "
            "correlated outage pauses slashing (for the fleet, or per region).",
            [_query(p) for p in PAGE],
            _json("a page", schemas.WORKERS),
        )
    }
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
            "responses": {"200": _json("resumed", schemas.SLASHING_RESUMED), **_errors(400, 401, 404, 409, 413)},
        }
    }
    # Answered from the leader's memory: a follower replica redirects them to the leader (coordinator.api.work).
    for path in ("/quote", "/workers", "/nodes/{key}/telemetry", "/slashing/resume", "/leases/{key}/secrets",
                 "/leases/{key}/checkpoint-key"):  # fmt: skip
        for op in paths[path].values():
            op["responses"]["307"] = _json(
                "this coordinator replica does not lead: the leader answers at `leader` (the Location header)",
                schemas.NOT_LEADER,
            )
            op["responses"]["503"] = _json("no coordinator replica leads right now: retry shortly", schemas.ERROR)
    return {"openapi": "3.1.0", "info": {"title": "gpunet coordinator API", "version": "1"}, "paths": paths}
