"""One builder per gpunet instruction: every account passed explicitly (anchorpy3 fills in no PDA).

The coordinator, the CLI, the worker and the tests all build gpunet transactions here, so
there is one implementation of each instruction (the Rust twin is the test harness in
programs/gpunet/tests/harness/builders.rs).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from functools import cache
from typing import Any

from anchorpy import Context, Program, Provider, Wallet
from solana.rpc.async_api import AsyncClient
from solders.instruction import AccountMeta, Instruction
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.system_program import ID as SYSTEM_PROGRAM_ID
from solders.sysvar import INSTRUCTIONS
from spl.token.constants import TOKEN_PROGRAM_ID

from gpunet.idl import PROGRAM_ID, load_idl
from gpunet.limits import (
    ANY,
    MAX_DOWNTIME_TOLERANCE_SECONDS,
    MAX_VERIFICATION_SECONDS,
    MAX_VERIFICATION_TIER,
    MIN_DOWNTIME_TOLERANCE_SECONDS,
)
from gpunet.pda import (
    cohort_pda,
    config_pda,
    evidence_pda,
    lease_pda,
    lease_vault_pda,
    node_pda,
    pool_pda,
    program_data_pda,
    provider_pda,
    stake_vault_pda,
    staking_pda,
)
from gpunet.usage import Receipt

__all__ = [
    "ANY",
    "FAULT_KINDS",
    "MAX_DOWNTIME_TOLERANCE_SECONDS",
    "MAX_VERIFICATION_SECONDS",
    "MAX_VERIFICATION_TIER",
    "MIN_DOWNTIME_TOLERANCE_SECONDS",
    "TIER_CONFIDENTIAL",
    "TIER_GPU",
    "TIER_SIMULATED",
    "TIER_UNVERIFIED",
    "TOKEN_PROGRAM_ID",
    "ConfigParams",
    "LeaseTerms",
    "NodeSpec",
    "Share",
    "assign_lease",
    "close_lease",
    "deregister_node",
    "finalize_lease",
    "initialize",
    "open_lease",
    "reassign_lease",
    "reclaim_lease",
    "record_verification",
    "register_node",
    "register_provider",
    "release_node",
    "request_unstake",
    "set_node_draining",
    "settle_usage",
    "slash_provider",
    "stake",
    "sweep_fees",
    "top_up_lease",
    "unjail_node",
    "update_config",
    "update_node",
    "withdraw_unstaked",
]

FAULT_KINDS = ("MissedHeartbeats", "FailedVerification", "InvalidUsage")
"""The program's FaultKind variants, in order. A "FailedVerification" slash also clears the node's verification."""

# A node's verification tier (the Node account's `verification_tier`, record_verification's `tier`).
TIER_UNVERIFIED = 0
"""Never verified, or the verification was cleared (a failed verification, a changed inventory)."""
TIER_SIMULATED = 1
"""Verified against a simulated reference: local clusters only."""
TIER_GPU = 2
"""Compute and memory verified on a real GPU."""
TIER_CONFIDENTIAL = 3
"""Reserved for confidential-computing attestation."""


@dataclass(frozen=True)
class ConfigParams:
    """The admin-settable protocol parameters (programs/gpunet/src/state/config.rs)."""

    treasury: Pubkey
    protocol_fee_bps: int
    min_stake_per_gpu: int
    unbonding_seconds: int
    usage_period_seconds: int
    jail_seconds: int
    slash_bps: tuple[int, int, int]
    slash_client_share_bps: int
    attesters: list[Pubkey] = field(default_factory=list)
    paused: bool = False
    close_grace_seconds: int = 60
    settle_window_seconds: int = 300
    lease_retention_seconds: int = 7 * 86_400
    # The least verification tier a node needs to be assigned (0: verification not required).
    min_verification_tier: int = TIER_UNVERIFIED
    # The longest an attester may record a verification valid for (<= MAX_VERIFICATION_SECONDS;
    # 0, nothing can be verified, only while no tier is required).
    max_verification_seconds: int = 7 * 86_400


@dataclass(frozen=True)
class NodeSpec:
    """The hardware and price a node offers."""

    gpu_model: int
    gpu_count: int
    vram_gb: int
    region: int
    price_per_gpu_hour: int
    inventory_hash: bytes = bytes(32)


@dataclass(frozen=True)
class LeaseTerms:
    """What a client asks for; `gpu_model`/`region` may be ANY."""

    gpu_model: int
    min_vram_gb: int
    gpu_count: int
    region: int
    max_price_per_gpu_hour: int
    duration_seconds: int


@dataclass(frozen=True)
class Share:
    """One node's part of an assignment: the node's signing key, its provider's wallet, GPUs, and
    the node's price per GPU-hour the placement was decided at (the program refuses another)."""

    node_key: Pubkey
    provider_authority: Pubkey
    gpus: int
    price_per_gpu_hour: int


@cache
def _program() -> Program:
    # Building instructions needs no connection; the provider is never used to send.
    return Program(load_idl(), PROGRAM_ID, Provider(AsyncClient("http://127.0.0.1:8899"), Wallet.dummy()))


def _ix(name: str, *args: Any, accounts: dict[str, Pubkey], remaining: list[AccountMeta] | None = None) -> Instruction:
    ctx = Context(accounts=accounts, remaining_accounts=remaining or [])
    return _program().instruction[name](*args, ctx=ctx)


def _values(obj: Any) -> dict[str, Any]:
    # Arguments go to anchorpy3 as plain dicts shaped like the IDL type: dataclasses.asdict and
    # anchorpy3's generated types both deep-copy, which solders' Pubkey does not support.
    return {f.name: getattr(obj, f.name) for f in fields(obj)}


def _config_params(params: ConfigParams) -> Any:
    values = _values(params)
    values["slash_bps"] = list(params.slash_bps)
    values["attesters"] = list(params.attesters)
    return values


# --- configuration


def initialize(admin: Pubkey, io_mint: Pubkey, params: ConfigParams) -> Instruction:
    return _ix(
        "initialize",
        _config_params(params),
        accounts={
            "admin": admin,
            "config": config_pda(),
            "io_mint": io_mint,
            "treasury": params.treasury,
            "program_data": program_data_pda(),
            "system_program": SYSTEM_PROGRAM_ID,
        },
    )


def update_config(admin: Pubkey, params: ConfigParams) -> Instruction:
    return _ix(
        "update_config",
        _config_params(params),
        accounts={"admin": admin, "config": config_pda(), "treasury": params.treasury},
    )


# --- suppliers


def register_provider(authority: Pubkey, io_mint: Pubkey) -> Instruction:
    provider = provider_pda(authority)
    return _ix(
        "register_provider",
        accounts={
            "authority": authority,
            "config": config_pda(),
            "provider": provider,
            "stake_vault": stake_vault_pda(provider),
            "io_mint": io_mint,
            "token_program": TOKEN_PROGRAM_ID,
            "system_program": SYSTEM_PROGRAM_ID,
        },
    )


def _stake_accounts(authority: Pubkey, tokens: Pubkey) -> dict[str, Pubkey]:
    provider = provider_pda(authority)
    return {
        "authority": authority,
        "config": config_pda(),
        "provider": provider,
        "stake_vault": stake_vault_pda(provider),
        "authority_tokens": tokens,
        "token_program": TOKEN_PROGRAM_ID,
    }


def stake(authority: Pubkey, tokens: Pubkey, amount: int) -> Instruction:
    return _ix("stake", amount, accounts=_stake_accounts(authority, tokens))


def request_unstake(authority: Pubkey, amount: int) -> Instruction:
    return _ix(
        "request_unstake",
        amount,
        accounts={"authority": authority, "config": config_pda(), "provider": provider_pda(authority)},
    )


def withdraw_unstaked(authority: Pubkey, tokens: Pubkey) -> Instruction:
    return _ix("withdraw_unstaked", accounts=_stake_accounts(authority, tokens))


# --- nodes


def register_node(authority: Pubkey, node_key: Pubkey, spec: NodeSpec) -> Instruction:
    """Both the supplier's wallet and the node key sign."""
    values = _values(spec)
    values["inventory_hash"] = list(spec.inventory_hash)
    return _ix(
        "register_node",
        values,
        accounts={
            "authority": authority,
            "config": config_pda(),
            "provider": provider_pda(authority),
            "node_key": node_key,
            "node": node_pda(node_key),
            "system_program": SYSTEM_PROGRAM_ID,
        },
    )


def _node_owner_accounts(authority: Pubkey, node_key: Pubkey) -> dict[str, Pubkey]:
    return {"authority": authority, "provider": provider_pda(authority), "node": node_pda(node_key)}


def update_node(
    authority: Pubkey, node_key: Pubkey, region: int, price_per_gpu_hour: int, inventory_hash: bytes
) -> Instruction:
    return _ix(
        "update_node",
        region,
        price_per_gpu_hour,
        list(inventory_hash),
        accounts=_node_owner_accounts(authority, node_key),
    )


def deregister_node(authority: Pubkey, node_key: Pubkey) -> Instruction:
    return _ix("deregister_node", accounts=_node_owner_accounts(authority, node_key))


def release_node(authority: Pubkey, node_key: Pubkey) -> Instruction:
    """Frees a deregistered node's bonded stake and closes its account, once the unbonding period
    has passed since its deregistration (and it is not jailed)."""
    return _ix("release_node", accounts={**_node_owner_accounts(authority, node_key), "config": config_pda()})


def unjail_node(authority: Pubkey, node_key: Pubkey) -> Instruction:
    return _ix("unjail_node", accounts=_node_owner_accounts(authority, node_key))


def set_node_draining(authority: Pubkey, node_key: Pubkey, draining: bool) -> Instruction:
    """Starts (`draining=True`) or ends the node's announced maintenance: while draining it gets
    no new leases and the coordinator moves its shares to other nodes without a slash."""
    return _ix("set_node_draining", draining, accounts=_node_owner_accounts(authority, node_key))


def record_verification(
    attester: Pubkey,
    node_key: Pubkey,
    tier: int,
    valid_until: int,
    evidence_hash: bytes,
    inventory_hash: bytes,
) -> Instruction:
    """The attester records that it verified the node at `tier` (TIER_SIMULATED..TIER_CONFIDENTIAL)
    until `valid_until` (unix seconds: in the future, at most the config's `max_verification_seconds`
    ahead). `evidence_hash`: SHA-256 of the challenge evidence the attester keeps; `inventory_hash`:
    the inventory verified, which must be the node's registered one. The node must not be jailed."""
    if not 1 <= tier <= MAX_VERIFICATION_TIER:
        raise ValueError(f"verification tier must be 1..{MAX_VERIFICATION_TIER}, not {tier}")
    if len(evidence_hash) != 32 or len(inventory_hash) != 32:
        raise ValueError("evidence and inventory hashes must be 32 bytes (SHA-256)")
    return _ix(
        "record_verification",
        tier,
        valid_until,
        list(evidence_hash),
        list(inventory_hash),
        accounts={"attester": attester, "config": config_pda(), "node": node_pda(node_key)},
    )


# --- leases


def open_lease(
    client: Pubkey,
    client_tokens: Pubkey,
    io_mint: Pubkey,
    lease_id: int,
    terms: LeaseTerms,
    downtime_tolerance_seconds: int = 0,
) -> Instruction:
    """Opens and escrows a lease. `downtime_tolerance_seconds`: how long its nodes may be silent before
    the coordinator treats them as lost (0: the network's default; else within the program's bounds,
    MIN_DOWNTIME_TOLERANCE_SECONDS..MAX_DOWNTIME_TOLERANCE_SECONDS)."""
    lease = lease_pda(client, lease_id)
    return _ix(
        "open_lease",
        lease_id,
        _values(terms),
        downtime_tolerance_seconds,
        accounts={
            "client": client,
            "config": config_pda(),
            "lease": lease,
            "lease_vault": lease_vault_pda(lease),
            "client_tokens": client_tokens,
            "io_mint": io_mint,
            "token_program": TOKEN_PROGRAM_ID,
            "system_program": SYSTEM_PROGRAM_ID,
        },
    )


def assign_lease(attester: Pubkey, lease: Pubkey, shares: list[Share]) -> Instruction:
    """Places the lease on every share's node at once (remaining accounts: node, provider per share)."""
    remaining = [
        meta
        for s in shares
        for meta in (
            AccountMeta(node_pda(s.node_key), is_signer=False, is_writable=True),
            AccountMeta(provider_pda(s.provider_authority), is_signer=False, is_writable=False),
        )
    ]
    return _ix(
        "assign_lease",
        bytes(s.gpus for s in shares),
        [s.price_per_gpu_hour for s in shares],
        accounts={"attester": attester, "config": config_pda(), "lease": lease},
        remaining=remaining,
    )


def top_up_lease(client: Pubkey, client_tokens: Pubkey, lease: Pubkey, extra_seconds: int) -> Instruction:
    return _ix(
        "top_up_lease",
        extra_seconds,
        accounts={
            "client": client,
            "config": config_pda(),
            "lease": lease,
            "lease_vault": lease_vault_pda(lease),
            "client_tokens": client_tokens,
            "token_program": TOKEN_PROGRAM_ID,
        },
    )


def reassign_lease(attester: Pubkey, lease: Pubkey, from_node_key: Pubkey, to: Share) -> Instruction:
    """Moves a lost (slashed, so jailed) or draining node's share to `to`, at `to`'s expected price."""
    return _ix(
        "reassign_lease",
        to.price_per_gpu_hour,
        accounts={
            "attester": attester,
            "config": config_pda(),
            "lease": lease,
            "from_node": node_pda(from_node_key),
            "to_node": node_pda(to.node_key),
            "to_provider": provider_pda(to.provider_authority),
        },
    )


def close_lease(
    closer: Pubkey, client: Pubkey, client_tokens: Pubkey, lease: Pubkey, nodes: list[Pubkey]
) -> Instruction:
    """Ends the lease's use: frees its nodes, refunds what no usage up to now can cost, and starts
    its settlement window. `nodes`: the lease's node accounts in assignment order (from the lease)."""
    return _ix(
        "close_lease",
        accounts={
            "closer": closer,
            "config": config_pda(),
            "lease": lease,
            "lease_vault": lease_vault_pda(lease),
            "client": client,
            "client_tokens": client_tokens,
            "token_program": TOKEN_PROGRAM_ID,
        },
        remaining=[AccountMeta(n, is_signer=False, is_writable=True) for n in nodes],
    )


def finalize_lease(
    finalizer: Pubkey, treasury: Pubkey, client: Pubkey, client_tokens: Pubkey, lease: Pubkey
) -> Instruction:
    """Ends a closing lease: the fees it collected go to the treasury, everything else its vault
    holds to the client, and the vault is closed."""
    return _ix(
        "finalize_lease",
        accounts={
            "finalizer": finalizer,
            "config": config_pda(),
            "lease": lease,
            "lease_vault": lease_vault_pda(lease),
            "client": client,
            "client_tokens": client_tokens,
            "treasury": treasury,
            "token_program": TOKEN_PROGRAM_ID,
        },
    )


def sweep_fees(sweeper: Pubkey, treasury: Pubkey, lease: Pubkey) -> Instruction:
    """Moves the fees a lease has collected (kept in its vault by every settlement) to the treasury; anyone may."""
    return _ix(
        "sweep_fees",
        accounts={
            "sweeper": sweeper,
            "config": config_pda(),
            "lease": lease,
            "lease_vault": lease_vault_pda(lease),
            "treasury": treasury,
            "token_program": TOKEN_PROGRAM_ID,
        },
    )


def reclaim_lease(reclaimer: Pubkey, client: Pubkey, lease: Pubkey) -> Instruction:
    """Closes a finalized lease's account after the retention period; the rent goes to the client."""
    return _ix(
        "reclaim_lease", accounts={"reclaimer": reclaimer, "config": config_pda(), "lease": lease, "client": client}
    )


# --- settlement and slashing


def settle_usage(
    attester: Pubkey,
    lease: Pubkey,
    node_key: Pubkey,
    provider_authority: Pubkey,
    provider_tokens: Pubkey,
    receipt: Receipt,
    accepted_gpu_seconds: int,
    income_epoch: int | None = None,
) -> Instruction:
    """Must directly follow the node's Ed25519 instruction for `receipt` (`Receipt.sign`). Pays
    `accepted_gpu_seconds` of the receipt's increment over the share's last settled receipt (at most
    all of it); the rest of the increment is settled unpaid. Writes only the lease, its vault and
    the supplier's token account, and with a pool its pool and stake vault.

    `income_epoch`: None for a provider without a pool; for one with a pool, the staking epoch now
    (`gpunet.positions.epoch_at` at the chain's clock), whose income the delegators' part becomes
    (the program also takes the epoch before, so a transaction landing after a boundary is not lost).
    """
    provider = provider_pda(provider_authority)
    pooled = income_epoch is not None
    absent = PROGRAM_ID  # Anchor: the program id for an optional account left out
    return _ix(
        "settle_usage",
        _values(receipt),
        accepted_gpu_seconds,
        income_epoch or 0,
        accounts={
            "attester": attester,
            "config": config_pda(),
            "lease": lease,
            "lease_vault": lease_vault_pda(lease),
            "node": node_pda(node_key),
            "provider": provider,
            "provider_tokens": provider_tokens,
            "instructions": INSTRUCTIONS,
            "token_program": TOKEN_PROGRAM_ID,
            "pool": pool_pda(provider) if pooled else absent,
            "staking": staking_pda() if pooled else absent,
            "stake_vault": stake_vault_pda(provider) if pooled else absent,
        },
    )


def signed_settlement(
    attester: Pubkey,
    lease: Pubkey,
    node: Keypair,
    provider_authority: Pubkey,
    provider_tokens: Pubkey,
    receipt: Receipt,
    accepted_gpu_seconds: int,
    income_epoch: int | None = None,
) -> list[Instruction]:
    """The node's signature and the settlement, in the order the program requires."""
    return [
        receipt.sign(lease, node),
        settle_usage(
            attester,
            lease,
            node.pubkey(),
            provider_authority,
            provider_tokens,
            receipt,
            accepted_gpu_seconds,
            income_epoch,
        ),
    ]


def slash_provider(
    attester: Pubkey,
    treasury: Pubkey,
    node_key: Pubkey,
    provider_authority: Pubkey,
    fault: str,
    evidence_hash: bytes,
    victim: tuple[Pubkey, Pubkey] | None = None,
    fault_at: int = 0,
    pool_cohorts: Sequence[int] | None = None,
) -> Instruction:
    """`fault`: one of FAULT_KINDS. `victim`: (lease, its client's token account) to pay the client share.
    `fault_at`: when the fault was committed (unix seconds); 0 when unknown, which reaches back as far
    as the unbonding period. `pool_cohorts`: None for a provider without a pool of delegated stake;
    for one with a pool, the exit epochs of the cohorts the slash reaches (gpunet.staking.cohorts_reached),
    possibly none."""
    if fault not in FAULT_KINDS:
        raise ValueError(f"unknown fault kind {fault!r}; expected one of {', '.join(FAULT_KINDS)}")
    if len(evidence_hash) != 32:
        raise ValueError("evidence hash must be 32 bytes (SHA-256)")
    provider = provider_pda(provider_authority)
    lease, client_tokens = victim if victim else (PROGRAM_ID, PROGRAM_ID)  # Anchor: program id = absent
    return _ix(
        "slash_provider",
        getattr(_program().type["FaultKind"], fault)(),
        list(evidence_hash),
        fault_at,
        accounts={
            "attester": attester,
            "config": config_pda(),
            "staking": staking_pda(),
            "node": node_pda(node_key),
            "provider": provider,
            "stake_vault": stake_vault_pda(provider),
            "treasury": treasury,
            "evidence": evidence_pda(evidence_hash),
            "lease": lease,
            "client_tokens": client_tokens,
            "pool": PROGRAM_ID if pool_cohorts is None else pool_pda(provider),
            "token_program": TOKEN_PROGRAM_ID,
            "system_program": SYSTEM_PROGRAM_ID,
        },
        remaining=[
            AccountMeta(cohort_pda(provider, epoch), is_signer=False, is_writable=True) for epoch in pool_cohorts or ()
        ],
    )
