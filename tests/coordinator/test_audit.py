"""The audit proves the ledger against the chain and names the transaction behind any difference."""

from __future__ import annotations

import json

import pytest
from solders.keypair import Keypair

from coordinator.audit import NotFound, audit_lease, audit_provider
from coordinator.indexer.rpc import ChainRpc
from gpunet import instructions as ix
from gpunet.testbed import Market

from .conftest import chain_events, eventually, indexed_events


@pytest.fixture
async def indexed_lease(node, market: Market, indexer, pool):
    """A lease with two settlements, fully indexed."""
    ada, bob = await market.supplier(), await market.supplier()
    dev = await market.client()
    lease = await market.open_lease(dev, 7, gpus=4)
    await market.assign(lease, [(ada, 2), (bob, 2)])
    first = await market.settle(lease, ada)
    second = await market.settle(lease, bob)
    expected = await chain_events(node, market.signatures)
    await eventually(lambda: _indexed(pool, len(expected)), what="the lease indexed")
    assert await indexed_events(pool) == expected
    return {"lease": str(lease), "provider": str(ada.provider), "first": str(first), "second": str(second)}


async def _indexed(pool, n: int) -> bool:
    async with pool.acquire() as conn:
        return await conn.fetchval("SELECT count(*) FROM events") >= n


@pytest.fixture
async def rpc(settings):
    rpc = ChainRpc(settings.rpc_url)
    yield rpc
    await rpc.close()


async def test_an_untouched_ledger_audits_clean(indexed_lease, pool, rpc, settings):
    async with pool.acquire() as conn:
        assert (await audit_lease(conn, rpc, settings.program, indexed_lease["lease"])).ok
        report = await audit_provider(conn, rpc, settings.program, indexed_lease["provider"])
    assert report.ok and report.events >= 4


async def test_a_provider_is_audited_by_its_wallet_or_its_account_and_an_unknown_key_is_not_found(
    indexed_lease, pool, rpc, settings
):
    provider = indexed_lease["provider"]
    async with pool.acquire() as conn:
        wallet = await conn.fetchval("SELECT authority FROM providers WHERE provider = $1", provider)
        by_account = await audit_provider(conn, rpc, settings.program, provider)
        by_wallet = await audit_provider(conn, rpc, settings.program, wallet)
        stranger = str(Keypair().pubkey())
        with pytest.raises(NotFound, match=f"{stranger} is neither a provider account nor the wallet"):
            await audit_provider(conn, rpc, settings.program, stranger)
        with pytest.raises(NotFound, match=f"no lease {stranger}"):
            await audit_lease(conn, rpc, settings.program, stranger)
    assert (by_wallet.subject, by_wallet.given, by_wallet.ok) == (provider, "wallet", True)
    assert (by_account.subject, by_account.given, by_account.events) == (provider, "provider account", by_wallet.events)
    assert by_wallet.to_json()["given"] == "wallet"


async def test_a_tampered_settlement_row_is_found_and_its_transaction_named(indexed_lease, pool, rpc, settings):
    async with pool.acquire() as conn:
        await conn.execute("UPDATE settlements SET payout = payout + 1 WHERE signature = $1", indexed_lease["second"])
        report = await audit_lease(conn, rpc, settings.program, indexed_lease["lease"])
    assert not report.ok
    assert [(d.check, d.signatures) for d in report.differences] == [("row", [indexed_lease["second"]])]
    assert report.differences[0].what.endswith(".payout")


async def test_a_tampered_event_is_found_against_the_chain_and_named(indexed_lease, pool, rpc, settings):
    async with pool.acquire() as conn:
        data = json.loads(
            await conn.fetchval(
                "SELECT data FROM events WHERE signature = $1 AND name = 'UsageSettled'", indexed_lease["first"]
            )
        )
        data["gpu_seconds"] += 1000
        await conn.execute(
            "UPDATE events SET data = $2::jsonb WHERE signature = $1 AND name = 'UsageSettled'",
            indexed_lease["first"],
            json.dumps(data),
        )
        report = await audit_lease(conn, rpc, settings.program, indexed_lease["lease"])
    event = [d for d in report.differences if d.check == "event"]
    assert [d.signatures for d in event] == [[indexed_lease["first"]]]
    # Folding the forged event also disagrees with the lease account on chain, naming it too.
    account = [d for d in report.differences if d.check == "account"]
    assert account and all(indexed_lease["first"] in d.signatures for d in account)


async def test_a_tampered_lease_total_is_found_against_the_chain(indexed_lease, pool, rpc, settings):
    async with pool.acquire() as conn:
        await conn.execute("UPDATE leases SET paid = paid - 1 WHERE lease = $1", indexed_lease["lease"])
        report = await audit_lease(conn, rpc, settings.program, indexed_lease["lease"])
    assert [(d.check, d.what) for d in report.differences] == [("row", "lease.paid")]
    assert set(report.differences[0].signatures) >= {indexed_lease["first"], indexed_lease["second"]}


async def test_an_event_missing_from_the_ledger_is_reported_as_unindexed(indexed_lease, pool, rpc, settings):
    async with pool.acquire() as conn:
        async with conn.transaction():
            await conn.execute("DELETE FROM settlements WHERE signature = $1", indexed_lease["second"])
            await conn.execute("DELETE FROM events WHERE signature = $1", indexed_lease["second"])
            await conn.execute("DELETE FROM transactions WHERE signature = $1", indexed_lease["second"])
        report = await audit_lease(conn, rpc, settings.program, indexed_lease["lease"])
    unindexed = [d for d in report.differences if d.check == "unindexed"]
    assert [(d.what, d.signatures) for d in unindexed] == [("UsageSettled", [indexed_lease["second"]])]


async def test_a_slash_reaching_into_unbonding_stake_folds_like_the_program(
    node, market: Market, indexer, pool, rpc, settings
):
    s = await market.supplier(gpus=2, stake=100_000_000)  # 20 IO bonded to the node, 80 free
    await market.send(s.wallet, [ix.request_unstake(s.wallet.pubkey(), 80_000_000)])
    await market.send(
        market.attester,
        [
            ix.slash_provider(
                market.attester.pubkey(),
                market.treasury,
                s.node_key.pubkey(),
                s.wallet.pubkey(),
                "InvalidUsage",
                bytes(32),
            )
        ],
    )
    expected = await chain_events(node, market.signatures)
    await eventually(lambda: _indexed(pool, len(expected)), what="the slash indexed")
    async with pool.acquire() as conn:
        row = await conn.fetchrow(
            "SELECT staked, unbonding, slashed FROM providers WHERE provider = $1", str(s.provider)
        )
        report = await audit_provider(conn, rpc, settings.program, str(s.provider))
    # 50% of the 100 IO in the vault: all 20 active, then 30 of the 80 unbonding.
    assert (row["staked"], row["unbonding"], row["slashed"]) == (0, 50_000_000, 50_000_000)
    assert report.ok, report.differences
