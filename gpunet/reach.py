"""A client's way into its lease's job (gpunet.tunnel): find the node of a rank on chain, reach it
directly where it takes clients, else through the coordinator's relay, open the TLS channel with
that node's key pinned, and prove the wallet. Used by `gpunet lease shell`, `exec` and `forward`.

The node's key always comes from the chain's lease assignment: the coordinator only says where to
knock (the relay's URL, a node's direct address), and a wrong answer there can fail a connection,
never put anyone else at the other end of it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlencode, urlsplit

from solana.rpc.async_api import AsyncClient
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidHandshake, InvalidStatus

from gpunet.accounts import fetch
from gpunet.errors import GpunetError
from gpunet.jobs import CoordinatorError, _signed_call
from gpunet.protocol import sign_request
from gpunet.tunnel import (
    MAX_DATA,
    AccessRequest,
    SecureChannel,
    TunnelError,
    WebSocketPipe,
    client_context,
    sign_access,
)

__all__ = ["Access", "ReachError", "node_of_rank", "open_access", "reach_info"]

DIRECT_TIMEOUT = 2.0  # a node's direct address that does not answer this fast: through the relay


class ReachError(GpunetError):
    """The lease's job cannot be reached: the message says why and what to do."""


@dataclass
class Access:
    """An admitted channel into the job, with who is at its other end and how it was reached."""

    channel: SecureChannel
    node_key: Pubkey
    rank: int
    via: Literal["direct", "relay"]


async def node_of_rank(chain: AsyncClient, lease: Pubkey, rank: int) -> Pubkey:
    """The node key the chain's lease account assigns rank `rank` to (the key the channel pins)."""
    account = await fetch(chain, lease, "Lease")
    if type(account.status).__name__ != "Active":
        raise ReachError(f"lease {lease} is {type(account.status).__name__.lower()}: its job is no longer reached")
    assignments = list(account.assignments)[: account.node_count]
    if not 0 <= rank < len(assignments):
        raise ReachError(
            f"lease {lease} has {len(assignments)} node(s) (ranks 0 to {len(assignments) - 1}), no rank {rank}"
        )
    return Pubkey.from_string(str(assignments[rank].node_key))


async def reach_info(coordinator_url: str, client: Keypair, lease: Pubkey) -> Any:
    """Where the lease's nodes are reached: the relay's URL and each node's direct address (signed)."""
    return await _signed_call("GET", f"{coordinator_url.rstrip('/')}/leases/{lease}/reach", client)


async def open_access(
    coordinator_url: str,
    chain: AsyncClient,
    client: Keypair,
    lease: Pubkey,
    request: AccessRequest,
    *,
    rank: int = 0,
    direct: bool = True,
) -> Access:
    """A channel into the job on the lease's node `rank`, admitted for `request`; ReachError saying
    why not (the node's own refusal included)."""
    node_key = await node_of_rank(chain, lease, rank)
    try:
        info = await reach_info(coordinator_url, client, lease)
    except CoordinatorError as e:
        raise ReachError(f"the coordinator will not say where lease {lease}'s nodes are: {e}") from None
    node = next((n for n in info.get("nodes", []) if n.get("node_key") == str(node_key)), None)
    attempts: list[tuple[Literal["direct", "relay"], str, dict[str, str]]] = []
    if direct and node is not None and node.get("direct"):
        attempts.append(("direct", f"{node['direct']}?{urlencode({'lease': str(lease)})}", {}))
    relay = f"{info['relay']}?{urlencode({'lease': str(lease), 'node': str(node_key)})}"
    parts = urlsplit(relay)
    attempts.append(("relay", relay, sign_request(client, "GET", f"{parts.path}?{parts.query}")))
    problems = []
    for via, url, headers in attempts:
        try:
            # no permessage-deflate: what the tunnel carries is TLS ciphertext, which does not compress
            # (deflating it took most of the client's and the relay's CPU: bench/tunnel)
            ws = await asyncio.wait_for(
                connect(
                    url,
                    additional_headers=headers,
                    max_size=MAX_DATA + 1024,
                    ping_interval=5,
                    open_timeout=10,
                    compression=None,
                ),
                DIRECT_TIMEOUT if via == "direct" else 15,
            )
        except (OSError, TimeoutError, InvalidHandshake) as e:
            problems.append(f"{via} {url.split('?')[0]}: {_why(e)}")
            continue
        channel = SecureChannel(WebSocketPipe(ws), client_context(), server_side=False, node_key=node_key)
        try:
            await channel.handshake()
            hello = await channel.read_message()
            nonce = bytes.fromhex(str(hello["nonce"]))
            await channel.send_message(sign_access(client, node_key, nonce, request))
            answer = await channel.read_message()
        except (TunnelError, KeyError, ValueError) as e:
            await ws.close()
            if via == "direct":
                problems.append(f"direct: {e}")
                continue
            raise ReachError(f"cannot reach the job of lease {lease} on node {node_key}: {e}") from None
        if "error" in answer:
            await channel.close()
            raise ReachError(f"node {node_key} refused: {answer['error']}")
        return Access(channel, node_key, rank, via)
    raise ReachError(f"cannot reach node {node_key} of lease {lease}: " + "; ".join(problems))


def _why(error: BaseException) -> str:
    if isinstance(error, InvalidStatus):
        return f"HTTP {error.response.status_code}"
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
