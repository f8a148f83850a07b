"""The indexer against gpunet-localnet and embedded PostgreSQL, with real transactions."""

from __future__ import annotations

import asyncio
import contextlib

from solana.rpc.types import TxOpts
from solders.message import Message
from solders.transaction import Transaction

from coordinator.audit import audit_lease, audit_provider
from coordinator.indexer import Indexer
from coordinator.indexer.rpc import ChainRpc
from gpunet import instructions as ix
from gpunet.accounts import fetch
from gpunet.amounts import IO
from gpunet.testbed import Market

from .conftest import chain_events, eventually, indexed_events, state


async def test_every_event_lands_exactly_once_and_in_chain_order(node, market: Market, indexer, pool, settings):
    story = await market.every_event_kind()
    expected = await chain_events(node, market.signatures)
    assert {e[2] for e in expected} >= {
        "ConfigInitialized",
        "ConfigUpdated",
        "ProviderRegistered",
        "Staked",
        "NodeRegistered",
        "NodeUpdated",
        "LeaseOpened",
        "LeaseAssigned",
        "LeaseToppedUp",
        "UsageSettled",
        "ProviderSlashed",
        "LeaseReassigned",
        "LeaseClosed",
        "LeaseFinalized",
        "NodeUnjailed",
        "NodeDeregistered",
        "NodeReleased",
        "UnstakeRequested",
        "UnstakeWithdrawn",
        "NodeDrainingSet",
        "NodeVerified",
    }

    await eventually(lambda: _count_is(pool, len(expected)), what="every event indexed")
    assert await indexed_events(pool) == expected
    s = await state(pool)
    assert s["cursor_signature"] == str(market.signatures[-1]) and s["events_indexed"] == len(expected)

    # The derived tables agree with the chain's accounts and vaults, to the base unit.
    rpc = ChainRpc(settings.rpc_url)
    try:
        async with pool.acquire() as conn:
            report = await audit_lease(conn, rpc, settings.program, str(story["lease"]))
            assert report.ok, report.differences
            for supplier in story["suppliers"]:
                report = await audit_provider(conn, rpc, settings.program, str(supplier.provider))
                assert report.ok, report.differences
            lease = await conn.fetchrow("SELECT * FROM leases WHERE lease = $1", str(story["lease"]))
            assert lease["status"] == "closed"
            assert lease["deposited"] == lease["paid"] + lease["fees"] + lease["refunded"]
            assert await conn.fetchval("SELECT count(*) FROM settlements") == 4
            # ada was verified (simulated reference), as its account says; cyd was not (bob left)
            ada_s, _, cyd_s = story["suppliers"]
            for supplier in (ada_s, cyd_s):
                node = await fetch(market.chain, supplier.node, "Node")
                row = await conn.fetchrow("SELECT * FROM nodes WHERE node = $1", str(supplier.node))
                assert (row["verification_tier"], row["verified_until"], row["verification_evidence"]) == (
                    node.verification_tier,
                    node.verified_until,
                    bytes(node.verification_evidence).hex(),
                )
            ada = await conn.fetchrow("SELECT * FROM nodes WHERE node = $1", str(ada_s.node))
            assert ada["verification_tier"] == ix.TIER_SIMULATED and ada["verified_until"] > 0
    finally:
        await rpc.close()


async def test_a_failed_verification_or_a_new_inventory_clears_the_indexed_verification(
    node, market: Market, indexer, pool
):
    ada, bob = await market.supplier(), await market.supplier()
    await market.verify(ada, ix.TIER_GPU)
    await market.verify(bob, ix.TIER_GPU)
    await market.send(
        ada.wallet, [ix.update_node(ada.wallet.pubkey(), ada.node_key.pubkey(), 1, ada.price, bytes([7] * 32))]
    )
    await market.send(
        market.attester,
        [
            ix.slash_provider(
                market.attester.pubkey(),
                market.treasury,
                bob.node_key.pubkey(),
                bob.wallet.pubkey(),
                "FailedVerification",
                bytes([3] * 32),
            )
        ],
    )
    expected = await chain_events(node, market.signatures)
    await eventually(lambda: _count_is(pool, len(expected)), what="every event indexed")
    async with pool.acquire() as conn:
        for s in (ada, bob):
            row = await conn.fetchrow("SELECT * FROM nodes WHERE node = $1", str(s.node))
            assert (row["verification_tier"], row["verified_until"], row["verification_evidence"]) == (0, 0, "00" * 32)
            n = await fetch(market.chain, s.node, "Node")
            assert (n.verification_tier, n.verified_until) == (0, 0)
        assert (await conn.fetchrow("SELECT jailed FROM nodes WHERE node = $1", str(bob.node)))["jailed"]


async def _count_is(pool, n: int) -> bool:
    async with pool.acquire() as conn:
        return await conn.fetchval("SELECT count(*) FROM events") >= n


async def test_failed_transactions_are_skipped_and_counted(node, market: Market, indexer, pool, chain):
    supplier = await market.supplier()
    # Staking more than the supplier holds fails on chain (preflight skipped, so it lands failed).
    blockhash = (await chain.get_latest_blockhash()).value.blockhash
    tx = Transaction(
        [supplier.wallet],
        Message.new_with_blockhash(
            [ix.stake(supplier.wallet.pubkey(), supplier.tokens, 10**9 * IO)], supplier.wallet.pubkey(), blockhash
        ),
        blockhash,
    )
    failed = (await chain.send_raw_transaction(bytes(tx), opts=TxOpts(skip_preflight=True))).value
    await eventually(lambda: _landed(chain, failed), what="the failed transaction to land")
    await market.send(supplier.wallet, [ix.stake(supplier.wallet.pubkey(), supplier.tokens, IO)])

    expected = await chain_events(node, market.signatures)
    await eventually(lambda: _count_is(pool, len(expected)), what="events after the failed transaction")
    assert await indexed_events(pool) == expected
    s = await state(pool)
    assert s["failed_transactions_skipped"] == 1
    assert s["cursor_signature"] == str(market.signatures[-1])
    async with pool.acquire() as conn:
        row = await conn.fetchrow("SELECT failed, event_count FROM transactions WHERE signature = $1", str(failed))
    assert (row["failed"], row["event_count"]) == (True, 0)


async def _landed(chain, sig) -> bool:
    status = (await chain.get_signature_statuses([sig])).value[0]
    return status is not None and status.err is not None


def test_reconnect_backoff_grows_exponentially_with_jitter_up_to_a_cap():
    from coordinator.indexer.service import Backoff

    backoff = Backoff(first=0.2, cap=10.0)
    delays = [backoff.next_delay() for _ in range(10)]
    for attempt, delay in enumerate(delays):
        ceiling = min(10.0, 0.2 * 2**attempt)
        assert ceiling / 2 <= delay <= ceiling
    assert len({round(d, 6) for d in delays}) > 1  # jittered, not a fixed schedule
    backoff.reset()
    assert backoff.next_delay() <= 0.2


async def test_two_replicas_indexers_on_one_database_write_each_event_once(
    node, market: Market, indexer, pool, settings
) -> None:
    # Every coordinator replica runs the indexer: a second one, on the same database, races the first.
    second = asyncio.create_task(Indexer(settings, pool).run())
    try:
        story = await market.every_event_kind()
        expected = await chain_events(node, market.signatures)
        await eventually(lambda: _count_is(pool, len(expected)), what="every event indexed")
        assert await indexed_events(pool) == expected  # once each, in chain order
        s = await state(pool)
        assert s["events_indexed"] == len(expected)  # counted once, whichever replica wrote it
        # the derived tables were folded once: they agree with the chain to the base unit
        rpc = ChainRpc(settings.rpc_url)
        try:
            async with pool.acquire() as conn:
                report = await audit_lease(conn, rpc, settings.program, str(story["lease"]))
                assert report.ok, report.differences
                for supplier in story["suppliers"]:
                    report = await audit_provider(conn, rpc, settings.program, str(supplier.provider))
                    assert report.ok, report.differences
        finally:
            await rpc.close()
    finally:
        second.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await second
