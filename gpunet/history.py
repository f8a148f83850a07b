"""What happened to an address on chain: its successful transactions, oldest first, each with the
gpunet events it emitted. Read straight from the RPC node, so anyone can check the coordinator."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from anchorpy import Event
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed, Finalized
from solders.pubkey import Pubkey
from solders.signature import Signature

from gpunet.accounts import AccountError, decode_account
from gpunet.events import decode_events

__all__ = ["ChainTransaction", "node_keys", "transactions_of"]

_PAGE = 1000  # getSignaturesForAddress's largest page


@dataclass(frozen=True)
class ChainTransaction:
    signature: Signature
    slot: int
    block_time: int | None
    events: list[Event] = field(default_factory=list)


async def transactions_of(client: AsyncClient, address: Pubkey, *, limit: int | None = None) -> list[ChainTransaction]:
    """Every successful transaction that mentions `address` (failed ones change nothing), oldest first,
    at the client's commitment when it is finalized, else confirmed (history is not served at processed)."""
    commitment = Finalized if client.commitment == Finalized else Confirmed
    signatures: list[Any] = []
    before: Signature | None = None
    while True:
        page = (
            await client.get_signatures_for_address(address, before=before, limit=_PAGE, commitment=commitment)
        ).value
        signatures.extend(page)
        if len(page) < _PAGE or (limit is not None and len(signatures) >= limit):
            break
        before = page[-1].signature
    found = []
    for info in reversed(signatures[:limit] if limit else signatures):
        if info.err is not None:
            continue
        tx = (
            await client.get_transaction(info.signature, commitment=commitment, max_supported_transaction_version=0)
        ).value
        logs = tx.transaction.meta.log_messages if tx and tx.transaction.meta else None
        found.append(ChainTransaction(info.signature, info.slot, info.block_time, decode_events(logs or [])))
    return found


async def node_keys(
    client: AsyncClient, nodes: Iterable[Pubkey], txs: Iterable[ChainTransaction] = ()
) -> dict[Pubkey, Pubkey]:
    """Node account -> node key (the worker's key every `gpunet node` command takes), for `nodes`:
    from the events of `txs` that say both (NodeRegistered, LeaseAssigned, LeaseReassigned), else
    from the Node account on chain. A node found in neither (deregistered, and its registration not
    among `txs`) is left out."""
    nodes = list(nodes)
    found: dict[Pubkey, Pubkey] = {}
    for tx in txs:
        for e in tx.events:
            d = e.data
            shares = list(getattr(d, "assignments", ())) + ([d.assignment] if hasattr(d, "assignment") else [])
            if e.name == "NodeRegistered":
                found[d.node] = d.node_key
            for a in shares:
                found[a.node] = a.node_key
    wanted = list(dict.fromkeys(n for n in nodes if n not in found))
    for i in range(0, len(wanted), 100):
        batch = wanted[i : i + 100]
        for address, info in zip(batch, (await client.get_multiple_accounts(batch)).value, strict=True):
            if info is None:
                continue
            try:
                found[address] = decode_account(bytes(info.data), "Node", address).node_key
            except AccountError:
                continue
    return {n: found[n] for n in nodes if n in found}
