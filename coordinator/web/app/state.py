"""What the wallet app shows of a wallet, its leases and its co-staking positions: balances and accounts
read from the chain, the settlements from the ledger (each an indexed chain event). u64 amounts are
strings, as the API's (gpunet.amounts.u64_json: JSON numbers lose precision past 2^53 in a browser)."""

from __future__ import annotations

from typing import Any

import asyncpg
from solana.rpc.async_api import AsyncClient
from solders.pubkey import Pubkey

from coordinator.db import chain as ledger
from coordinator.db import wallet as wallet_rows
from gpunet.accounts import AccountError, chain_clock, escrow, fetch, fetch_config, fetch_many, program_accounts
from gpunet.amounts import u64_json
from gpunet.pda import provider_pda
from gpunet.positions import epoch_at, fetch_staking, index_epochs, pool_facts, positions_of, view
from gpunet.tokens import io_account, io_balance

__all__ = ["WARN_FRACTION", "WARN_SECONDS", "lease_state", "stake_state", "wallet_state"]

# The page warns (and offers a top-up) when a placed lease has under 20 % of its time left, or under
# 10 minutes: Akash's users' most frequent complaint is a lease that ran dry unnoticed.
WARN_FRACTION = 0.2
WARN_SECONDS = 600
SETTLEMENTS_SHOWN = 500
# The u64 figures of a pool and of a position (gpunet.positions: pool_facts, PositionView.data).
POOL_U64S = (
    "own_stake",
    "own_unbonding",
    "delegated",
    "delegated_shares",
    "cap",
    "room",
    "delegated_unbonding",
    "supplier_rewards",
    "delegator_rewards",
)
POSITION_U64S = ("nonce", "amount", "shares", "rewards_to_collect")


def _status(account: Any) -> str:
    return type(account.status).__name__


async def lease_state(chain: AsyncClient, pool: asyncpg.Pool, address: Pubkey) -> dict[str, Any]:
    """A lease as its client follows it: status, nodes, escrow left and time left (with the top-up
    warning), and its settlements so far. AccountError when there is no such lease."""
    lease = await fetch(chain, address, "Lease")
    status = _status(lease)
    now = await chain_clock(chain)
    left: int | None = None
    held: int | None = None
    if status == "Active":
        view = await escrow(chain, address, lease)
        held = view.balance
        left = max(0, view.ends_at - now)
        if view.runway_seconds is not None:
            left = min(left, view.runway_seconds)
    duration = int(lease.terms.duration_seconds)
    warn = left is not None and (left < WARN_SECONDS or left < duration * WARN_FRACTION)
    async with pool.acquire() as conn:  # the first SETTLEMENTS_SHOWN, in chain order (the explorer has them all)
        settled = (await ledger.page(conn, "settlements", [("lease", "=", str(address))], SETTLEMENTS_SHOWN, 0))[
            :SETTLEMENTS_SHOWN
        ]
    return {
        "lease": str(address),
        "client": str(lease.client),
        "lease_id": u64_json(lease.lease_id),
        "status": status,
        "gpu_count": int(lease.terms.gpu_count),
        "max_price_per_gpu_hour": u64_json(lease.terms.max_price_per_gpu_hour),
        "duration_seconds": duration,
        "deposited": u64_json(lease.deposited),
        "paid": u64_json(lease.paid),
        "fees": u64_json(lease.fees),
        "refunded": u64_json(lease.refunded),
        "escrow_left": None if held is None else u64_json(held),
        "seconds_left": left,
        "warn_top_up": warn,
        "nodes": [str(a.node) for a in list(lease.assignments)[: lease.node_count]],
        "settlements": [
            {
                "signature": r["signature"],
                "node": r["node"],
                "gpu_seconds": u64_json(int(r["gpu_seconds"])),
                "amount": u64_json(int(r["amount"])),
                "payout": u64_json(int(r["payout"])),
                "fee": u64_json(int(r["fee"])),
            }
            for r in settled
        ],
    }


async def wallet_state(chain: AsyncClient, pool: asyncpg.Pool, wallet: Pubkey) -> dict[str, Any]:
    """The wallet's SOL and IO, its leases (from the ledger) and, for a supplier, its stake (from the
    chain) and its nodes with their earnings and faults (from the ledger)."""
    config = await fetch_config(chain)
    provider_address = provider_pda(wallet)
    provider: dict[str, Any] | None = None
    try:
        account = await fetch(chain, provider_address, "Provider")
        provider = {
            "provider": str(provider_address),
            "staked": u64_json(account.staked),
            "bonded": u64_json(account.bonded),
            "unbonding": u64_json(account.unbonding),
            "unbonding_ends_at": int(account.unbonding_ends_at),
        }
    except AccountError:
        pass
    async with pool.acquire() as conn:
        leases = await wallet_rows.client_leases(conn, str(wallet))
        nodes = await wallet_rows.provider_nodes(conn, str(provider_address))
    return {
        "wallet": str(wallet),
        "sol_lamports": u64_json((await chain.get_balance(wallet)).value),
        "io": u64_json(await io_balance(chain, wallet, config.io_mint)),
        "io_account": str(io_account(wallet, config.io_mint)),
        "io_mint": str(config.io_mint),
        "now": await chain_clock(chain),
        "provider": provider,
        "leases": [
            {
                "lease": r["lease"],
                "lease_id": u64_json(int(r["lease_id"])),
                "status": r["status"],
                "gpu_count": r["gpu_count"],
                "deposited": u64_json(int(r["deposited"])),
            }
            for r in leases
        ],
        "nodes": [
            {
                "node": r["node"],
                "node_key": r["node_key"],
                "gpu_count": r["gpu_count"],
                "jailed": r["jailed"],
                "earned": u64_json(int(r["earned"])),
                "faults": int(r["faults"]),
            }
            for r in nodes
        ],
    }


def _json(facts: dict[str, Any], u64s: tuple[str, ...]) -> dict[str, Any]:
    """Addresses in base58 and the named u64s as strings (an absent figure stays null)."""
    return {
        k: str(v) if isinstance(v, Pubkey) else u64_json(v) if k in u64s and v is not None else v
        for k, v in facts.items()
    }


async def stake_state(chain: AsyncClient, wallet: Pubkey) -> dict[str, Any]:
    """A token holder's co-staking, as `gpunet stake show` reads it: the epoch clock, every pool (its
    supplier's own stake, what is delegated and the cap, the commission now and scheduled) and the
    wallet's positions (value now, state, rewards to collect, and the epochs whose reward index a
    collect passes: the page derives those accounts itself). AccountError when staking is not
    configured."""
    staking = await fetch_staking(chain)
    now = await chain_clock(chain)
    epoch = epoch_at(staking, now)
    pools = {p.provider: p for _, p in await program_accounts(chain, "Pool")}
    providers = dict(zip(pools, await fetch_many(chain, list(pools), "Provider"), strict=True))
    positions = []
    for address, d in await positions_of(chain, wallet):
        shown = await view(chain, providers[d.provider], pools[d.provider], address, d, now)
        positions.append({**_json(shown.data(), POSITION_U64S), "index_epochs": await index_epochs(chain, d)})
    return {
        "wallet": str(wallet),
        "now": now,
        "epoch": epoch,
        "genesis": int(staking.genesis),
        "epoch_seconds": int(staking.epoch_seconds),
        "pools": [
            _json(pool_facts(account, providers[account], pool, staking, epoch), POOL_U64S)
            for account, pool in sorted(pools.items(), key=lambda item: bytes(item[0]))
        ],
        "positions": positions,
    }
