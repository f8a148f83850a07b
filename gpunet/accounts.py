"""Reading gpunet accounts from any RPC node: fetch one, list many, and the escrow figures of a lease."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import based58
from anchorpy import Coder
from solana.rpc.async_api import AsyncClient
from solana.rpc.types import MemcmpOpts
from solders.pubkey import Pubkey
from solders.sysvar import CLOCK

from gpunet.errors import GpunetError
from gpunet.idl import PROGRAM_ID, load_idl
from gpunet.pda import BPF_LOADER_UPGRADEABLE, config_pda, lease_vault_pda, program_data_pda, provider_pda
from gpunet.tokens import token_balance

__all__ = [
    "AccountError",
    "Escrow",
    "ProviderKey",
    "chain_clock",
    "decode_account",
    "escrow",
    "fetch",
    "fetch_config",
    "lease_end",
    "program_accounts",
    "resolve_provider",
    "upgrade_authority",
]

_DISCRIMINATOR = 8


class AccountError(GpunetError):
    """An account that does not exist or is not the gpunet account it should be."""


@cache
def _coder() -> Coder:
    return Coder(load_idl())


def discriminator(name: str) -> bytes:
    return _coder().accounts.acc_name_to_discriminator[name]


def decode_account(data: bytes, name: str, address: Pubkey | None = None) -> Any:
    """Decodes `data` as account type `name` (Config, Provider, Node, Lease); refuses any other type."""
    where = f" at {address}" if address else ""
    if data[:_DISCRIMINATOR] != discriminator(name):
        raise AccountError(f"the account{where} is not a gpunet {name}")
    try:
        return _coder().accounts.decode(data)
    except Exception as e:  # construct raises many types on short or corrupt data
        raise AccountError(f"the {name} account{where} cannot be decoded: {e}") from None


async def fetch(client: AsyncClient, address: Pubkey, name: str) -> Any:
    """The decoded account, owned by the gpunet program; AccountError if absent or foreign."""
    info = (await client.get_account_info(address)).value
    if info is None:
        raise AccountError(f"no {name} account at {address}")
    if info.owner != PROGRAM_ID:
        raise AccountError(f"the account at {address} is not owned by the gpunet program")
    return decode_account(bytes(info.data), name, address)


MULTIPLE_ACCOUNTS_LIMIT = 100  # getMultipleAccounts takes at most 100 addresses a call


async def fetch_many(client: AsyncClient, addresses: Sequence[Pubkey], name: str) -> list[Any]:
    """The decoded accounts, in order, read `MULTIPLE_ACCOUNTS_LIMIT` a call (one RPC per account
    would not scale to every pool of a network); AccountError if any is absent or foreign."""
    decoded = []
    for at in range(0, len(addresses), MULTIPLE_ACCOUNTS_LIMIT):
        chunk = list(addresses[at : at + MULTIPLE_ACCOUNTS_LIMIT])
        infos = (await client.get_multiple_accounts(chunk)).value
        for address, info in zip(chunk, infos, strict=True):
            if info is None:
                raise AccountError(f"no {name} account at {address}")
            if info.owner != PROGRAM_ID:
                raise AccountError(f"the account at {address} is not owned by the gpunet program")
            decoded.append(decode_account(bytes(info.data), name, address))
    return decoded


async def chain_clock(client: AsyncClient) -> int:
    """The chain's clock: the Clock sysvar's `unix_timestamp`, by which the program judges instants
    (a receipt's `through`, a settlement deadline). It may lag the wall clock by a slot or more."""
    info = (await client.get_account_info(CLOCK)).value
    if info is None or len(bytes(info.data)) < 40:
        raise AccountError("the chain serves no Clock sysvar")
    # Clock: slot u64, epoch_start_timestamp i64, epoch u64, leader_schedule_epoch u64, unix_timestamp i64
    return int.from_bytes(bytes(info.data)[32:40], "little", signed=True)


async def fetch_config(client: AsyncClient) -> Any:
    try:
        return await fetch(client, config_pda(), "Config")
    except AccountError:
        raise AccountError("gpunet is not initialised on this cluster (run `gpunet admin init` first)") from None


# bincode of the upgradeable loader's ProgramData state: u32 variant (3), u64 slot, then
# Option<Pubkey> (a tag byte, then the key when the tag is 1).
_PROGRAM_DATA_VARIANT = (3).to_bytes(4, "little")
_AUTHORITY_TAG_AT = 12


async def upgrade_authority(client: AsyncClient) -> Pubkey | None:
    """The gpunet program's upgrade authority (the only key that may `initialize` it), read from its
    ProgramData account; None when the program is not upgradeable or has no authority left."""
    info = (await client.get_account_info(program_data_pda())).value
    if info is None or info.owner != BPF_LOADER_UPGRADEABLE:
        return None
    data = bytes(info.data)
    at = _AUTHORITY_TAG_AT
    if data[:4] != _PROGRAM_DATA_VARIANT or len(data) < at + 33 or data[at] != 1:
        return None
    return Pubkey.from_bytes(data[at + 1 : at + 33])


@dataclass(frozen=True)
class ProviderKey:
    """A provider, however it was named: its account (the PDA every event and API row names) and
    its supplier's wallet, and which of the two the user gave."""

    account: Pubkey
    wallet: Pubkey
    given: str  # "wallet" or "provider account"
    decoded: Any

    def describe(self) -> str:
        return f"provider {self.account} (wallet {self.wallet}; given the {self.given})"


async def resolve_provider(client: AsyncClient, key: Pubkey) -> ProviderKey:
    """`key` as either a supplier's wallet or its provider account: a gpunet Provider account at
    `key` is the provider itself, otherwise `key` is a wallet whose provider account is its PDA.
    AccountError (not found) when neither exists."""
    info = (await client.get_account_info(key)).value
    if info is not None and info.owner == PROGRAM_ID and bytes(info.data)[:_DISCRIMINATOR] == discriminator("Provider"):
        account = decode_account(bytes(info.data), "Provider", key)
        return ProviderKey(key, account.authority, "provider account", account)
    pda = provider_pda(key)
    found = (await client.get_account_info(pda)).value
    if found is None or found.owner != PROGRAM_ID:
        raise AccountError(
            f"{key} is neither a provider account nor the wallet of a registered provider "
            f"(no Provider account at {key}, nor at that wallet's provider address {pda})"
        )
    return ProviderKey(pda, key, "wallet", decode_account(bytes(found.data), "Provider", pda))


async def program_accounts(rpc: AsyncClient, name: str, **equals: Pubkey) -> list[tuple[Pubkey, Any]]:
    """Every `name` account whose leading Pubkey fields equal `equals` (e.g. provider=..., client=...),
    filtered by the node with memcmp on the discriminator and the field's offset."""
    offsets = _pubkey_offsets(name)
    filters: list[Any] = [MemcmpOpts(offset=0, bytes=_b58(discriminator(name)))]
    for field, value in equals.items():
        if field not in offsets:
            raise ValueError(f"{name} has no leading Pubkey field {field!r}")
        filters.append(MemcmpOpts(offset=offsets[field], bytes=str(value)))
    found = await rpc.get_program_accounts(PROGRAM_ID, encoding="base64", filters=filters)
    return sorted(
        ((a.pubkey, decode_account(bytes(a.account.data), name, a.pubkey)) for a in found.value),
        key=lambda pair: bytes(pair[0]),
    )


def _pubkey_offsets(name: str) -> dict[str, int]:
    # The Pubkey fields at the start of each account (fixed offsets after the discriminator).
    leading = {
        "Provider": ["authority"],
        "Node": ["provider", "node_key"],
        "Lease": ["client"],
        "Pool": ["provider"],
        "Delegation": ["provider", "delegator"],
        "Cohort": ["provider"],
    }
    return {field: _DISCRIMINATOR + 32 * i for i, field in enumerate(leading.get(name, []))}


def _b58(data: bytes) -> str:
    return based58.b58encode(data).decode()


@dataclass(frozen=True)
class Escrow:
    """What a lease holds and burns, in IO base units and seconds."""

    balance: int  # in the lease vault now, less the protocol fees it keeps until they are swept
    burn_per_hour: int  # sum over its assignments of gpus x price per GPU-hour
    # How long the escrow lasts at the current burn rate; None while the lease burns nothing (open,
    # closing or closed). Not the time the lease has left: the escrow is sized at the client's maximum
    # price, so on cheaper nodes it outlasts the lease's end, after which nothing is billed.
    runway_seconds: int | None
    ends_at: int  # its end: no usage after it is billable (unix seconds)


def lease_end(lease: Any) -> int:
    """When a placed lease ends, its duration after it started: no usage after it is billable (the
    program's `Lease::ends_at`). An open lease has no end yet (it ends its duration after it is
    placed, and only its client may close it meanwhile): ask only once it is placed."""
    return lease.started_at + lease.terms.duration_seconds


async def escrow(client: AsyncClient, lease_address: Pubkey, lease: Any) -> Escrow:
    status = type(lease.status).__name__
    held = 0 if status == "Closed" else await token_balance(client, lease_vault_pda(lease_address))
    balance = max(0, held - (lease.fees - lease.fees_swept))  # the fees are the treasury's
    shares = list(lease.assignments)[: lease.node_count]
    burn = sum(a.gpus * a.price_per_gpu_hour for a in shares) if status == "Active" else 0
    return Escrow(
        balance=balance,
        burn_per_hour=burn,
        runway_seconds=(balance * 3600 // burn) if burn else None,
        ends_at=lease_end(lease),
    )
