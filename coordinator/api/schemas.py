"""The JSON schema of every API answer, in one place: each ledger table's columns as the API serves
them (`SELECT *`, every u64 as a string of digits), and the shape of every other route's answer. The OpenAPI
document (coordinator/api/openapi.py) is built from these, and a test holds the answers the routes
actually send to them (tests/coordinator/test_openapi_responses.py)."""

from __future__ import annotations

from typing import Any

from coordinator.api.params import PUBKEY_SCHEMA, SIGNATURE_SCHEMA, U64_SCHEMA
from coordinator.scheduler.model import VERIFICATION_STATES
from gpunet.protocol import GpuTelemetry

__all__ = [
    "AUDIT",
    "ENDPOINTS",
    "ENDPOINT_LOG",
    "ENDPOINT_PUBLIC",
    "ENDPOINT_TOKEN",
    "ENDPOINT_TOKEN_REVOKED",
    "ERROR",
    "HEALTH",
    "HEALTHZ",
    "JOB_ACCEPTED",
    "JOB_VIEW",
    "LEASE_FILES",
    "NODE_VERIFICATIONS",
    "QUOTE",
    "READINESS",
    "REWARD_EPOCH",
    "REWARD_EPOCHS",
    "SECRETS_ACCEPTED",
    "SLASHING_RESUMED",
    "SLASH_EVIDENCE",
    "TABLE_COLUMNS",
    "TELEMETRY",
    "U64",
    "WORKERS",
    "item_schema",
    "page_schema",
]

Schema = dict[str, Any]

_INT: Schema = {"type": "integer"}
# Every u64 is a string of decimal digits (coordinator.api.u64): JavaScript rounds integers above 2**53.
U64: Schema = U64_SCHEMA
_AMOUNT: Schema = {**U64, "description": "IO base units"}
_MAYBE_AMOUNT: Schema = {**_AMOUNT, "type": ["string", "null"]}
_MAYBE_INT: Schema = {"type": ["integer", "null"]}
_BOOL: Schema = {"type": "boolean"}
_TEXT: Schema = {"type": "string"}
_MAYBE_TEXT: Schema = {"type": ["string", "null"]}
_KEY: Schema = PUBKEY_SCHEMA
_MAYBE_KEY: Schema = {**PUBKEY_SCHEMA, "type": ["string", "null"]}
_SIG: Schema = SIGNATURE_SCHEMA
_MAYBE_SIG: Schema = {**SIGNATURE_SCHEMA, "type": ["string", "null"]}
_HEX: Schema = {"type": "string", "pattern": "^[0-9a-f]*$", "description": "hex"}
_TIME: Schema = {"type": "string", "format": "date-time"}


def _object(properties: dict[str, Schema], optional: tuple[str, ...] = ()) -> Schema:
    """An object with exactly these properties, all required but `optional`."""
    return {
        "type": "object",
        "properties": properties,
        "required": [name for name in properties if name not in optional],
        "additionalProperties": False,
    }


# Each ledger table's columns (the migrations' types, as JSON): what /{resource} pages and items hold.
TABLE_COLUMNS: dict[str, dict[str, Schema]] = {
    "providers": {
        "provider": _KEY,
        "authority": _KEY,
        "staked": _AMOUNT,
        "bonded": _AMOUNT,
        "unbonding": _AMOUNT,
        "unbonding_ends_at": _INT,
        "slashed": _AMOUNT,
        "earned": {**_AMOUNT, "description": "paid to the provider over its life: the sum of its UsageSettled events"},
        "node_count": _INT,
        "signature": _SIG,
    },
    "nodes": {
        "node": _KEY,
        "provider": _KEY,
        "node_key": _KEY,
        "gpu_model": _INT,
        "gpu_count": _INT,
        "vram_gb": _INT,
        "region": _INT,
        "price_per_gpu_hour": _AMOUNT,
        "inventory_hash": _HEX,
        "bonded_stake": _AMOUNT,
        "gpus_leased": _INT,
        "jailed": _BOOL,
        "jail_ends_at": _INT,
        "registered": _BOOL,
        "draining": _BOOL,
        "signature": _SIG,
        "verification_tier": {"type": "integer", "minimum": 0, "maximum": 3, "description": "0: not verified"},
        "verified_until": {**_INT, "description": "unix seconds; 0: never verified"},
        "verification_evidence": {**_HEX, "description": "hash of the challenges' evidence (zeros: none)"},
    },
    "leases": {
        "lease": _KEY,
        "client": _KEY,
        "lease_id": U64,
        "gpu_model": _INT,
        "min_vram_gb": _INT,
        "gpu_count": _INT,
        "region": _INT,
        "max_price_per_gpu_hour": _AMOUNT,
        "duration_seconds": _INT,
        "status": {"type": "string", "enum": ["open", "active", "closing", "closed"]},
        "started_at": _INT,
        "deposited": _AMOUNT,
        "paid": _AMOUNT,
        "fees": _AMOUNT,
        "fees_swept": {**_AMOUNT, "description": "of the fees, moved to the treasury (the rest is in the vault)"},
        "refunded": _AMOUNT,
        "donations": _AMOUNT,
        "nodes": {"type": "array", "items": _KEY, "description": "node accounts in assignment order"},
        "downtime_tolerance_seconds": _INT,
        "signature": _SIG,
    },
    "assignments": {
        "lease": _KEY,
        "node": _KEY,
        "node_key": _KEY,
        "provider": _KEY,
        "gpus": _INT,
        "price_per_gpu_hour": _AMOUNT,
        "epoch": {**U64, "description": "the assignment's number in the lease, which its usage receipts name"},
        "assigned_at": _INT,
        "settled_until": {**_INT, "description": "`through` of the last settled receipt"},
        "receipt_gpu_seconds": {**U64, "description": "cumulative GPU-seconds of the last settled receipt"},
        "gpu_seconds": {**U64, "description": "GPU-seconds paid for"},
        "active": _BOOL,
        "assigned_by": _MAYBE_SIG,
        "signature": _SIG,
    },
    "settlements": {
        "signature": _SIG,
        "event_index": _INT,
        "lease": _KEY,
        "node": _KEY,
        "provider": _KEY,
        "epoch": U64,
        "receipt_gpu_seconds": U64,
        "through": _INT,
        "gpu_seconds": U64,
        "amount": _AMOUNT,
        "payout": _AMOUNT,
        "fee": _AMOUNT,
        "escrow_left": _AMOUNT,
        "slot": _INT,
        "block_time": _MAYBE_INT,
    },
    "slashes": {
        "signature": _SIG,
        "event_index": _INT,
        "provider": _KEY,
        "node": _KEY,
        "attester": _KEY,
        "fault": _TEXT,
        "evidence_hash": _HEX,
        "amount": _AMOUNT,
        "to_treasury": _AMOUNT,
        "to_client": _AMOUNT,
        "lease": _MAYBE_KEY,
        "jail_ends_at": _INT,
        "slot": _INT,
        "block_time": _MAYBE_INT,
    },
    "stake_changes": {
        "signature": _SIG,
        "event_index": _INT,
        "provider": _KEY,
        "kind": {"type": "string", "enum": ["staked", "unstake_requested", "unstake_withdrawn", "slashed"]},
        "amount": _AMOUNT,
        "staked": _AMOUNT,
        "unbonding": _AMOUNT,
        "slot": _INT,
    },
    "events": {
        "id": _INT,
        "signature": _SIG,
        "event_index": _INT,
        "slot": _INT,
        "block_time": _MAYBE_INT,
        "name": _TEXT,
        "data": {
            "type": "object",
            "description": "the event's fields, as the program emitted them; its u64 fields as strings of digits",
        },
        "lease": _MAYBE_KEY,
        "provider": _MAYBE_KEY,
    },
}


def _row(table: str) -> Schema:
    return _object(TABLE_COLUMNS[table])


def _page(item: Schema, **more: Schema) -> Schema:
    """Every list's answer (coordinator.api.resources.page_body): a page of items, where the next page
    starts (null: none), and `more` beside them."""
    return _object(
        {
            **more,
            "items": {"type": "array", "items": item},
            "limit": _INT,
            "offset": _INT,
            "next_offset": _MAYBE_INT,
        }
    )


def page_schema(table: str) -> Schema:
    """A page of `table`'s rows."""
    return _page(_row(table))


def item_schema(table: str) -> Schema:
    """One row of `table` (a lease also lists its first page of assignments)."""
    if table == "leases":
        return _object(
            {
                **TABLE_COLUMNS[table],
                "assignments": {"type": "array", "items": _row("assignments"), "description": "the active ones first"},
                "assignments_next_offset": {
                    **_MAYBE_INT,
                    "description": "more: /assignments?lease=...&offset= this (null: all are listed)",
                },
            }
        )
    return _row(table)


ERROR = _object({"error": _TEXT})
# A coordinator replica that does not lead, for a route only the leader answers (its Location header too).
NOT_LEADER = _object({"error": _TEXT, "leader": {"type": "string", "description": "the leader's URL for this request"}})

HEALTH = _object(
    {
        "status": {"type": "string", "enum": ["ok"]},
        "cursor_signature": _MAYBE_SIG,
        "cursor_slot": _MAYBE_INT,
        "synced_slot": _MAYBE_INT,
    }
)

HEALTHZ = _object({"status": {"type": "string", "enum": ["ok"]}})

_CHECK: Schema = {"type": "string", "description": "ok, or why not"}
READINESS = _object(
    {
        "status": {"type": "string", "enum": ["ready", "not_ready"]},
        # attester_balance: only where the API runs inside the coordinator
        "checks": _object({"database": _CHECK, "rpc": _CHECK, "attester_balance": _CHECK}, ("attester_balance",)),
    }
)

TELEMETRY = _object(
    {
        "node_key": _KEY,
        "received_at": {"type": "number", "description": "unix seconds"},
        "connected": _BOOL,
        "healthy": _BOOL,
        "gpus": {"type": "array", "items": GpuTelemetry.model_json_schema()},
    }
)

AUDIT = _object(
    {
        "subject": {**_KEY, "description": "the lease or provider account audited"},
        "kind": {"type": "string", "enum": ["lease", "provider"]},
        "ok": {"type": "boolean", "description": "no difference found"},
        "given": {
            "type": "string",
            "enum": ["wallet", "provider account"],
            "description": "a provider: which key named it",
        },
        "events": _INT,
        "differences": {
            "type": "array",
            "items": _object(
                {
                    "check": {"type": "string", "enum": ["event", "row", "account", "vault", "unindexed"]},
                    "what": _TEXT,
                    "indexed": {"description": "the ledger's value; every integer in it as a string of digits"},
                    "chain": {"description": "the chain's value; every integer in it as a string of digits"},
                    "signatures": {"type": "array", "items": _SIG},
                }
            ),
        },
    },
    optional=("given",),
)

SLASH_EVIDENCE = _page(
    signature=_SIG,
    item=_object(
        {
            "event_index": _INT,
            "provider": _KEY,
            "node": _KEY,
            "attester": _KEY,
            "fault": _TEXT,
            "evidence_hash": {**_HEX, "description": "on chain: SHA-256 of the evidence's canonical JSON"},
            "lease": _MAYBE_KEY,
            "slot": _INT,
            "evidence": {
                "type": ["object", "null"],
                "description": "what the coordinator recorded; null when it holds none",
            },
            "node_key": _MAYBE_KEY,
        }
    ),
)

_MAYBE_NUMBER: Schema = {"type": ["number", "null"]}
NODE_VERIFICATIONS = _page(
    node=_KEY,
    node_key=_KEY,
    item=_object(
        {
            "id": _INT,
            "node_key": _KEY,
            "gpu_index": {**_MAYBE_INT, "description": "null: a verdict on the node's inventory"},
            "gpu_uuid": _MAYBE_TEXT,
            "model": {**_TEXT, "description": "the registered model the challenge was sized for"},
            "simulated": _BOOL,
            "challenge": _MAYBE_TEXT,
            "seed": _MAYBE_TEXT,
            "n": _MAYBE_INT,
            "depth": _MAYBE_INT,
            "products": _MAYBE_INT,
            "expected_seconds": _MAYBE_NUMBER,
            "deadline_seconds": _MAYBE_NUMBER,
            "committed_seconds": {**_MAYBE_NUMBER, "description": "null: no commitment came in time"},
            "verdict": {
                "type": "string",
                "enum": ["passed", "failed", "refused", "unfit", "unverified", "too_slow"],
                "description": "too_slow: a real GPU of a model not calibrated yet answered right, after the "
                "deadline (its time is committed_seconds): not slashed, not verified, challenged again",
            },
            "reason": _TEXT,
            "at": _TIME,
            "kind": {
                "type": ["string", "null"],
                "enum": ["compute", "memory", None],
                "description": "the GPU's compute or memory check (gpunet.vram); null: a verdict on the node",
            },
            "lanes": {**_MAYBE_INT, "description": "memory check: lanes of blocks filled"},
            "blocks": {**_MAYBE_INT, "description": "memory check: blocks per lane"},
            "block_bytes": _MAYBE_INT,
            "answer_deadline_seconds": {
                **_MAYBE_NUMBER,
                "description": "memory check: from naming the blocks to the answer",
            },
            "answered_seconds": {**_MAYBE_NUMBER, "description": "memory check: null: no answer in time"},
            "flops": {**_MAYBE_INT, "description": "compute check: its work (2 * products * n * n * depth)"},
            "calibration": {
                **_MAYBE_INT,
                "description": "the model calibration the deadline rested on (gpunet coordinator calibrate); "
                "null: the catalog's assumed efficiency and step time",
            },
        }
    ),
)

# A stored checkpoint as the job view shows it: one rank's newest (coordinator.checkpoints.CheckpointStore.summary).
_CHECKPOINT: dict[str, Schema] = {
    "rank": {"type": "integer", "description": "the rank of the lease's node that wrote it"},
    "seq": _INT,
    "taken_at": {"type": "number", "description": "unix seconds"},
    "node_key": _KEY,
    "files": _INT,
    "bytes": _INT,
    "chunks": _INT,
}

JOB_VIEW = _object(
    {
        "lease": _KEY,
        "job_number": _MAYBE_INT,
        "job": {"type": ["object", "null"], "description": "the current job's spec (gpunet.protocol.JobSpec)"},
        "gpus_per_node": _MAYBE_INT,
        "placement": {
            "oneOf": [
                {"type": "null"},
                _object(
                    {
                        "state": {"type": "string", "enum": ["waiting", "assigning", "placed", "failed", "ended"]},
                        "reason": _TEXT,
                        "nodes": {"type": "array", "items": _KEY, "description": "node keys in rank order"},
                        "signature": _MAYBE_SIG,
                        "updated_at": _TIME,
                    }
                ),
            ]
        },
        "nodes": {
            "type": "array",
            "items": _object(
                {
                    "node_key": _KEY,
                    "state": _MAYBE_TEXT,
                    "exit_code": _MAYBE_INT,
                    "detail": _MAYBE_TEXT,
                    "at": _TIME,
                }
            ),
        },
        "secrets_sealed_to": {
            "type": "array",
            "items": _KEY,
            "description": "the nodes the client sealed the current job's secrets to (only ciphertext is kept)",
        },
        "checkpoint_key_sealed_to": {
            "type": "array",
            "items": _KEY,
            "description": "the nodes the client sealed the lease's checkpoint key to (only ciphertext is kept)",
        },
        "logs": {
            "type": "array",
            "items": _object(
                {"id": _INT, "node_key": _KEY, "job_number": _INT, "stream": _MAYBE_TEXT, "line": _MAYBE_TEXT}
            ),
        },
        "more": _BOOL,
        "checkpoint": {
            "description": "the newest checkpoint in the checkpoint store, of any rank (null: none, or only a "
            "small one)",
            "oneOf": [
                {"type": "null"},
                _object(
                    {
                        **_CHECKPOINT,
                        "chunks_stored": {"type": "integer", "description": "chunks of the lease in the store"},
                        "checkpoints_kept": {"type": "integer", "description": "checkpoints its rank keeps"},
                        "ranks": {
                            "type": "array",
                            "description": "each rank's newest (a multi-node lease's nodes checkpoint one each)",
                            "items": _object(_CHECKPOINT),
                        },
                    }
                ),
            ],
        },
        "ray": {
            "description": "a Ray job's head, as the client reaches it (null: no Ray job, or its head not connected)",
            "oneOf": [
                {"type": "null"},
                _object(
                    {
                        "head": _KEY,
                        "address": {**_TEXT, "description": "HOST:PORT of the head's GCS (RAY_ADDRESS of a driver)"},
                        "dashboard": {**_TEXT, "description": "the dashboard and Ray Jobs API (ray job submit)"},
                        "client": {**_TEXT, "description": "ray://HOST:PORT of the Ray Client server"},
                    }
                ),
            ],
        },
    }
)

JOB_ACCEPTED = _object({"lease": _KEY, "job_number": _INT, "accepted": {"type": "boolean", "enum": [True]}})

SECRETS_ACCEPTED = _object({"lease": _KEY, "job_number": _INT, "sealed_to": {"type": "array", "items": _KEY}})

CHECKPOINT_KEY_ACCEPTED = _object({"lease": _KEY, "sealed_to": {"type": "array", "items": _KEY}})

_CHUNK_ID = {**_HEX, "minLength": 64, "maxLength": 64, "description": "SHA-256 of the sealed chunk"}

SIGNED_MANIFEST = _object(
    {
        "manifest": _object(
            {
                "lease": _KEY,
                "node_key": _KEY,
                "seq": {"type": "integer", "minimum": 1, "description": "unix milliseconds when it was taken"},
                "chunk_bytes": {"type": "integer", "minimum": 1},
                "rank": {
                    "type": "integer",
                    "minimum": 0,
                    "default": 0,
                    "description": "the rank of the lease's node that wrote it (absent: 0)",
                },
                "files": {
                    "type": "array",
                    "items": _object(
                        {
                            "path": _TEXT,
                            "size": {"type": "integer", "minimum": 0},
                            "chunks": {"type": "array", "items": _CHUNK_ID},
                        }
                    ),
                },
            },
            optional=("rank",),
        ),
        "signature": {"type": "string", "description": "the node key's, over gpunet.checkpoint.Manifest.message()"},
    }
)

CHUNK_STORED = _object({"id": _CHUNK_ID, "stored": {"type": "boolean", "enum": [True]}})
CHUNKS_MISSING = _object({"missing": {"type": "array", "items": _CHUNK_ID}})
MANIFEST_SEQS = _object({"seqs": {"type": "array", "items": _INT, "description": "newest first"}})
MANIFEST_STORED = _object({"seq": _INT, "stored": {"type": "boolean", "enum": [True]}})

_QUOTE_TERMS = _object(
    {
        "gpu_model": _TEXT,
        "gpu_count": _INT,
        "min_vram_gb": _INT,
        "region": _TEXT,
        "max_price_per_gpu_hour": {**_MAYBE_AMOUNT, "description": "IO base units; null: no ceiling given"},
        "gpus_per_node": _MAYBE_INT,
    }
)
_CANDIDATE = _object(
    {
        "node_key": _KEY,
        "gpu_model": _TEXT,
        "gpu_count": _INT,
        "free_gpus": _INT,
        "missing_gpus": {**_INT, "description": "registered GPUs its worker's live inventory lacks (never placed)"},
        "vram_gb": _INT,
        "region": _TEXT,
        "price_per_gpu_hour": _AMOUNT,
        "reliability": {"type": "number"},
        "online": _BOOL,
        "healthy": _BOOL,
        "jailed": _BOOL,
        "draining": _BOOL,
        "simulated": _BOOL,
        "verification": {"type": "string", "enum": list(VERIFICATION_STATES)},
        "chosen_gpus": _INT,
    }
)
_ESCROW = _object(
    {
        "duration_seconds": _INT,
        "max_price_per_gpu_hour": _MAYBE_AMOUNT,
        "needed": {**_MAYBE_AMOUNT, "description": "IO base units lease open escrows (null: no node to price it)"},
        "cost_at_quoted_prices": _MAYBE_AMOUNT,
    }
)
_QUOTED = {"terms": _QUOTE_TERMS, "candidates": {"type": "array", "items": _CANDIDATE}, "escrow": _ESCROW}
QUOTE = {
    "oneOf": [
        _object(
            {
                **_QUOTED,
                "placeable": {"type": "boolean", "enum": [True]},
                "shares": {
                    "type": "array",
                    "items": _object(
                        {"node_key": _KEY, "gpus": _INT, "price_per_gpu_hour": _AMOUNT, "simulated": _BOOL}
                    ),
                },
                "burn_per_hour": _AMOUNT,
            },
            optional=("escrow",),
        ),
        _object({**_QUOTED, "placeable": {"type": "boolean", "enum": [False]}, "reason": _TEXT}, optional=("escrow",)),
    ]
}

LEASE_FILES = _object(
    {
        "lease": _KEY,
        "rank": {"type": "integer", "description": "whose checkpoint: the lease's node of this rank"},
        "node_key": _KEY,
        "received_at": _TIME,
        "files": {
            "type": "array",
            "description": "a small checkpoint sent through the gateway, in the clear (empty when `sealed`)",
            "items": _object({"path": _TEXT, "sha256": {**_HEX, "minLength": 64, "maxLength": 64}, "data_b64": _TEXT}),
        },
        "sealed": {
            "description": "a checkpoint from the checkpoint store, sealed under the lease's key (which the "
            "coordinator does not hold): the client opens it (gpunet.checkpoint.open_checkpoint)",
            **_object(
                {
                    "manifest": SIGNED_MANIFEST,
                    "chunks": {
                        "type": "object",
                        "description": "chunk id -> base64 sealed chunk",
                        "additionalProperties": {"type": "string"},
                    },
                }
            ),
        },
    },
    optional=("sealed",),
)

WORKERS = _page(
    item=_object(
        {
            "node_key": _KEY,
            "connected": _BOOL,
            "online": _BOOL,
            "healthy": _BOOL,
            "simulated": _BOOL,
            "last_heartbeat": {"type": "number"},
        }
    ),
    slashing=_object(
        {
            "paused": _BOOL,
            "reason": _MAYBE_TEXT,
            "paused_regions": {
                "type": "array",
                "items": _object({"region": _TEXT, "since": {"type": "number"}}),
            },
        }
    ),
)

SLASHING_RESUMED = _object({"resumed": _TEXT})

# --- served endpoints (coordinator.endpoints)
_TOKEN_ID: Schema = {"type": "string", "pattern": "^[0-9a-f]{16}$", "description": "a token's id (never the token)"}
_ENDPOINT_NODE = _object(
    {
        "node_key": _KEY,
        "linked": {**_BOOL, "description": "its worker has a data-plane link to this replica"},
        "healthy": {"type": ["boolean", "null"], "description": "its last check or request here (null: none yet)"},
        "reason": _MAYBE_TEXT,
    }
)
ENDPOINTS = _object(
    {
        "lease": _KEY,
        "status": {"type": ["string", "null"], "description": "the lease's status (open, active, closing, closed)"},
        "job_number": _MAYBE_INT,
        "endpoints": {
            "type": "array",
            "description": "the current job's exposed ports",
            "items": _object(
                {
                    "name": _TEXT,
                    "port": _INT,
                    "protocol": {"type": "string", "enum": ["http", "tcp"]},
                    "url": {**_MAYBE_TEXT, "description": "where an http one is served (null: tcp, not over HTTP)"},
                    "public": _BOOL,
                    "nodes": {"type": "array", "items": _ENDPOINT_NODE},
                }
            ),
        },
        "tokens": {
            "type": "array",
            "description": "the lease's live tokens (never the tokens themselves)",
            "items": _object({"id": _TOKEN_ID, "label": _TEXT, "created_at": _TIME}),
        },
        "limits": _object(
            {
                "requests_per_second": {"type": "number"},
                "burst": _INT,
                "max_streams": _INT,
                "max_body_bytes": _INT,
            }
        ),
    }
)
ENDPOINT_PUBLIC = _object({"lease": _KEY, "name": _TEXT, "public": _BOOL, "url": _TEXT})
ENDPOINT_TOKEN = _object(
    {
        "lease": _KEY,
        "id": _TOKEN_ID,
        "token": {
            "type": "string",
            "pattern": "^gpe_[A-Za-z0-9_-]{43}$",
            "description": "the bearer token, shown this once (only its SHA-256 is kept)",
        },
        "label": _TEXT,
        "created_at": _TIME,
    }
)
ENDPOINT_TOKEN_REVOKED = _object({"lease": _KEY, "id": _TOKEN_ID, "revoked_at": _TIME})
ENDPOINT_LOG = _object(
    {
        "lease": _KEY,
        "items": {
            "type": "array",
            "items": _object(
                {
                    "id": _INT,
                    "at": _TIME,
                    "name": _TEXT,
                    "method": _TEXT,
                    "path": {**_TEXT, "description": "without the query"},
                    "status": _INT,
                    "bytes_in": _INT,
                    "bytes_out": _INT,
                    "ms": _INT,
                    "node_key": {**_MAYBE_KEY, "description": "the node that answered (null: none did)"},
                    "token": {"type": ["string", "null"], "description": "the id of the token used (null: none)"},
                }
            ),
        },
        "more": {**_BOOL, "description": "another page follows (ask again with ?after= the last id)"},
    }
)

_REWARD_EPOCH: dict[str, Schema] = {
    "epoch": _INT,
    "root": {**_HEX, "description": "the tree's root, as posted (post_reward_root)"},
    "total": _AMOUNT,
    "leaves": _INT,
    "posted": {**_MAYBE_TEXT, "description": "the posting transaction (null: not landed yet)"},
    "credited": {**_BOOL, "description": "every leaf's pool has been credited (its claim cranked)"},
    "built_at": _TIME,
}
REWARD_EPOCHS = _page(_object(_REWARD_EPOCH))
_POOL_STAKE = _object({"provider": _KEY, "own_stake": _AMOUNT, "delegated": _AMOUNT})
_NODE_UPTIME = _object(
    {
        "node": _KEY,
        "provider": _KEY,
        "gpu_model": _INT,
        "gpus": _INT,
        "eligible_samples": {**_INT, "description": "samples at which it was seen online, verified, not jailed"},
        "established": _BOOL,
    }
)
REWARD_EPOCH = _object(
    {
        **_REWARD_EPOCH,
        "inputs": _object(
            {
                "epoch": _INT,
                "emission": _AMOUNT,
                "samples": {**_INT, "description": "uptime samples the coordinator took in the epoch"},
                "reward_tier": {**_INT, "description": "the least verification tier that earns"},
                "establishment_bps": _INT,
                "multipliers": {
                    "type": "object",
                    "additionalProperties": _INT,
                    "description": "GPU model code -> basis points",
                },
                "nodes": {"type": "array", "items": _NODE_UPTIME},
                "pools": {"type": "array", "items": _POOL_STAKE},
            }
        ),
        "claims": {
            "type": "array",
            "items": _object({"provider": _KEY, "supplier_amount": _AMOUNT, "delegators_amount": _AMOUNT}),
            "description": "every pool's leaf, in the tree's order (gpunet.reward_epoch.epoch_leaves of the inputs)",
        },
    }
)
