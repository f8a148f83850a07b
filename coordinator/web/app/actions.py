"""The wallet app's transactions, built by the coordinator with the SDK's builders (gpunet.instructions:
one way to build each gpunet instruction) and returned unsigned to the page, whose fee payer is the
connected wallet. The page decodes and checks each one before its wallet is asked (web/src/check.ts):
nothing here is trusted by it.

Each action reads its form (the page's JSON), refuses bad input with a clear message (FormError) and
answers the instructions with a summary of what they do and cost, the u64 amounts as strings."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from solana.rpc.async_api import AsyncClient
from solders.instruction import Instruction
from solders.pubkey import Pubkey

from gpunet import catalog
from gpunet import instructions as ix
from gpunet import staking as sx
from gpunet.accounts import AccountError, chain_clock, fetch, fetch_config
from gpunet.amounts import U64_MAX, escrow_for, u64_json
from gpunet.errors import GpunetError
from gpunet.pda import cohort_pda, delegation_pda, lease_pda, pool_pda, provider_pda
from gpunet.positions import ACTIVE, collect_ix, collectable, epoch_at, fetch_staking, share_value
from gpunet.tokens import io_account

__all__ = ["ACTIONS", "Built", "FormError", "build"]

MAX_LEASE_SECONDS = 366 * 86_400  # a form's duration or top-up, at most (the program bounds it further)


class FormError(GpunetError, ValueError):
    """The form is not one the action can build: nothing is built."""


@dataclass(frozen=True)
class Built:
    instructions: list[Instruction]
    summary: dict[str, Any]  # what the page shows (and checks against its form)


def _pubkey(form: dict[str, Any], name: str) -> Pubkey:
    try:
        return Pubkey.from_string(str(form[name]))
    except (KeyError, ValueError):
        raise FormError(f"{name}: not a base58 address") from None


def _int(form: dict[str, Any], name: str, low: int = 0, high: int = U64_MAX) -> int:
    """A u64-sized integer, given as a JSON integer or a decimal string (the page sends u64s as strings)."""
    raw = form.get(name)
    if isinstance(raw, bool) or not isinstance(raw, int | str):
        raise FormError(f"{name}: an integer is required")
    try:
        value = int(raw) if isinstance(raw, int) or raw.isdecimal() else None
    except ValueError:
        value = None
    if value is None or not low <= value <= high:
        raise FormError(f"{name}: an integer from {low} to {high} is required, got {raw!r}")
    return value


def _code(form: dict[str, Any], name: str, lookup: Callable[[str], int]) -> int:
    raw = str(form.get(name, "any"))
    if raw.lower() == "any" or raw == str(ix.ANY):
        return ix.ANY
    try:
        return lookup(raw)
    except (KeyError, ValueError, GpunetError) as e:
        raise FormError(f"{name}: {e}") from None


async def _lease(chain: AsyncClient, form: dict[str, Any], wallet: Pubkey) -> tuple[Pubkey, Any]:
    address = _pubkey(form, "lease")
    try:
        lease = await fetch(chain, address, "Lease")
    except AccountError as e:
        raise FormError(str(e)) from None
    if lease.client != wallet:
        raise FormError(f"lease {address} belongs to {lease.client}: only its client can act on it here")
    return address, lease


async def open_lease(chain: AsyncClient, wallet: Pubkey, form: dict[str, Any]) -> Built:
    config = await fetch_config(chain)
    lease_id = _int(form, "lease_id")
    terms = ix.LeaseTerms(
        _code(form, "gpu_model", lambda name: catalog.gpu_model(name).code),
        _int(form, "min_vram_gb", 0, 2**16 - 1),
        _int(form, "gpu_count", 1, 2**8 - 1),
        _code(form, "region", catalog.region),
        _int(form, "max_price_per_gpu_hour", 1),
        _int(form, "duration_seconds", 1, MAX_LEASE_SECONDS),
    )
    escrow = escrow_for(terms.max_price_per_gpu_hour, terms.gpu_count, terms.duration_seconds)
    if escrow > U64_MAX:
        raise FormError("the escrow (max price x GPUs x duration) does not fit a u64")
    tokens = io_account(wallet, config.io_mint)
    lease = lease_pda(wallet, lease_id)
    return Built(
        [ix.open_lease(wallet, tokens, config.io_mint, lease_id, terms)],
        {
            "does": f"opens lease {lease} and escrows {escrow} IO base units from your IO account",
            "lease": str(lease),
            "lease_id": u64_json(lease_id),
            "escrow": u64_json(escrow),
            "io_account": str(tokens),
            "io_mint": str(config.io_mint),
        },
    )


async def top_up(chain: AsyncClient, wallet: Pubkey, form: dict[str, Any]) -> Built:
    config = await fetch_config(chain)
    address, lease = await _lease(chain, form, wallet)
    extra = _int(form, "extra_seconds", 1, MAX_LEASE_SECONDS)
    amount = escrow_for(lease.terms.max_price_per_gpu_hour, lease.terms.gpu_count, extra)
    tokens = io_account(wallet, config.io_mint)
    return Built(
        [ix.top_up_lease(wallet, tokens, address, extra)],
        {
            "does": f"extends lease {address} by {extra} s, escrowing {amount} IO base units more",
            "lease": str(address),
            "escrow": u64_json(amount),
            "io_account": str(tokens),
        },
    )


async def close(chain: AsyncClient, wallet: Pubkey, form: dict[str, Any]) -> Built:
    config = await fetch_config(chain)
    address, lease = await _lease(chain, form, wallet)
    status = type(lease.status).__name__
    if status not in ("Open", "Active"):
        raise FormError(f"lease {address} is {status.lower()} already")
    nodes = [a.node for a in list(lease.assignments)[: lease.node_count]]
    tokens = io_account(wallet, config.io_mint)
    return Built(
        [ix.close_lease(wallet, wallet, tokens, address, nodes)],
        {
            "does": f"closes lease {address}: billing stops, what no usage can cost any more comes back",
            "lease": str(address),
            "escrow": "0",
            "io_account": str(tokens),
            "nodes": [str(n) for n in nodes],
        },
    )


async def stake(chain: AsyncClient, wallet: Pubkey, form: dict[str, Any]) -> Built:
    config = await fetch_config(chain)
    amount = _int(form, "amount", 1)
    tokens = io_account(wallet, config.io_mint)
    return Built(
        [ix.stake(wallet, tokens, amount)],
        {
            "does": f"stakes {amount} IO base units from your IO account",
            "amount": u64_json(amount),
            "provider": str(provider_pda(wallet)),
            "io_account": str(tokens),
        },
    )


async def unstake(chain: AsyncClient, wallet: Pubkey, form: dict[str, Any]) -> Built:
    config = await fetch_config(chain)
    amount = _int(form, "amount", 1)
    return Built(
        [ix.request_unstake(wallet, amount)],
        {
            "does": f"starts unbonding {amount} IO base units of your stake "
            f"(withdrawable after {config.unbonding_seconds} s)",
            "amount": u64_json(amount),
            "provider": str(provider_pda(wallet)),
        },
    )


async def withdraw(chain: AsyncClient, wallet: Pubkey, form: dict[str, Any]) -> Built:
    config = await fetch_config(chain)
    tokens = io_account(wallet, config.io_mint)
    try:
        provider = await fetch(chain, provider_pda(wallet), "Provider")
    except AccountError:
        raise FormError(f"{wallet} has no provider account: stake first") from None
    return Built(
        [ix.withdraw_unstaked(wallet, tokens)],
        {
            "does": f"withdraws your unbonded stake ({provider.unbonding} IO base units) to your IO account",
            "amount": u64_json(provider.unbonding),
            "provider": str(provider_pda(wallet)),
            "io_account": str(tokens),
        },
    )


# --- co-staking: a token holder's positions in providers' pools (gpunet.staking's builders)


async def _pool(chain: AsyncClient, form: dict[str, Any]) -> tuple[Pubkey, Any, Any]:
    """The form's `provider` (its provider account), with its Provider and Pool accounts."""
    address = _pubkey(form, "provider")
    try:
        return address, await fetch(chain, address, "Provider"), await fetch(chain, pool_pda(address), "Pool")
    except AccountError:
        raise FormError(f"provider: {address} is not a provider with an open pool") from None


async def _position(chain: AsyncClient, form: dict[str, Any], wallet: Pubkey) -> tuple[Pubkey, Any, Any, Any]:
    """The wallet's position `nonce` in the form's provider's pool (its address is the wallet's by
    its seeds), with the pool's accounts."""
    provider, account, pool = await _pool(chain, form)
    nonce = _int(form, "nonce")
    address = delegation_pda(provider, wallet, nonce)
    try:
        return address, await fetch(chain, address, "Delegation"), account, pool
    except AccountError:
        raise FormError(f"you hold no position {nonce} in the pool of provider {provider}") from None


async def delegate(chain: AsyncClient, wallet: Pubkey, form: dict[str, Any]) -> Built:
    config = await fetch_config(chain)
    await fetch_staking(chain)
    provider, _, _ = await _pool(chain, form)
    nonce, amount = _int(form, "nonce"), _int(form, "amount", 1)
    if (await chain.get_account_info(delegation_pda(provider, wallet, nonce))).value is not None:
        raise FormError(f"nonce: you hold position {nonce} in this pool already (the next free nonce opens a new one)")
    tokens = io_account(wallet, config.io_mint)
    return Built(
        [sx.delegate(wallet, tokens, provider, nonce, amount)],
        {
            "does": f"delegates {amount} IO base units from your IO account to the pool of provider {provider}",
            "amount": u64_json(amount),
            "provider": str(provider),
            "delegation": str(delegation_pda(provider, wallet, nonce)),
            "io_account": str(tokens),
        },
    )


async def undelegate(chain: AsyncClient, wallet: Pubkey, form: dict[str, Any]) -> Built:
    staking = await fetch_staking(chain)
    address, d, account, _ = await _position(chain, form, wallet)
    if d.exit_epoch != ACTIVE:
        raise FormError(f"position {d.nonce} was undelegated in epoch {d.exit_epoch} already")
    # The program derives the cohort from its own clock: a form made in an epoch that has since ended
    # would be refused; it is answered here, with the epoch to build for.
    epoch, now_epoch = _int(form, "epoch", 0, 2**63 - 1), epoch_at(staking, await chain_clock(chain))
    if epoch != now_epoch:
        raise FormError(f"epoch: the chain is in epoch {now_epoch}, not {epoch}: undelegate again")
    return Built(
        [sx.undelegate(wallet, d.provider, d.nonce, epoch)],
        {
            "does": f"undelegates position {d.nonce} into epoch {epoch}'s unbonding cohort",
            "amount": u64_json(share_value(d.shares, account.delegated_shares, account.delegated)),
            "delegation": str(address),
            "cohort": str(cohort_pda(d.provider, epoch)),
        },
    )


async def withdraw_delegation(chain: AsyncClient, wallet: Pubkey, form: dict[str, Any]) -> Built:
    config = await fetch_config(chain)
    address, d, _, _ = await _position(chain, form, wallet)
    if d.exit_epoch == ACTIVE or d.cohort_shares == 0:
        raise FormError(f"position {d.nonce} has no unbonded stake to withdraw (undelegate it first)")
    cohort = await fetch(chain, cohort_pda(d.provider, d.exit_epoch), "Cohort")
    tokens = io_account(wallet, config.io_mint)
    amount = share_value(d.cohort_shares, cohort.shares, cohort.stake)
    return Built(
        [sx.withdraw_delegation(wallet, tokens, d.provider, d.nonce, d.exit_epoch)],
        {
            "does": f"withdraws position {d.nonce}'s {amount} IO base units to your IO account",
            "amount": u64_json(amount),
            "delegation": str(address),
            "io_account": str(tokens),
        },
    )


async def collect_rewards(chain: AsyncClient, wallet: Pubkey, form: dict[str, Any]) -> Built:
    config = await fetch_config(chain)
    address, d, _, pool = await _position(chain, form, wallet)
    tokens = io_account(wallet, config.io_mint)
    rewards = await collectable(chain, pool, d)
    return Built(
        [await collect_ix(chain, wallet, tokens, d)],
        {
            "does": f"collects position {d.nonce}'s credited rewards to your IO account",
            "amount": None if rewards is None else u64_json(rewards),
            "delegation": str(address),
            "io_account": str(tokens),
        },
    )


Action = Callable[[AsyncClient, Pubkey, dict[str, Any]], Awaitable[Built]]
ACTIONS: dict[str, Action] = {
    "open_lease": open_lease,
    "top_up": top_up,
    "close": close,
    "stake": stake,
    "unstake": unstake,
    "withdraw": withdraw,
    "delegate": delegate,
    "undelegate": undelegate,
    "withdraw_delegation": withdraw_delegation,
    "collect_rewards": collect_rewards,
}


async def build(chain: AsyncClient, action: str, form: Any) -> tuple[Pubkey, Built]:
    """The wallet (the form's `wallet`, the fee payer) and what `action` builds from the form."""
    if action not in ACTIONS:
        raise FormError(f"no action {action!r}: one of {', '.join(ACTIONS)}")
    if not isinstance(form, dict):
        raise FormError("the body must be a JSON object (the action's form)")
    wallet = _pubkey(form, "wallet")
    return wallet, await ACTIONS[action](chain, wallet, form)
