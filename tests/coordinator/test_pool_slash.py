"""The coordinator slashes a supplier that has a pool of delegated stake (coordinator.attester):
it passes the pool and exactly the unbonding cohorts the fault reaches, so a malicious fault reaches
the delegators who were there when it was committed, active or unbonding since, and not one who
had left before; a liveness fault (the control) never reaches delegators' principal."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import replace
from typing import Any

import pytest
from solana.rpc.commitment import Confirmed
from solders.signature import Signature

from coordinator.attester import Attester
from gpunet import instructions as ix
from gpunet import staking
from gpunet.accounts import chain_clock, fetch
from gpunet.amounts import IO
from gpunet.events import events_of_transaction
from gpunet.pda import cohort_pda, delegation_pda, stake_vault_pda
from gpunet.testbed import Client, Market, Supplier, funded_wallet
from gpunet.tokens import token_balance

UNBONDING = 6


async def _pool_of_three(market: Market) -> tuple[Supplier, dict[str, Client]]:
    """A supplier (100 IO of its own) and its pool: a stays (40 IO), b will leave after the fault (30),
    c leaves now (20)."""
    s = await market.supplier()
    await market.send(s.wallet, [staking.open_pool(s.wallet.pubkey(), s.provider, 0)])
    fans = {}
    for name, amount in (("a", 40), ("b", 30), ("c", 20)):
        fan = await market.client(io=amount * IO)
        await market.send(fan.wallet, [staking.delegate(fan.wallet.pubkey(), fan.tokens, s.provider, 0, amount * IO)])
        fans[name] = fan
    return s, fans


async def _undelegate(market: Market, s: Supplier, fan: Client) -> int:
    """Undelegates the fan's position; returns its cohort's start (when it stops backing the pool)."""
    await market.send(
        fan.wallet, [staking.undelegate(fan.wallet.pubkey(), s.provider, 0, await market.staking_epoch())]
    )
    exit_epoch = (
        await fetch(market.chain, delegation_pda(s.provider, fan.wallet.pubkey(), 0), "Delegation")
    ).exit_epoch
    return int((await fetch(market.chain, cohort_pda(s.provider, exit_epoch), "Cohort")).starts_at)


async def _withdrawn(market: Market, s: Supplier, fan: Client) -> int:
    """Withdraws the fan's unbonded position once its cohort matured; the IO it got back."""
    d = await fetch(market.chain, delegation_pda(s.provider, fan.wallet.pubkey(), 0), "Delegation")
    cohort = await fetch(market.chain, cohort_pda(s.provider, d.exit_epoch), "Cohort")
    while await chain_clock(market.chain) < cohort.ends_at:
        await asyncio.sleep(0.25)
    before = await token_balance(market.chain, fan.tokens)
    withdraw = staking.withdraw_delegation(fan.wallet.pubkey(), fan.tokens, s.provider, 0, d.exit_epoch)
    await market.send(fan.wallet, [withdraw])
    return await token_balance(market.chain, fan.tokens) - before


async def _slash_event(market: Market, sig: Signature) -> Any:
    tx = await market.chain.get_transaction(sig, commitment=Confirmed, max_supported_transaction_version=0)
    (event,) = [e.data for e in events_of_transaction(json.loads(tx.value.to_json())) if e.name == "ProviderSlashed"]
    return event


@pytest.mark.timeout(120)
async def test_a_malicious_fault_reaches_the_delegators_there_at_the_fault_and_a_liveness_fault_none(chain) -> None:
    market = await Market.create(
        chain, attester=await funded_wallet(chain, 100), jail_seconds=0, unbonding_seconds=UNBONDING
    )
    # Slashes large enough to go past the supplier's own stake (the first-loss tranche) into its pool.
    market.params = replace(market.params, slash_bps=(9_000, 9_000, 9_000))
    await market.send(market.admin, [ix.update_config(market.admin.pubkey(), market.params)])
    params = staking.StakingParams(0, epoch_seconds=3, root_timelock_seconds=1, slash_cap_bps=10_000)
    await market.send(market.admin, [staking.configure_staking(market.admin.pubkey(), market.mint, params)])
    cheat, fans = await _pool_of_three(market)
    idle, controls = await _pool_of_three(market)

    c_left = await _undelegate(market, cheat, fans["c"])
    await _undelegate(market, idle, controls["c"])
    while await chain_clock(market.chain) <= c_left:  # c's stake stops backing the pool at its cohort's start
        await asyncio.sleep(0.25)
    fault_at = time.time()  # the fault, committed after c left and before b leaves
    for s, fan in ((cheat, fans["b"]), (idle, controls["b"])):
        await _undelegate(market, s, fan)

    attester = Attester(market.chain, market.attester)
    evidence = {"fault": "FailedVerification", "node_key": str(cheat.node_key.pubkey())}
    vault_before = await token_balance(market.chain, stake_vault_pda(cheat.provider))
    sig = await attester.slash(cheat.node_key.pubkey(), "FailedVerification", evidence, fault_at=fault_at)
    assert sig is not None
    slashed = await _slash_event(market, sig)
    assert slashed.from_own == 100 * IO and slashed.from_delegated > 0  # own stake first, then the pool
    assert slashed.amount == slashed.from_rewards + slashed.from_own + slashed.from_delegated
    assert vault_before - await token_balance(market.chain, stake_vault_pda(cheat.provider)) == slashed.amount
    assert await _withdrawn(market, cheat, fans["c"]) == 20 * IO  # left before the fault: whole
    b_back = await _withdrawn(market, cheat, fans["b"])
    assert b_back < 30 * IO  # left after the fault: pays its part
    provider = await fetch(market.chain, cheat.provider, "Provider")
    # what the delegators lost is exactly a's active loss plus b's
    assert (40 * IO - provider.delegated) + (30 * IO - b_back) == slashed.from_delegated

    control = {"fault": "MissedHeartbeats", "node_key": str(idle.node_key.pubkey())}
    sig = await attester.slash(idle.node_key.pubkey(), "MissedHeartbeats", control, fault_at=fault_at)
    assert sig is not None
    missed = await _slash_event(market, sig)
    assert missed.from_delegated == 0 and missed.from_own == missed.amount > 0  # a liveness fault: own stake only
    assert (await fetch(market.chain, idle.provider, "Provider")).delegated == 40 * IO
    assert await _withdrawn(market, idle, controls["c"]) == 20 * IO
    assert await _withdrawn(market, idle, controls["b"]) == 30 * IO
