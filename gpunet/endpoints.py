"""A client's side of its lease's served endpoints (the coordinator's coordinator.endpoints): the
job's exposed HTTP ports at `{coordinator}/endpoints/{lease}/{name}/`, the bearer tokens that open
them, making one public, and the access log. Every call is a request signed with the client's wallet
(gpunet.protocol.sign_request); calling an endpoint itself takes only a token
(`Authorization: Bearer <token>`), or nothing when it is public."""

from __future__ import annotations

from typing import Any

from solders.keypair import Keypair
from solders.pubkey import Pubkey

from gpunet.jobs import _signed_call

__all__ = [
    "create_endpoint_token",
    "endpoint_log",
    "endpoint_url",
    "list_endpoints",
    "revoke_endpoint_token",
    "set_endpoint_public",
]


def _lease_url(coordinator_url: str, lease: Pubkey) -> str:
    return f"{coordinator_url.rstrip('/')}/leases/{lease}"


def endpoint_url(coordinator_url: str, lease: Pubkey, name: str) -> str:
    """Where the lease's exposed port `name` is served by this coordinator (a coordinator may serve
    them under a hostname of its own: `list_endpoints` gives the URL it advertises)."""
    return f"{coordinator_url.rstrip('/')}/endpoints/{lease}/{name}/"


async def list_endpoints(coordinator_url: str, client: Keypair, lease: Pubkey) -> Any:
    """The current job's exposed ports (name, port, protocol, URL, public, the nodes serving them),
    the lease's live tokens (ids and labels; a token is shown only when created) and the limits."""
    return await _signed_call("GET", f"{_lease_url(coordinator_url, lease)}/endpoints", client)


async def create_endpoint_token(coordinator_url: str, client: Keypair, lease: Pubkey, label: str = "") -> Any:
    """A new bearer token for the lease's endpoints: {id, token, label, created_at}. The token is
    shown this once (the coordinator keeps its SHA-256): keep it; revoke it by its id."""
    return await _signed_call(
        "POST", f"{_lease_url(coordinator_url, lease)}/endpoint-tokens", client, None, {"label": label}
    )


async def revoke_endpoint_token(coordinator_url: str, client: Keypair, lease: Pubkey, token_id: str) -> Any:
    """Revokes one of the lease's tokens by its id: {id, revoked_at}; it is refused (403) from then on."""
    return await _signed_call("DELETE", f"{_lease_url(coordinator_url, lease)}/endpoint-tokens/{token_id}", client)


async def set_endpoint_public(
    coordinator_url: str, client: Keypair, lease: Pubkey, name: str, public: bool = True
) -> Any:
    """Opens the exposed HTTP port `name` to anyone, without a token (or, `public=False`, closes it
    to all but the lease's tokens again): {name, public, url}."""
    return await _signed_call(
        "POST", f"{_lease_url(coordinator_url, lease)}/endpoints/{name}", client, None, {"public": public}
    )


async def endpoint_log(
    coordinator_url: str, client: Keypair, lease: Pubkey, after: int = 0, limit: int = 100, tail: int | None = None
) -> Any:
    """A page of the lease's endpoints' access log, oldest first: the entries after id `after` (at
    most `limit`; `more` says whether another page follows), or the last `tail`. Each: id, at, name,
    method, path (without its query), status, bytes_in, bytes_out, ms, node_key, token (its id)."""
    params = {"tail": tail} if tail is not None else {"after": after, "limit": limit}
    return await _signed_call("GET", f"{_lease_url(coordinator_url, lease)}/endpoints/log", client, params)
