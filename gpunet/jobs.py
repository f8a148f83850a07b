"""A client's side of the coordinator's job API: attach a signed job to a lease, follow it."""

from __future__ import annotations

from typing import Any

import httpx
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from gpunet.protocol import JobSpec, job_message

__all__ = ["CoordinatorError", "job_view", "submit_job"]


class CoordinatorError(Exception):
    """The coordinator refused the request (its message says why) or could not be reached."""


async def _call(method: str, url: str, **kwargs: Any) -> Any:
    try:
        async with httpx.AsyncClient(timeout=30) as http:
            response = await http.request(method, url, **kwargs)
    except httpx.HTTPError as e:
        raise CoordinatorError(f"cannot reach the coordinator at {url}: {type(e).__name__}: {e}") from None
    try:
        body = response.json()
    except ValueError:
        body = {"error": response.text[:200]}
    if response.status_code >= 400:
        raise CoordinatorError(f"the coordinator refused ({response.status_code}): {body.get('error', body)}")
    return body


async def submit_job(coordinator_url: str, client: Keypair, lease: Pubkey, spec: JobSpec,
                     gpus_per_node: int | None = None) -> Any:
    """Signs the job with the client's wallet and attaches it to the lease."""
    signature = client.sign_message(job_message(lease, spec, gpus_per_node))
    body = {"job": spec.model_dump(mode="json"), "gpus_per_node": gpus_per_node, "signature": str(signature)}
    return await _call("POST", f"{coordinator_url.rstrip('/')}/leases/{lease}/job", json=body)


async def job_view(coordinator_url: str, lease: Pubkey, after: int = 0) -> Any:
    """The lease's placement, job, per-node status and log lines after id `after`."""
    return await _call("GET", f"{coordinator_url.rstrip('/')}/leases/{lease}/job", params={"after": after})
