"""Builders for co-staking and rewards (programs/gpunet/src/instructions: configure_staking through
expire_reward_root), and the one rule a client must mirror to pass a slash its accounts.

Like gpunet.instructions, every account is passed explicitly; pools, positions and cohorts are
keyed by the provider account (gpunet.pda.provider_pda of the supplier's wallet), not the wallet.
The Rust twin is programs/gpunet/tests/harness/staking.rs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from solders.instruction import AccountMeta, Instruction
from solders.pubkey import Pubkey
from solders.system_program import ID as SYSTEM_PROGRAM_ID
from spl.token.constants import TOKEN_PROGRAM_ID

from gpunet.instructions import _ix, _values
from gpunet.pda import (
    cohort_pda,
    config_pda,
    delegation_pda,
    pool_pda,
    reward_index_pda,
    reward_root_pda,
    reward_vault_pda,
    stake_vault_pda,
    staking_pda,
)
from gpunet.rewards import RewardLeaf

__all__ = [
    "MALICIOUS_FAULTS",
    "StakingParams",
    "claim_reward",
    "cohorts_reached",
    "collect_rewards",
    "configure_staking",
    "delegate",
    "expire_reward_root",
    "fund_rewards",
    "open_pool",
    "post_reward_root",
    "set_commission",
    "skip_reward_epoch",
    "undelegate",
    "update_staking",
    "veto_reward_root",
    "withdraw_delegation",
    "withdraw_pool_rewards",
]

MALICIOUS_FAULTS = ("FailedVerification", "InvalidUsage")
"""The fault kinds that reach delegators' principal; a liveness fault (MissedHeartbeats) never does."""


@dataclass(frozen=True)
class StakingParams:
    """The staking config (programs/gpunet/src/state/staking.rs). The defaults are the network's:
    a day per epoch (rewards are credited daily, uptime sampled hourly within it); commission at most
    20 %; at most 30 % of a provider's stake slashed per epoch (a burst of evidence from one outage
    cannot wipe a pool before anyone reacts); a 6 h window to audit and veto a root; 30 epochs to
    claim before unclaimed rewards return to the vault."""

    emission_per_epoch: int
    epoch_seconds: int = 86_400
    max_commission_bps: int = 2_000
    slash_cap_bps: int = 3_000
    root_timelock_seconds: int = 6 * 3_600
    claim_epochs: int = 30


def _accounts(**accounts: Pubkey) -> dict[str, Pubkey]:
    return accounts


# --- the config and the reward vault


def configure_staking(admin: Pubkey, io_mint: Pubkey, params: StakingParams) -> Instruction:
    """Creates the staking config and its reward vault; epoch 0 begins now. Once only."""
    return _ix(
        "configure_staking",
        _values(params),
        accounts=_accounts(
            admin=admin,
            config=config_pda(),
            staking=staking_pda(),
            reward_vault=reward_vault_pda(),
            io_mint=io_mint,
            token_program=TOKEN_PROGRAM_ID,
            system_program=SYSTEM_PROGRAM_ID,
        ),
    )


def update_staking(admin: Pubkey, params: StakingParams) -> Instruction:
    """Changes the parameters; the epoch length is fixed, a new emission applies from the next epoch."""
    return _ix(
        "update_staking", _values(params), accounts=_accounts(admin=admin, config=config_pda(), staking=staking_pda())
    )


def fund_rewards(funder: Pubkey, funder_tokens: Pubkey, amount: int) -> Instruction:
    """Adds `amount` to the reward vault's funds (anyone may; a plain transfer to the vault funds nothing)."""
    return _ix(
        "fund_rewards",
        amount,
        accounts=_accounts(
            funder=funder,
            config=config_pda(),
            staking=staking_pda(),
            reward_vault=reward_vault_pda(),
            funder_tokens=funder_tokens,
            token_program=TOKEN_PROGRAM_ID,
        ),
    )


# --- pools and positions


def open_pool(authority: Pubkey, provider: Pubkey, commission_bps: int) -> Instruction:
    """The supplier opens its pool: it can take delegations from now and earn rewards from the next epoch."""
    return _ix(
        "open_pool",
        commission_bps,
        accounts=_accounts(
            authority=authority,
            staking=staking_pda(),
            provider=provider,
            pool=pool_pda(provider),
            system_program=SYSTEM_PROGRAM_ID,
        ),
    )


def set_commission(authority: Pubkey, provider: Pubkey, commission_bps: int) -> Instruction:
    """A cut applies at once; a raise only after the next full epoch."""
    return _ix(
        "set_commission",
        commission_bps,
        accounts=_accounts(authority=authority, staking=staking_pda(), provider=provider, pool=pool_pda(provider)),
    )


def delegate(delegator: Pubkey, delegator_tokens: Pubkey, provider: Pubkey, nonce: int, amount: int) -> Instruction:
    """Opens position `nonce` of `amount` IO in the provider's pool; it earns from the next epoch on."""
    return _ix(
        "delegate",
        nonce,
        amount,
        accounts=_accounts(
            delegator=delegator,
            config=config_pda(),
            staking=staking_pda(),
            provider=provider,
            pool=pool_pda(provider),
            stake_vault=stake_vault_pda(provider),
            delegator_tokens=delegator_tokens,
            delegation=delegation_pda(provider, delegator, nonce),
            token_program=TOKEN_PROGRAM_ID,
            system_program=SYSTEM_PROGRAM_ID,
        ),
    )


def undelegate(delegator: Pubkey, provider: Pubkey, nonce: int, epoch: int) -> Instruction:
    """Moves the position into `epoch`'s unbonding cohort (`epoch`: the current one, by the chain's clock)."""
    return _ix(
        "undelegate",
        accounts=_accounts(
            delegator=delegator,
            config=config_pda(),
            staking=staking_pda(),
            provider=provider,
            pool=pool_pda(provider),
            delegation=delegation_pda(provider, delegator, nonce),
            cohort=cohort_pda(provider, epoch),
            system_program=SYSTEM_PROGRAM_ID,
        ),
    )


def withdraw_delegation(
    delegator: Pubkey, delegator_tokens: Pubkey, provider: Pubkey, nonce: int, exit_epoch: int
) -> Instruction:
    """Pays out the position's unbonded stake once its cohort (`exit_epoch`, the position's) has matured."""
    return _ix(
        "withdraw_delegation",
        accounts=_accounts(
            delegator=delegator,
            config=config_pda(),
            provider=provider,
            stake_vault=stake_vault_pda(provider),
            delegation=delegation_pda(provider, delegator, nonce),
            cohort=cohort_pda(provider, exit_epoch),
            delegator_tokens=delegator_tokens,
            token_program=TOKEN_PROGRAM_ID,
        ),
    )


def collect_rewards(
    delegator: Pubkey, delegator_tokens: Pubkey, provider: Pubkey, nonce: int, index_epochs: Sequence[int] = ()
) -> Instruction:
    """Pays the position's credited rewards to the delegator's token account; anyone may send it.
    `index_epochs`: the epochs whose reward index the program may need (the position's
    `reward_epoch` and `exit_epoch`, where such an index exists)."""
    return _ix(
        "collect_rewards",
        accounts=_accounts(
            config=config_pda(),
            provider=provider,
            pool=pool_pda(provider),
            stake_vault=stake_vault_pda(provider),
            delegation=delegation_pda(provider, delegator, nonce),
            delegator=delegator,
            delegator_tokens=delegator_tokens,
            token_program=TOKEN_PROGRAM_ID,
        ),
        remaining=[
            AccountMeta(reward_index_pda(provider, e), is_signer=False, is_writable=False) for e in index_epochs
        ],
    )


def withdraw_pool_rewards(authority: Pubkey, provider: Pubkey, authority_tokens: Pubkey) -> Instruction:
    """The supplier takes its part of the pool's rewards (until then a slash takes it first)."""
    return _ix(
        "withdraw_pool_rewards",
        accounts=_accounts(
            authority=authority,
            config=config_pda(),
            provider=provider,
            pool=pool_pda(provider),
            stake_vault=stake_vault_pda(provider),
            authority_tokens=authority_tokens,
            token_program=TOKEN_PROGRAM_ID,
        ),
    )


# --- reward roots and claims


def post_reward_root(attester: Pubkey, epoch: int, root: bytes, total: int, leaves: int) -> Instruction:
    """An attester posts an ended epoch's root (gpunet.rewards.RewardTree); claimable after the timelock."""
    if len(root) != 32:
        raise ValueError("a reward root is 32 bytes (SHA-256)")
    return _ix(
        "post_reward_root",
        epoch,
        list(root),
        total,
        leaves,
        accounts=_accounts(
            attester=attester,
            config=config_pda(),
            staking=staking_pda(),
            reward_root=reward_root_pda(epoch),
            system_program=SYSTEM_PROGRAM_ID,
        ),
    )


def veto_reward_root(admin: Pubkey, epoch: int, poster: Pubkey) -> Instruction:
    """The admin removes a root during its timelock (its rent goes back to `poster`)."""
    return _ix(
        "veto_reward_root",
        accounts=_accounts(
            admin=admin, config=config_pda(), staking=staking_pda(), reward_root=reward_root_pda(epoch), poster=poster
        ),
    )


def expire_reward_root(epoch: int, poster: Pubkey) -> Instruction:
    """After the claim window anyone returns what the root left unclaimed to the vault's free funds."""
    return _ix(
        "expire_reward_root",
        accounts=_accounts(staking=staking_pda(), reward_root=reward_root_pda(epoch), poster=poster),
    )


def claim_reward(cranker: Pubkey, leaf: RewardLeaf, proof: Sequence[bytes]) -> Instruction:
    """Credits the leaf's pool (anyone may send it). A pool is credited epoch by epoch: `leaf.epoch`
    must be the one after the pool's `credited_through` (skip_reward_epoch passes an epoch without one)."""
    provider = leaf.provider
    return _ix(
        "claim_reward",
        leaf.epoch,
        leaf.supplier_amount,
        leaf.delegators_amount,
        [list(p) for p in proof],
        accounts=_accounts(
            cranker=cranker,
            config=config_pda(),
            staking=staking_pda(),
            reward_vault=reward_vault_pda(),
            reward_root=reward_root_pda(leaf.epoch),
            provider=provider,
            pool=pool_pda(provider),
            stake_vault=stake_vault_pda(provider),
            reward_index=reward_index_pda(provider, leaf.epoch),
            token_program=TOKEN_PROGRAM_ID,
            system_program=SYSTEM_PROGRAM_ID,
        ),
    )


def skip_reward_epoch(cranker: Pubkey, provider: Pubkey, epoch: int) -> Instruction:
    """Marks the pool's next epoch (`epoch`: its `credited_through` + 1) as earning nothing, once that
    epoch's claim window has closed; anyone may."""
    return _ix(
        "skip_reward_epoch",
        accounts=_accounts(
            cranker=cranker,
            staking=staking_pda(),
            provider=provider,
            pool=pool_pda(provider),
            reward_index=reward_index_pda(provider, epoch),
            system_program=SYSTEM_PROGRAM_ID,
        ),
    )


def cohorts_reached(pool: Any, config: Any, fault: str, fault_at: int, now: int) -> list[int]:
    """The exit epochs of the pool's cohorts a slash must pass (its remaining accounts), as the program
    selects them: for a malicious fault, the cohorts still unbonding at `now` that began after the
    fault (`fault_at`, reaching back at most the config's deregistered bond: the longer of the
    unbonding period and the settlement window); none for a liveness fault. `pool`, `config`: the
    decoded accounts; `now`: the chain's clock. Between building and landing a cohort may mature:
    the program then refuses (CohortsMismatch) and the slash is built again."""
    if fault not in MALICIOUS_FAULTS:
        return []
    since = max(fault_at, now - max(config.unbonding_seconds, config.settle_window_seconds))
    return [c.exit_epoch for c in pool.cohorts[: pool.cohort_len] if c.ends_at > now and c.starts_at > since]
