"""Every gpunet program address (PDA), derived with the program's seeds (programs/gpunet/src/state/seeds.rs)."""

from __future__ import annotations

from solders.pubkey import Pubkey

from gpunet.idl import PROGRAM_ID

__all__ = [
    "cohort_pda",
    "config_pda",
    "delegation_pda",
    "evidence_pda",
    "lease_pda",
    "lease_vault_pda",
    "node_pda",
    "pool_pda",
    "program_data_pda",
    "provider_pda",
    "reward_index_pda",
    "reward_root_pda",
    "reward_vault_pda",
    "stake_vault_pda",
    "staking_pda",
]

SEED_CONFIG = b"config"
SEED_PROVIDER = b"provider"
SEED_STAKE_VAULT = b"stake_vault"
SEED_NODE = b"node"
SEED_LEASE = b"lease"
SEED_LEASE_VAULT = b"lease_vault"
SEED_EVIDENCE = b"evidence"
SEED_STAKING = b"staking"
SEED_REWARD_VAULT = b"reward_vault"
SEED_POOL = b"pool"
SEED_COHORT = b"cohort"
SEED_DELEGATION = b"delegation"
SEED_REWARD_INDEX = b"reward_index"
SEED_REWARD_ROOT = b"reward_root"
BPF_LOADER_UPGRADEABLE = Pubkey.from_string("BPFLoaderUpgradeab1e11111111111111111111111")


def _pda(*seeds: bytes, program_id: Pubkey = PROGRAM_ID) -> Pubkey:
    return Pubkey.find_program_address(list(seeds), program_id)[0]


def config_pda(program_id: Pubkey = PROGRAM_ID) -> Pubkey:
    """The protocol's single config account."""
    return _pda(SEED_CONFIG, program_id=program_id)


def provider_pda(authority: Pubkey, program_id: Pubkey = PROGRAM_ID) -> Pubkey:
    """A supplier's provider account, keyed by its wallet."""
    return _pda(SEED_PROVIDER, bytes(authority), program_id=program_id)


def stake_vault_pda(provider: Pubkey, program_id: Pubkey = PROGRAM_ID) -> Pubkey:
    """The token account holding a provider's stake."""
    return _pda(SEED_STAKE_VAULT, bytes(provider), program_id=program_id)


def node_pda(node_key: Pubkey, program_id: Pubkey = PROGRAM_ID) -> Pubkey:
    """A node account, keyed by the node's signing key."""
    return _pda(SEED_NODE, bytes(node_key), program_id=program_id)


def lease_pda(client: Pubkey, lease_id: int, program_id: Pubkey = PROGRAM_ID) -> Pubkey:
    """A lease account, keyed by its client and the client's lease id (u64)."""
    if not 0 <= lease_id < 2**64:
        raise ValueError(f"lease id must be a u64, got {lease_id}")
    return _pda(SEED_LEASE, bytes(client), lease_id.to_bytes(8, "little"), program_id=program_id)


def lease_vault_pda(lease: Pubkey, program_id: Pubkey = PROGRAM_ID) -> Pubkey:
    """The token account holding a lease's escrow."""
    return _pda(SEED_LEASE_VAULT, bytes(lease), program_id=program_id)


def evidence_pda(evidence_hash: bytes, program_id: Pubkey = PROGRAM_ID) -> Pubkey:
    """The record that a piece of fault evidence was used for a slash (it can slash once)."""
    return _pda(SEED_EVIDENCE, evidence_hash, program_id=program_id)


def staking_pda(program_id: Pubkey = PROGRAM_ID) -> Pubkey:
    """The staking config (epochs, the per-epoch slash cap, the reward schedule)."""
    return _pda(SEED_STAKING, program_id=program_id)


def reward_vault_pda(program_id: Pubkey = PROGRAM_ID) -> Pubkey:
    """The token account holding the funded, not yet claimed rewards."""
    return _pda(SEED_REWARD_VAULT, program_id=program_id)


def pool_pda(provider: Pubkey, program_id: Pubkey = PROGRAM_ID) -> Pubkey:
    """A provider's pool of delegated stake, keyed by its provider account."""
    return _pda(SEED_POOL, bytes(provider), program_id=program_id)


def _i64(value: int, what: str) -> bytes:
    if not -(2**63) <= value < 2**63:
        raise ValueError(f"{what} must be an i64, got {value}")
    return value.to_bytes(8, "little", signed=True)


def cohort_pda(provider: Pubkey, exit_epoch: int, program_id: Pubkey = PROGRAM_ID) -> Pubkey:
    """The stake undelegated from a provider's pool in epoch `exit_epoch`, unbonding together."""
    return _pda(SEED_COHORT, bytes(provider), _i64(exit_epoch, "exit epoch"), program_id=program_id)


def delegation_pda(provider: Pubkey, delegator: Pubkey, nonce: int, program_id: Pubkey = PROGRAM_ID) -> Pubkey:
    """One delegator's position in a provider's pool (a wallet may hold several, by nonce, a u64)."""
    if not 0 <= nonce < 2**64:
        raise ValueError(f"delegation nonce must be a u64, got {nonce}")
    return _pda(SEED_DELEGATION, bytes(provider), bytes(delegator), nonce.to_bytes(8, "little"), program_id=program_id)


def reward_index_pda(provider: Pubkey, epoch: int, program_id: Pubkey = PROGRAM_ID) -> Pubkey:
    """A pool's reward per share through `epoch` (kept for positions that began or ended there)."""
    return _pda(SEED_REWARD_INDEX, bytes(provider), _i64(epoch, "epoch"), program_id=program_id)


def reward_root_pda(epoch: int, program_id: Pubkey = PROGRAM_ID) -> Pubkey:
    """The Merkle root of `epoch`'s rewards."""
    return _pda(SEED_REWARD_ROOT, _i64(epoch, "epoch"), program_id=program_id)


def program_data_pda(program_id: Pubkey = PROGRAM_ID) -> Pubkey:
    """The upgradeable loader's ProgramData account of the program (holds its upgrade authority)."""
    return Pubkey.find_program_address([bytes(program_id)], BPF_LOADER_UPGRADEABLE)[0]
