"""Reading co-staking's accounts as the program does: the epoch clock, schedules, what a position's
shares are worth and what it can collect, and the accounts a collect needs. The CLI, the
coordinator, the demo and the tests read pools and positions here (the program's own rules are in
programs/gpunet/src/state/pool.rs and staking.rs)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from solana.rpc.async_api import AsyncClient
from solders.instruction import Instruction
from solders.pubkey import Pubkey

from gpunet import staking
from gpunet.accounts import AccountError, fetch, program_accounts
from gpunet.limits import BPS_DENOMINATOR, DELEGATION_CAP_BPS
from gpunet.pda import cohort_pda, reward_index_pda, staking_pda

__all__ = [
    "ACTIVE",
    "PositionView",
    "collect_ix",
    "collectable",
    "delegation_cap",
    "epoch_at",
    "epoch_start",
    "fetch_staking",
    "index_epochs",
    "pool_facts",
    "positions_of",
    "reward_of",
    "schedule_at",
    "scheduled_after",
    "share_value",
    "shares_for",
    "view",
]

ACTIVE = 2**63 - 1  # a Delegation's exit_epoch while it is active (i64::MAX)
NOT_CONFIGURED = (
    "co-staking is not configured on this cluster yet: its admin starts it with "
    "`gpunet admin staking configure --emission AMOUNT`"
)


async def fetch_staking(client: AsyncClient) -> Any:
    """The staking config; AccountError saying how to create it when there is none."""
    try:
        return await fetch(client, staking_pda(), "Staking")
    except AccountError:
        raise AccountError(NOT_CONFIGURED) from None


def epoch_at(staking: Any, now: int) -> int:
    """The epoch `now` falls in, as the program counts (times before genesis are epoch 0's)."""
    return max(now - staking.genesis, 0) // max(staking.epoch_seconds, 1)


def epoch_start(staking: Any, epoch: int) -> int:
    return int(staking.genesis + epoch * staking.epoch_seconds)


def schedule_at(schedule: Any, epoch: int) -> int | None:
    """A Schedule's value in force during `epoch` (None before its first entry)."""
    entries = list(schedule.entries)[: schedule.len]
    return next((e.value for e in reversed(entries) if e.from_epoch <= epoch), None)


def scheduled_after(schedule: Any, epoch: int) -> list[tuple[int, int]]:
    """The changes a Schedule holds for after `epoch`: (from epoch, value)."""
    return [(e.from_epoch, e.value) for e in list(schedule.entries)[: schedule.len] if e.from_epoch > epoch]


def delegation_cap(provider: Any) -> int:
    """The most delegated stake the provider's own active stake allows (the program's Provider::delegation_cap)."""
    return int(provider.staked * DELEGATION_CAP_BPS // BPS_DENOMINATOR)


def shares_for(provider: Any, amount: int) -> int:
    """Shares `amount` more delegated IO buys, rounded down (1:1 in an empty pool)."""
    if provider.delegated_shares == 0:
        return amount
    return int(amount * provider.delegated_shares // provider.delegated)


def share_value(shares: int, total_shares: int, stake: int) -> int:
    """What `shares` of `total_shares` of `stake` are worth, rounded down (the program's share_value)."""
    return int(shares * stake // total_shares) if total_shares else 0


def reward_of(shares: int, acc: int) -> int:
    """`shares x acc / 2^64`, rounded down as the program does it (acc split in halves)."""
    return int(shares * (acc >> 64) + ((shares * (acc & (2**64 - 1))) >> 64))


async def positions_of(
    client: AsyncClient, delegator: Pubkey, provider: Pubkey | None = None
) -> list[tuple[Pubkey, Any]]:
    """The delegator's Delegation accounts (in one provider's pool, or all), by provider and nonce."""
    where = {"delegator": delegator} if provider is None else {"provider": provider, "delegator": delegator}
    found = await program_accounts(client, "Delegation", **where)
    return sorted(found, key=lambda pair: (bytes(pair[1].provider), pair[1].nonce))


async def _acc_through(client: AsyncClient, pool: Any, provider: Pubkey, epoch: int) -> int | None:
    """The pool's reward per share (x 2^64) summed through `epoch` (credited), as collect_rewards reads it."""
    if epoch == pool.credited_through:
        return int(pool.acc)
    if epoch <= pool.opened_epoch:
        return 0
    try:
        return int((await fetch(client, reward_index_pda(provider, epoch), "RewardIndex")).acc)
    except AccountError:
        return None


async def collectable(client: AsyncClient, pool: Any, d: Any) -> int | None:
    """What collect_rewards would pay the position now (None when a reward index it needs is missing)."""
    credited = pool.credited_through
    if credited < d.reward_epoch:
        return 0
    start = int(d.reward_acc) if d.reward_acc_known else await _acc_through(client, pool, d.provider, d.reward_epoch)
    end = await _acc_through(client, pool, d.provider, min(d.exit_epoch, credited))
    if start is None or end is None:
        return None
    return reward_of(d.shares, end - start)


async def index_epochs(client: AsyncClient, d: Any) -> list[int]:
    """The epochs whose RewardIndex collect_rewards may need for the position: its reward epoch and
    its exit epoch, where such an account exists (programs/gpunet/tests/harness/staking.rs)."""
    epochs = [e for e in dict.fromkeys((d.reward_epoch, d.exit_epoch)) if 0 <= e]
    found = (await client.get_multiple_accounts([reward_index_pda(d.provider, e) for e in epochs])).value
    return [e for e, info in zip(epochs, found, strict=True) if info is not None]


async def collect_ix(client: AsyncClient, delegator: Pubkey, tokens: Pubkey, d: Any) -> Instruction:
    return staking.collect_rewards(delegator, tokens, d.provider, d.nonce, await index_epochs(client, d))


@dataclass
class PositionView:
    """A position as a token holder reads it, every figure from the accounts."""

    address: Pubkey
    d: Any
    state: str  # active, unbonding, withdrawable, withdrawn
    amount: int  # what its stake is worth now
    withdrawable_at: int | None
    rewards: int | None  # credited to it and not collected; None when an index it needs is missing

    def data(self) -> dict[str, Any]:
        d = self.d
        return {
            "delegation": self.address,
            "provider": d.provider,
            "nonce": d.nonce,
            "state": self.state,
            "amount": self.amount,
            "shares": d.shares,
            "earns_from_epoch": d.since,
            "exit_epoch": None if d.exit_epoch == ACTIVE else d.exit_epoch,
            "withdrawable_at": self.withdrawable_at,
            "rewards_collected_through_epoch": d.reward_epoch,
            "rewards_to_collect": self.rewards,
        }


async def view(client: AsyncClient, provider: Any, pool: Any, address: Pubkey, d: Any, now: int) -> PositionView:
    """`provider`: the decoded Provider account of the position's pool; `now`: the chain's clock."""
    rewards = await collectable(client, pool, d)
    if d.exit_epoch == ACTIVE:
        amount = share_value(d.shares, provider.delegated_shares, provider.delegated)
        return PositionView(address, d, "active", amount, None, rewards)
    if d.cohort_shares == 0:
        return PositionView(address, d, "withdrawn", 0, None, rewards)
    cohort = await fetch(client, cohort_pda(d.provider, d.exit_epoch), "Cohort")
    amount = share_value(d.cohort_shares, cohort.shares, cohort.stake)
    state = "withdrawable" if now >= cohort.ends_at else "unbonding"
    return PositionView(address, d, state, amount, int(cohort.ends_at), rewards)


def pool_facts(account: Pubkey, provider: Any, pool: Any, staking: Any, epoch: int) -> dict[str, Any]:
    """A pool as a token holder chooses one: its supplier's own stake, what is delegated and the cap,
    the commission in force in `epoch` and every change scheduled after it (a raise waits a full
    epoch, so delegators can leave first)."""
    return {
        "provider": account,
        "authority": provider.authority,
        "commission_bps": schedule_at(pool.commission, epoch) or 0,
        "scheduled_commission": [
            {"commission_bps": value, "from_epoch": e, "from": epoch_start(staking, e)}
            for e, value in scheduled_after(pool.commission, epoch)
        ],
        "own_stake": provider.staked,
        "own_unbonding": provider.unbonding,
        "delegated": provider.delegated,
        "delegated_shares": provider.delegated_shares,
        "cap": delegation_cap(provider),
        "room": max(delegation_cap(provider) - provider.delegated, 0),
        "delegated_unbonding": provider.delegated_unbonding,
        "supplier_rewards": pool.provider_rewards,
        "delegator_rewards": pool.delegator_rewards,
        "opened_epoch": pool.opened_epoch,
        "credited_through_epoch": pool.credited_through,
    }
