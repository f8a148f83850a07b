"""A client's side of the coordinator's job API: give a lease its next job (signed), its secrets
sealed to its nodes, follow it (every private route is a request signed with the client's wallet,
gpunet.protocol.sign_request); and the operator's one signed call (`resume_slashing`)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit

import httpx
from solana.rpc.async_api import AsyncClient
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from gpunet.accounts import fetch
from gpunet.checkpoint import SignedManifest, lease_key, open_checkpoint, seal_key
from gpunet.errors import GpunetError
from gpunet.json_input import NotJson, parse_json
from gpunet.protocol import (
    RAY_AUTH_TOKEN,
    CheckpointFile,
    JobSpec,
    job_message,
    operator_message,
    sign_request,
)
from gpunet.raycluster import ray_token
from gpunet.secrets import seal_all

__all__ = [
    "CoordinatorError",
    "LeaseFile",
    "assigned_nodes",
    "job_logs",
    "job_view",
    "lease_files",
    "next_job_number",
    "node_verifications",
    "quote",
    "resume_slashing",
    "seal_missing_checkpoint_key",
    "seal_missing_secrets",
    "submit_checkpoint_key",
    "submit_job",
    "submit_secrets",
]


@dataclass(frozen=True)
class LeaseFile:
    """One file of a lease's checkpoint, as `lease_files` got it."""

    path: str
    sha256: str
    data: bytes

    def content(self) -> bytes:
        """The file's bytes, checked against its sha256 (ValueError when they differ)."""
        if hashlib.sha256(self.data).hexdigest() != self.sha256:
            raise ValueError(f"checkpoint file {self.path}: content does not match its sha256")
        return self.data


class CoordinatorError(GpunetError):
    """The coordinator refused the request (its message says why) or could not be reached."""


async def _request(method: str, url: str, **kwargs: Any) -> tuple[int, Any]:
    try:
        # follow_redirects: a coordinator replica that does not lead sends some routes to the leader (307)
        async with httpx.AsyncClient(timeout=30, follow_redirects=True) as http:
            response = await http.request(method, url, **kwargs)
    except httpx.HTTPError as e:
        raise CoordinatorError(f"cannot reach the coordinator at {url}: {type(e).__name__}: {e}") from None
    try:
        body = parse_json(response.content)
    except NotJson:  # nested too deep included: an answer, not a crash
        body = {"error": response.text[:200]}
    return response.status_code, body


async def _call(method: str, url: str, **kwargs: Any) -> Any:
    status, body = await _request(method, url, **kwargs)
    if status >= 400:
        raise CoordinatorError(f"the coordinator refused ({status}): {body.get('error', body)}")
    return body


def _job_url(coordinator_url: str, lease: Pubkey) -> str:
    return f"{coordinator_url.rstrip('/')}/leases/{lease}/job"


async def _signed(
    method: str, url: str, wallet: Keypair, params: dict[str, Any] | None = None, payload: Any = None
) -> tuple[int, Any]:
    """A request signed with `wallet` (gpunet.protocol.request_message over exactly what is sent)."""
    query = urlencode(params) if params else ""
    full = f"{url}?{query}" if query else url
    parts = urlsplit(full)
    target = parts.path + (f"?{parts.query}" if parts.query else "")
    body = b"" if payload is None else json.dumps(payload).encode()
    headers = sign_request(wallet, method, target, body)
    if payload is not None:
        headers["Content-Type"] = "application/json"
    return await _request(method, full, headers=headers, content=body or None)


async def _signed_call(
    method: str, url: str, wallet: Keypair, params: dict[str, Any] | None = None, payload: Any = None
) -> Any:
    status, body = await _signed(method, url, wallet, params, payload)
    if status >= 400:
        raise CoordinatorError(f"the coordinator refused ({status}): {body.get('error', body)}")
    return body


async def next_job_number(coordinator_url: str, client: Keypair, lease: Pubkey) -> int:
    """The number the lease's next job takes: 1 for its first, else its current job's + 1."""
    status, body = await _signed("GET", _job_url(coordinator_url, lease), client, {"tail": 1})
    if status == 404:  # neither a job nor a placement yet
        return 1
    if status >= 400:
        raise CoordinatorError(f"the coordinator refused ({status}): {body.get('error', body)}")
    return (body.get("job_number") or 0) + 1


async def submit_job(
    coordinator_url: str,
    client: Keypair,
    lease: Pubkey,
    spec: JobSpec,
    gpus_per_node: int | None = None,
    job_number: int | None = None,
) -> Any:
    """Signs the job with the client's wallet and gives it to the lease as its job `job_number`
    (default: the next one). The coordinator takes it once the lease's current job has ended.
    Then seal the lease's checkpoint key to its nodes (`seal_missing_checkpoint_key`, again after
    a failover), or its checkpoints stay on the node that wrote them."""
    number = job_number or await next_job_number(coordinator_url, client, lease)
    signature = client.sign_message(job_message(lease, spec, gpus_per_node, number))
    body = {
        "job": spec.model_dump(mode="json"),
        "gpus_per_node": gpus_per_node,
        "job_number": number,
        "signature": str(signature),
    }
    return await _call("POST", _job_url(coordinator_url, lease), json=body)


async def job_view(
    coordinator_url: str, wallet: Keypair, lease: Pubkey, after: int = 0, tail: int | None = None
) -> Any:
    """The lease's placement, current job and its number, per-node status, the nodes its secrets are
    sealed to, and log lines: a page after id `after` (`more`: another page follows), or the last
    `tail` lines. Private: signed with `wallet`, the lease's client's (or a supplier's of its nodes)."""
    params = {"after": after} if tail is None else {"tail": tail}
    return await _signed_call("GET", _job_url(coordinator_url, lease), wallet, params)


async def job_logs(
    coordinator_url: str, wallet: Keypair, lease: Pubkey, after: int = 0
) -> AsyncIterator[dict[str, Any]]:
    """Every log line of the lease after id `after`, in order, page by page (each has its `id`: ask
    again from the last one to follow the job); each page a request signed with `wallet`."""
    while True:
        view = await job_view(coordinator_url, wallet, lease, after)
        for line in view["logs"]:
            yield line
            after = line["id"]
        if not view.get("more"):
            return


async def lease_files(
    coordinator_url: str, client: Keypair, lease: Pubkey, rank: int = 0
) -> tuple[dict[str, Any], list[LeaseFile]]:
    """The latest checkpoint of the lease's rank `rank` (a multi-node lease's nodes checkpoint one
    each; 0 for a single-node lease) as the coordinator keeps it: ({lease, rank, node_key,
    received_at}, its files, each checked against its sha256 when read with .content()). A GET
    signed with the lease client's wallet (fresh each call); anyone else is refused (401)."""
    params = {"rank": rank} if rank else None  # as asked of a coordinator from before ranks
    body = await _signed_call("GET", f"{coordinator_url.rstrip('/')}/leases/{lease}/files", client, params)
    try:
        if body.get("sealed"):  # from the checkpoint store: opened here, with the lease's key
            signed = SignedManifest.model_validate(body["sealed"]["manifest"])
            if signed.manifest.rank != rank:
                raise ValueError(f"it is rank {signed.manifest.rank}'s checkpoint, not rank {rank}'s")
            chunks = {cid: base64.b64decode(data, validate=True) for cid, data in body["sealed"]["chunks"].items()}
            # the coordinator picked a manifest signed by a node of the lease; what proves the
            # content is the lease's key, which opens only what the client or its nodes sealed
            opened = open_checkpoint(lease_key(client, str(lease)), signed, chunks, {signed.manifest.node_key})
            files = [LeaseFile(path, hashlib.sha256(data).hexdigest(), data) for path, data in opened]
        else:  # a small one sent through the gateway
            files = [
                LeaseFile(f.path, f.sha256, base64.b64decode(f.data_b64))
                for f in (CheckpointFile.model_validate(raw) for raw in body["files"])
            ]
    except (KeyError, TypeError, ValueError, binascii.Error) as e:
        raise CoordinatorError(f"the coordinator's answer is not a checkpoint of this lease: {e}") from None
    return {"lease": body.get("lease"), "rank": rank, **{k: body.get(k) for k in ("node_key", "received_at")}}, files


async def submit_secrets(
    coordinator_url: str, client: Keypair, lease: Pubkey, job_number: int, secrets: dict[str, str], nodes: list[Pubkey]
) -> Any:
    """Seals every secret (name -> value) to each of `nodes` (gpunet.secrets) and gives the sealed
    values to the lease's job `job_number`: the coordinator keeps and relays only ciphertext, and each
    node opens its own with its key. A request signed with the client's wallet."""
    payload = {"job_number": job_number, "nodes": {str(n): seal_all(n, secrets) for n in nodes}}
    return await _signed_call("POST", f"{coordinator_url.rstrip('/')}/leases/{lease}/secrets", client, None, payload)


async def assigned_nodes(chain: AsyncClient, lease: Pubkey, nodes: list[str]) -> list[str]:
    """`nodes` (node keys the coordinator says hold the lease), once the chain's lease account says so
    too: a client seals nothing to a node on the coordinator's word alone, which a compromised
    coordinator, or whoever sits between it and the client on plain HTTP, could make its own key.
    CoordinatorError, nothing sealed, when one is not (the chain behind, or the coordinator lying)."""
    account = await fetch(chain, lease, "Lease")
    assigned = {str(a.node_key) for a in list(account.assignments)[: account.node_count]}
    if strangers := [k for k in nodes if k not in assigned]:
        raise CoordinatorError(
            f"the coordinator places lease {lease} on node(s) {', '.join(strangers)}, which the chain does not "
            "assign it to: nothing sealed to them (if the chain is only behind, try again in a few seconds; "
            "if it lasts, do not trust this coordinator)"
        )
    return nodes


async def seal_missing_secrets(
    coordinator_url: str, chain: AsyncClient, client: Keypair, lease: Pubkey, secrets: dict[str, str], view: Any = None
) -> list[str]:
    """Seals the current job's secrets to each node the lease is placed on that has none sealed to it
    yet (its first placement, or a node it moved to after a failover), each checked against the
    chain (`assigned_nodes`); the node keys sealed to now ([] when none was missing, or the lease is
    not placed yet). `view`: a job view just read. A Ray job's token (RAY_AUTH_TOKEN) is derived
    here from the wallet: it need not be given."""
    view = view if view is not None else await job_view(coordinator_url, client, lease, tail=1)
    job, placement, number = view.get("job"), view.get("placement"), view.get("job_number")
    if not job or not job.get("secrets") or not placement or placement.get("state") != "placed" or number is None:
        return []
    if job.get("ray"):
        secrets = secrets | {RAY_AUTH_TOKEN: ray_token(client, lease)}
    sealed = set(view.get("secrets_sealed_to") or [])
    missing = [k for k in placement.get("nodes") or [] if k not in sealed]
    if not missing:
        return []
    given = {name: secrets[name] for name in job["secrets"] if name in secrets}
    if len(given) != len(job["secrets"]):
        lacking = ", ".join(sorted(set(job["secrets"]) - set(given)))
        raise CoordinatorError(f"job {number} needs secrets {lacking}: give them (--secret NAME=VALUE)")
    missing = await assigned_nodes(chain, lease, missing)
    await submit_secrets(coordinator_url, client, lease, number, given, [Pubkey.from_string(k) for k in missing])
    return missing


async def quote(
    coordinator_url: str,
    gpu_count: int,
    gpu_model: str = "any",
    region: str = "any",
    min_vram_gb: int = 0,
    max_price_per_gpu_hour: int | None = None,
    gpus_per_node: int | None = None,
    duration_seconds: int | None = None,
) -> Any:
    """Which nodes a lease of these terms would get now (or why none), the matching nodes with their
    price, region, reliability and online state, and, given a duration, the escrow `lease open` needs.
    Models and regions by name."""
    params: dict[str, Any] = {"gpu_count": gpu_count, "gpu_model": gpu_model, "region": region}
    optional = {
        "min_vram_gb": min_vram_gb or None,
        "max_price_per_gpu_hour": max_price_per_gpu_hour,
        "gpus_per_node": gpus_per_node,
        "duration_seconds": duration_seconds,
    }
    params.update({k: v for k, v in optional.items() if v is not None})
    return await _call("GET", f"{coordinator_url.rstrip('/')}/quote", params=params)


async def resume_slashing(coordinator_url: str, attester: Keypair, region: str | None = None) -> Any:
    """Ends a correlated-outage pause of slashing (of one region, or the fleet-wide one): the operator
    confirms the silent nodes are really lost. Signed with the coordinator's attester key."""
    at = int(time.time())
    signature = attester.sign_message(operator_message("resume-slashing", region, at))
    return await _call(
        "POST",
        f"{coordinator_url.rstrip('/')}/slashing/resume",
        json={"region": region, "at": at, "signature": str(signature)},
    )


async def node_verifications(coordinator_url: str, node: Pubkey, limit: int = 100, offset: int = 0) -> Any:
    """A page of a node's GPU verification challenges and verdicts (by node account or node key), newest
    first: `items`, and `next_offset` where the next page starts (None: none)."""
    params = {"limit": limit, "offset": offset}
    return await _call("GET", f"{coordinator_url.rstrip('/')}/nodes/{node}/verifications", params=params)


async def submit_checkpoint_key(coordinator_url: str, client: Keypair, lease: Pubkey, nodes: list[Pubkey]) -> Any:
    """Seals the lease's checkpoint key (gpunet.checkpoint.lease_key, derived here from the client's
    wallet) to each of `nodes` and gives the sealed keys to the coordinator, which keeps and relays
    only them. A request signed with the client's wallet."""
    key = lease_key(client, str(lease))
    payload = {"nodes": {str(n): seal_key(n, key) for n in nodes}}
    url = f"{coordinator_url.rstrip('/')}/leases/{lease}/checkpoint-key"
    return await _signed_call("POST", url, client, None, payload)


async def seal_missing_checkpoint_key(
    coordinator_url: str, chain: AsyncClient, client: Keypair, lease: Pubkey, view: Any = None
) -> list[str]:
    """Seals the lease's checkpoint key to each node the lease is placed on that lacks it (its first
    placement, or a node a failover moved it to: that node's job waits for it before it restores
    the lease's checkpoint), each checked against the chain (`assigned_nodes`); the node keys sealed
    to now. `view`: a job view just read."""
    view = view if view is not None else await job_view(coordinator_url, client, lease, tail=1)
    placement = view.get("placement")
    if not view.get("job") or not placement or placement.get("state") != "placed":
        return []
    sealed = set(view.get("checkpoint_key_sealed_to") or [])
    missing = [k for k in placement.get("nodes") or [] if k not in sealed]
    if missing:
        missing = await assigned_nodes(chain, lease, missing)
        await submit_checkpoint_key(coordinator_url, client, lease, [Pubkey.from_string(k) for k in missing])
    return missing
