"""Lease income with a pool, through the coordinator's settlement path on the local node: the
delegators' part of a pooled supplier's payout (by stake counted up to the cap) goes to its stake
vault as the pool's income of the epoch, its wallet gets the rest, the chain-only audit of the
provider balances its stake vault, and the epoch's credit pays the delegator exactly its share
less commission. The control: a supplier without a pool is paid the whole payout."""

from __future__ import annotations

import json
from typing import Any

import pytest
from solana.rpc.commitment import Confirmed
from solders.pubkey import Pubkey
from solders.signature import Signature

from coordinator.settlement import Settler, SignedUsage, Status
from gpunet import staking
from gpunet.accounts import chain_clock, fetch
from gpunet.audit import audit_provider
from gpunet.events import events_of_transaction
from gpunet.pda import delegation_pda, pool_pda, stake_vault_pda
from gpunet.positions import reward_of
from gpunet.rewards import RewardLeaf, RewardTree
from gpunet.testbed import Market, Supplier, funded_wallet
from gpunet.tokens import token_balance
from gpunet.usage import Receipt

COMMISSION_BPS = 1_000


async def _events(market: Market, sig: Signature, name: str) -> list[Any]:
    tx = await market.chain.get_transaction(sig, commitment=Confirmed, max_supported_transaction_version=0)
    return [e.data for e in events_of_transaction(json.loads(tx.value.to_json())) if e.name == name]


async def _settle_to_now(market: Market, lease: Pubkey, s: Supplier) -> Any:
    """The supplier's node signs full use through now; the coordinator settles it."""
    state = await fetch(market.chain, lease, "Lease")
    share = next(a for a in state.assignments[: state.node_count] if a.node == s.node)
    now = await chain_clock(market.chain)
    receipt = Receipt(share.epoch, share.receipt_gpu_seconds + (now - share.settled_until) * share.gpus, now)
    usage = SignedUsage(lease, s.node_key.pubkey(), receipt, receipt.signature(lease, s.node_key))
    [outcome] = await Settler(market.chain, market.attester).settle([usage])
    assert outcome.status is Status.SETTLED, outcome.reason
    assert outcome.signature is not None
    [settled] = await _events(market, outcome.signature, "UsageSettled")
    return settled


@pytest.mark.timeout(120)
async def test_a_pooled_suppliers_payout_shares_its_delegators_part_by_epoch(chain) -> None:
    market = await Market.create(chain, attester=await funded_wallet(chain, 100), jail_seconds=0)
    params = staking.StakingParams(0, epoch_seconds=6, root_timelock_seconds=1, claim_epochs=4)
    await market.send(market.admin, [staking.configure_staking(market.admin.pubkey(), market.mint, params)])
    pooled, alone = await market.supplier(), await market.supplier()
    await market.send(pooled.wallet, [staking.open_pool(pooled.wallet.pubkey(), pooled.provider, COMMISSION_BPS)])
    own = int((await fetch(market.chain, pooled.provider, "Provider")).staked)
    fan = await market.client(io=own)
    await market.send(fan.wallet, [staking.delegate(fan.wallet.pubkey(), fan.tokens, pooled.provider, 0, own // 2)])
    dev = await market.client()
    lease = await market.open_lease(dev, 1, 2, seconds=600)
    await market.assign(lease, [(pooled, 1), (alone, 1)])

    # the epoch after the delegation's: its shares are eligible
    epoch = int(
        (await fetch(market.chain, delegation_pda(pooled.provider, fan.wallet.pubkey(), 0), "Delegation")).since
    )
    await market.wait_epoch(epoch)
    wallet, vault = (
        await token_balance(market.chain, pooled.tokens),
        await token_balance(market.chain, stake_vault_pda(pooled.provider)),
    )
    settled = await _settle_to_now(market, lease, pooled)
    # 1/2 of its own stake delegated, all counted (under the 1x cap): a third of the payout
    assert settled.payout > 0 and settled.to_pool == settled.payout * (own // 2) // (own + own // 2)
    assert settled.income_epoch == epoch
    assert await token_balance(market.chain, pooled.tokens) - wallet == settled.payout - settled.to_pool
    assert await token_balance(market.chain, stake_vault_pda(pooled.provider)) - vault == settled.to_pool
    pool = await fetch(market.chain, pool_pda(pooled.provider), "Pool")
    assert pool.income_pending == settled.to_pool
    report = await audit_provider(market.chain, pooled.wallet.pubkey())
    assert report.ok, report.differences()  # the stake vault balances with the settlement in

    # control: no pool, the whole payout to the supplier's wallet
    before = await token_balance(market.chain, alone.tokens)
    control = await _settle_to_now(market, lease, alone)
    assert control.to_pool == 0 and await token_balance(market.chain, alone.tokens) - before == control.payout

    # the epoch's credit (a zero reward leaf, as every open pool gets) spreads its income, less
    # commission, over its shares; the epochs before it are credited first, in order
    await market.wait_epoch(epoch + 1)
    opened = int((await fetch(market.chain, pool_pda(pooled.provider), "Pool")).credited_through)
    for e in range(opened + 1, epoch + 1):
        tree = RewardTree([RewardLeaf(e, pooled.provider, 0, 0)], market.mint)
        attester = market.attester
        await market.send(attester, [staking.post_reward_root(attester.pubkey(), e, tree.root, 0, 1)])
        claim = staking.claim_reward(fan.wallet.pubkey(), tree.leaves[0], tree.proof(0))
        sig = await market.send_when_clock_allows(fan.wallet, [claim], "RootTimelocked")
    [claimed] = await _events(market, sig, "RewardClaimed")
    commission = settled.to_pool * COMMISSION_BPS // 10_000
    assert (claimed.income, claimed.to_supplier, claimed.to_delegators) == (
        settled.to_pool,
        commission,
        settled.to_pool - commission,
    )
    before = await token_balance(market.chain, fan.tokens)
    await market.send(fan.wallet, [staking.collect_rewards(fan.wallet.pubkey(), fan.tokens, pooled.provider, 0)])
    shares = int((await fetch(market.chain, pooled.provider, "Provider")).delegated_shares)
    per_share = ((settled.to_pool - commission) << 64) // claimed.eligible_shares
    assert await token_balance(market.chain, fan.tokens) - before == reward_of(shares, per_share)
    assert (await audit_provider(market.chain, pooled.wallet.pubkey())).ok
