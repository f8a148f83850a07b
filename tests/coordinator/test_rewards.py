"""Rewards end to end on the local node: the coordinator samples the uptime it observes, builds an
epoch's tree from its samples and the chain's stake, posts the root, and cranks the claims; a claim
also goes through `gpunet rewards claim`, and `gpunet rewards audit` catches a root built from other
inputs than the published ones.

Nodes of different standing earn exactly what the plain formula gives for the samples recorded:
online all epoch (ada, with a delegator), online half of it and new (bob, at the establishment rate),
online but never verified (cyd: nothing), verified but never online (dan, a node spoofed onto the
chain: nothing), online and verified without a pool (fay: no leaf; only pools can be credited)."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

import httpx
import pytest
import uvicorn

from coordinator.api.app import create_app
from coordinator.indexer.rpc import ChainRpc
from coordinator.service import Coordinator
from coordinator.settings import Settings
from gpunet import staking
from gpunet.accounts import fetch
from gpunet.amounts import IO
from gpunet.keys import create_keypair_file
from gpunet.localnet import free_ports
from gpunet.pda import pool_pda, reward_root_pda, reward_vault_pda, stake_vault_pda, staking_pda
from gpunet.reward_epoch import EpochInputs
from gpunet.testbed import Market, Supplier
from gpunet.tokens import token_balance

from .conftest import leading_without_loops

GPUNET = Path(sys.executable).with_name("gpunet")
EMISSION = 1_000 * IO
EPOCH_SECONDS = 8


async def _gpunet(*args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        str(GPUNET), *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 90)
    return proc.returncode or 0, out.decode()


async def _open_pool(market: Market, s: Supplier, commission_bps: int = 0) -> None:
    await market.send(s.wallet, [staking.open_pool(s.wallet.pubkey(), s.provider, commission_bps)])


@pytest.mark.timeout(240)
async def test_an_epoch_pays_observed_verified_uptime_and_its_audit_catches_other_inputs(
    node, chain, database_url, pool, tmp_path
) -> None:
    market = await Market.create(chain, jail_seconds=0, unbonding_seconds=0)
    admin = market.admin
    ada, cyd, dan, fay = [await market.supplier() for _ in range(4)]
    fan = await market.client(io=20 * IO)
    params = staking.StakingParams(EMISSION, epoch_seconds=EPOCH_SECONDS, root_timelock_seconds=1, claim_epochs=2)
    funds = await market.fund(admin.pubkey(), 5_000 * IO)
    await market.send(
        admin,
        [
            staking.configure_staking(admin.pubkey(), market.mint, params),
            staking.fund_rewards(admin.pubkey(), funds, 5_000 * IO),
        ],
    )
    await asyncio.sleep(1.1)  # the chain's clock counts whole seconds: bob's registration is after genesis
    bob = await market.supplier()  # registered after the epochs began: new, at the establishment rate
    for s in (ada, bob, dan, fay):
        await market.verify(s)
    for s in (ada, bob, cyd, dan):
        await _open_pool(market, s, 1_000 if s is ada else 0)
    await market.send(fan.wallet, [staking.delegate(fan.wallet.pubkey(), fan.tokens, ada.provider, 0, 10 * IO)])

    api_port = free_ports(1)[0]
    settings = Settings(
        rpc_url=node.url,
        ws_url=node.ws_url,
        database_url=database_url,
        lost_after_seconds=1.0,
        reward_sample_seconds=1,
        reward_establishment_epochs=2,
        api_port=api_port,
    )
    coordinator = await leading_without_loops(Coordinator(settings, pool, admin))
    await coordinator.indexer.backfill()  # the nodes, their verification, their registration times
    rewards, fleet = coordinator.rewards, coordinator.fleet

    # The epoch observed: the first that begins after every pool opened (its pools count in it), and
    # at least epoch 2: the suppliers registered before the config count as established (2 epochs
    # before it), bob, registered after it, does not.
    epoch = max(await market.staking_epoch() + 1, 2)
    await market.wait_epoch(epoch)
    online = [s.node_key.pubkey() for s in (ada, bob, cyd, fay)]
    for key in online:
        fleet.connected(key, simulated=True)
    start = (await fetch(chain, staking_pda(), "Staking")).genesis + epoch * EPOCH_SECONDS
    while time.time() < start + EPOCH_SECONDS:
        if time.time() > start + EPOCH_SECONDS / 2 and fleet.nodes[bob.node_key.pubkey()].connected:
            fleet.disconnected(bob.node_key.pubkey())  # bob leaves halfway through
        for key in online:
            if fleet.nodes[key].connected:
                fleet.heartbeat(key, healthy=True)
        await rewards.sample()
        await asyncio.sleep(0.2)
    await market.wait_epoch(epoch + 1)
    await rewards.step()

    async with pool.acquire() as conn:
        row = await conn.fetchrow("SELECT * FROM reward_epochs WHERE epoch = $1", epoch)
        taken = await conn.fetchval(
            "SELECT count(*) FROM reward_samples WHERE at >= $1 AND at < $2", start, start + EPOCH_SECONDS
        )
    assert row["posted"] and row["posted"] != "landed"
    # A coordinator that lost the answer to its post (stopped before it recorded it) finds the root
    # landed and records that, rather than send it again.
    async with pool.acquire() as conn:
        await conn.execute("UPDATE reward_epochs SET posted = NULL WHERE epoch = $1", epoch)
        await rewards.step()
        assert await conn.fetchval("SELECT posted FROM reward_epochs WHERE epoch = $1", epoch) == "landed"
    inputs = json.loads(row["inputs"])
    counts = {n["node"]: (n["eligible_samples"], n["established"]) for n in inputs["nodes"]}
    assert inputs["samples"] == taken >= EPOCH_SECONDS - 2
    # ada all epoch, established; bob part of it, new; fay all of it; cyd (unverified) and dan (never seen): none
    assert counts[str(ada.node)] == (taken, True) and counts[str(fay.node)] == (taken, True)
    bob_samples = counts[str(bob.node)][0]
    assert 0 < bob_samples < taken and counts[str(bob.node)][1] is False
    assert str(cyd.node) not in counts and str(dan.node) not in counts

    # The plain formula: weight = samples x GPUs x the model's multiplier (H100: 10,000 bps) x the
    # rate (bob: 5,000 bps); fay has no pool, so only ada and bob share the emission.
    w_ada, w_bob = taken * 2 * 10_000 * 10_000, bob_samples * 2 * 10_000 * 5_000
    ada_reward, bob_reward = EMISSION * w_ada // (w_ada + w_bob), EMISSION * w_bob // (w_ada + w_bob)
    ada_delegators = ada_reward * (10 * IO) // (110 * IO)  # own 100 IO, delegated 10 (within the 1x cap)
    expected = {
        str(ada.provider): (ada_reward - ada_delegators, ada_delegators),
        str(bob.provider): (bob_reward, 0),
        str(cyd.provider): (0, 0),  # a zero leaf: the pool's next epoch can be claimed at once
        str(dan.provider): (0, 0),
    }

    api = uvicorn.Server(
        uvicorn.Config(
            create_app(pool, ChainRpc(node.url), settings), host="127.0.0.1", port=api_port, log_level="warning"
        )
    )
    served = asyncio.create_task(api.serve())
    url = f"http://127.0.0.1:{api_port}"
    try:
        while not api.started:
            await asyncio.sleep(0.05)
        code, out = await _gpunet("rewards", "show", str(epoch), "--coordinator", url, "--json")
        assert code == 0, out
        published = json.loads(out)
        assert {
            c["provider"]: (int(c["supplier_amount"]), int(c["delegators_amount"])) for c in published["claims"]
        } == (expected)
        root = await fetch(chain, reward_root_pda(epoch), "RewardRoot")
        assert bytes(root.root).hex() == published["root"] and root.total == ada_reward + bob_reward

        # bob's claim through the CLI, by a stranger's wallet; the coordinator cranks the rest.
        vaults = {s.provider: await token_balance(chain, stake_vault_pda(s.provider)) for s in (ada, bob, cyd, dan)}
        reward_vault = await token_balance(chain, reward_vault_pda())
        wallet = tmp_path / "stranger.json"
        stranger = await market.client(io=0)
        create_keypair_file(wallet, stranger.wallet)
        await asyncio.sleep(1.5)  # the root's timelock
        async with pool.acquire() as conn:  # the epochs before (zero roots: no samples) are credited first
            earlier = [
                r for e in range(epoch) if (r := await conn.fetchrow("SELECT * FROM reward_epochs WHERE epoch = $1", e))
            ]
        for r in earlier:
            assert int(r["total"]) == 0 and json.loads(r["inputs"])["samples"] == 0
            await rewards.crank(r["epoch"], EpochInputs.from_json(json.loads(r["inputs"])))
        code, out = await _gpunet(
            "rewards", "claim", str(epoch), str(bob.wallet.pubkey()), "--coordinator", url, "--url", node.url,
            "-k", str(wallet), "--json",
        )  # fmt: skip
        assert code == 0, out
        assert json.loads(out)["supplier_amount"] == bob_reward
        await rewards.step()
        for s in (ada, bob, cyd, dan):
            credited = (await fetch(chain, pool_pda(s.provider), "Pool")).credited_through
            assert credited == epoch, (s, credited)
            gained = await token_balance(chain, stake_vault_pda(s.provider)) - vaults[s.provider]
            assert gained == sum(expected[str(s.provider)]), s
        assert reward_vault - await token_balance(chain, reward_vault_pda()) == ada_reward + bob_reward
        code, out = await _gpunet("rewards", "claim", str(epoch), str(bob.wallet.pubkey()), "--coordinator", url,
                                  "--url", node.url, "-k", str(wallet))  # fmt: skip
        assert code == 2 and f"credited through epoch {epoch} already" in out, out  # twice: refused

        # The audit: the published inputs rebuild the chain's root ...
        code, out = await _gpunet("rewards", "audit", str(epoch), "--coordinator", url, "--url", node.url, "--json")
        assert code == 0 and json.loads(out)["ok"] is True, out
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:  # ... as the explorer's page shows it
            listing, shown = (await http.get("/web/rewards")).text, (await http.get(f"/web/rewards/{epoch}")).text
            assert f'data-epoch="{epoch}" data-total="{ada_reward + bob_reward}"' in listing
            assert 'data-root-check="match"' in shown, shown
            for provider, (to_supplier, to_delegators) in expected.items():
                row = f'data-provider="{provider}" data-supplier="{to_supplier}" data-delegators="{to_delegators}"'
                assert row in shown
            assert (await http.get("/web/rewards/x1")).status_code == 400
            assert (await http.get(f"/web/rewards/{epoch + 100}")).status_code == 404
        # ... and a root built from other inputs than those published is caught (here: bob's samples
        # published one higher than the tree was built with).
        counts_of = inputs["nodes"]
        async with pool.acquire() as conn:
            nodes = [{**n, "eligible_samples": n["eligible_samples"] + (n["node"] == str(bob.node))} for n in counts_of]
            altered = {**inputs, "nodes": nodes}
            await conn.execute(
                "UPDATE reward_epochs SET inputs = $2::jsonb WHERE epoch = $1", epoch, json.dumps(altered)
            )
        code, out = await _gpunet("rewards", "audit", str(epoch), "--coordinator", url, "--url", node.url, "--json")
        report = json.loads(out)
        assert code == 7 and report["ok"] is False, out
        assert any("built from other inputs" in d for d in report["differences"]), report
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            assert 'data-root-check="differs"' in (await http.get(f"/web/rewards/{epoch}")).text
    finally:
        api.should_exit = True
        await served
        await coordinator.chain.close()
        await coordinator.indexer.rpc.close()


async def test_an_epoch_without_staking_config_posts_nothing(node, chain, database_url, pool) -> None:
    """No staking config on the cluster: the rewards loop does nothing (and says nothing is wrong)."""
    market = await Market.create(chain)
    settings = Settings(rpc_url=node.url, ws_url=node.ws_url, database_url=database_url)
    coordinator = await leading_without_loops(Coordinator(settings, pool, market.admin))
    try:
        await coordinator.rewards.step()
        async with pool.acquire() as conn:
            assert await conn.fetchval("SELECT count(*) FROM reward_epochs") == 0
    finally:
        await coordinator.chain.close()
        await coordinator.indexer.rpc.close()
