"""What the chain says about this node: its registration (Node), its provider's stake and
earnings (Provider), and its shares of leases (Lease) — read through RPC, decoded with the IDL."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from anchorpy import Coder
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solders.pubkey import Pubkey

from gpunet.idl import PROGRAM_ID, load_idl
from gpunet.pda import node_pda

__all__ = ["LeaseShare", "NodeRecord", "fetch_node", "fetch_node_leases"]


@dataclass(frozen=True)
class NodeRecord:
    node: Any  # the decoded Node account
    provider: Any  # the decoded Provider account


@dataclass(frozen=True)
class LeaseShare:
    lease: str
    status: str
    gpus: int
    price_per_gpu_hour: int
    epoch: int
    settled_until: int
    settled_receipt_gpu_seconds: int  # the cumulative of the last settled receipt
    settled_gpu_seconds: int  # of which paid for


async def _account(client: AsyncClient, address: Pubkey) -> Any | None:
    info = (await client.get_account_info(address, commitment=Confirmed)).value
    return None if info is None else Coder(load_idl()).accounts.decode(bytes(info.data))


async def fetch_node(client: AsyncClient, node_key: Pubkey) -> NodeRecord | None:
    """None when the node key is not registered."""
    node = await _account(client, node_pda(node_key))
    if node is None:
        return None
    return NodeRecord(node, await _account(client, node.provider))


def _share(lease: str, state: Any, node_key: Pubkey) -> LeaseShare | None:
    for a in state.assignments[: state.node_count]:
        if a.node_key == node_key:
            return LeaseShare(
                lease,
                type(state.status).__name__,
                a.gpus,
                a.price_per_gpu_hour,
                a.epoch,
                a.settled_until,
                a.receipt_gpu_seconds,
                a.gpu_seconds,
            )
    return None


_LEASE_DISCRIMINATOR = hashlib.sha256(b"account:Lease").digest()[:8]  # Anchor's account tag


async def fetch_node_leases(client: AsyncClient, node_key: Pubkey) -> list[LeaseShare]:
    """Every lease that lists this node now (closed ones included, as the program keeps them).
    Reads all Lease accounts: fine for a status command, not for a hot path."""
    response = await client.get_program_accounts(PROGRAM_ID, commitment=Confirmed, encoding="base64")
    coder = Coder(load_idl())
    shares = [
        _share(str(item.pubkey), coder.accounts.decode(bytes(item.account.data)), node_key)
        for item in response.value
        if bytes(item.account.data[:8]) == _LEASE_DISCRIMINATOR
    ]
    return [share for share in shares if share is not None]
