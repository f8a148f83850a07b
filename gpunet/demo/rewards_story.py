"""The demo's co-staking part: the admin starts staking with short epochs, every supplier opens a
pool, a token holder backs each, and once an epoch the nodes were online and verified
through has ended, the coordinator's root for it is credited, the holder collects, and anyone
can audit the epoch from what the coordinator published."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx
from rich import box
from rich.table import Table
from solana.rpc.async_api import AsyncClient
from solders.keypair import Keypair

from gpunet import staking
from gpunet.amounts import IO, format_io
from gpunet.pda import provider_pda
from gpunet.positions import collect_ix, positions_of
from gpunet.reward_audit import audit_epoch
from gpunet.testbed import Client, Market
from gpunet.tokens import token_balance

# A 12 s epoch (a day on a real cluster): the story sees a few of them end. The timelock (the
# audit window) is 2 s here, 6 h by default.
EPOCH_SECONDS = 12
EMISSION = 100 * IO
COMMISSION_BPS = 1_000
DELEGATED = 50 * IO  # in each pool


@dataclass
class RewardsResult:
    epoch: int = -1  # the epoch shown: the first whose root paid something and was credited
    paid: int = 0  # what its root paid the pools
    collected: int = 0  # what the token holder collected
    audit_ok: bool = False


async def start_staking(market: Market) -> None:
    """The admin configures co-staking (epoch 0 begins now) and funds the reward vault."""
    admin = market.admin
    params = staking.StakingParams(EMISSION, epoch_seconds=EPOCH_SECONDS, root_timelock_seconds=2, claim_epochs=10)
    funds = await market.fund(admin.pubkey(), 10 * EMISSION)
    await market.send(
        admin,
        [
            staking.configure_staking(admin.pubkey(), market.mint, params),
            staking.fund_rewards(admin.pubkey(), funds, 10 * EMISSION),
        ],
    )


async def open_pools(market: Market, wallets: Sequence[Keypair]) -> Client:
    """Every supplier opens its pool; a token holder delegates to each. Returns the holder."""
    holder = await market.client(DELEGATED * len(wallets))
    for wallet in wallets:
        provider = provider_pda(wallet.pubkey())
        await market.send(wallet, [staking.open_pool(wallet.pubkey(), provider, COMMISSION_BPS)])
        delegate = staking.delegate(holder.wallet.pubkey(), holder.tokens, provider, 0, DELEGATED)
        await market.send(holder.wallet, [delegate])
    return holder


async def earning_from(market: Market, holder: Client) -> int:
    """The first epoch all the holder's positions earn in."""
    return max(int(d.since) for _, d in await positions_of(market.chain, holder.wallet.pubkey()))


async def paid_epoch(api_url: str, since: int) -> dict[str, Any] | None:
    """The first epoch from `since` on whose root paid something and whose claims were all cranked
    (None: none yet)."""
    async with httpx.AsyncClient(base_url=api_url, timeout=30) as http:
        items = (await http.get("/rewards/epochs", params={"limit": 100})).json()["items"]
        done = [e for e in items if e["credited"] and int(e["total"]) > 0 and e["epoch"] >= since]
        if not done:
            return None
        return dict((await http.get(f"/rewards/epochs/{min(e['epoch'] for e in done)}")).json())


def rewards_table(epoch: dict[str, Any], names: dict[str, str]) -> Table:
    """Each pool's part of the epoch (who, the samples its node was seen online and verified, the
    supplier's part and its delegators'). Fits 80 columns."""
    inputs = epoch["inputs"]
    samples = {n["provider"]: n["eligible_samples"] for n in inputs["nodes"]}
    table = Table(
        title=f"epoch {epoch['epoch']}: {format_io(int(epoch['total']))} over {inputs['samples']} uptime samples",
        box=box.SIMPLE_HEAVY,
        pad_edge=False,
        show_edge=False,
    )
    for column in ("pool", "samples", "to the supplier", "to its delegators"):
        table.add_column(column, justify="left" if column == "pool" else "right", no_wrap=True)
    for claim in epoch["claims"]:
        table.add_row(
            names.get(claim["provider"], claim["provider"][:8]),
            str(samples.get(claim["provider"], 0)),
            format_io(int(claim["supplier_amount"])),
            format_io(int(claim["delegators_amount"])),
        )
    return table


async def collect(market: Market, holder: Client) -> int:
    """The holder collects what was credited to its positions; the IO it received."""
    before = await token_balance(market.chain, holder.tokens)
    for _, position in await positions_of(market.chain, holder.wallet.pubkey()):
        collect = await collect_ix(market.chain, holder.wallet.pubkey(), holder.tokens, position)
        await market.send(holder.wallet, [collect])
    return await token_balance(market.chain, holder.tokens) - before


async def audit(chain: AsyncClient, api_url: str, epoch: int) -> bool:
    return (await audit_epoch(chain, api_url, epoch)).ok
