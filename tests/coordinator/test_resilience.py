"""The indexer survives what production throws at it: SIGKILL mid-stream (a subprocess, restarted)
and the node restarting under it (WebSocket dropped, backfill on reconnect). In both cases the
ledger ends up holding every event of the chain exactly once, in chain order."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest

from gpunet import instructions as ix
from gpunet.amounts import IO
from gpunet.idl import PROGRAM_ID
from gpunet.testbed import Market

from .conftest import chain_events, eventually, indexed_events, state

REPO = Path(__file__).resolve().parents[2]


async def program_history(node) -> list[str]:
    """Every successful program transaction, oldest first (the chain's order, not the senders')."""
    sigs = node.call("getSignaturesForAddress", [str(PROGRAM_ID), {"limit": 1000}])["result"]
    return [s["signature"] for s in reversed(sigs) if s["err"] is None]


async def _count_at_least(pool, n: int) -> bool:
    async with pool.acquire() as conn:
        return await conn.fetchval("SELECT count(*) FROM events") >= n


async def stake_stream(market: Market, stop: asyncio.Event, senders: int = 3) -> None:
    """Transactions of five Staked events each, from several suppliers at once, until `stop`."""
    suppliers = [await market.supplier() for _ in range(senders)]

    async def sender(s) -> None:
        amount = IO
        while not stop.is_set():
            amount += 1  # never the same transaction twice under one blockhash
            await market.send(s.wallet, [ix.stake(s.wallet.pubkey(), s.tokens, amount)] * 5)

    await asyncio.gather(*(sender(s) for s in suppliers))


def start_indexer(settings, log: Path) -> subprocess.Popen:
    env = {
        **os.environ,
        "GPUNET_RPC_URL": settings.rpc_url,
        "GPUNET_WS_URL": settings.ws_url,
        "GPUNET_DATABASE_URL": settings.database_url,
        "GPUNET_POLL_SECONDS": "1",
        "GPUNET_BATCH_SIZE": "7",
    }
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "coordinator", "index"], cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT
        )


async def test_indexer_killed_mid_stream_and_restarted_leaves_no_gap_and_no_duplicate(
    node, market: Market, pool, settings, tmp_path
):
    stop = asyncio.Event()
    stream = asyncio.create_task(stake_stream(market, stop))
    proc = start_indexer(settings, tmp_path / "indexer.log")
    try:
        for round_ in range(3):
            target = (await state(pool))["events_indexed"] + 20
            await eventually(partial(_count_at_least, pool, target), what=f"indexing before kill {round_}")
            proc.send_signal(signal.SIGKILL)
            assert proc.wait(timeout=30) == -signal.SIGKILL
            await asyncio.sleep(0.5)  # the chain moves on while the indexer is dead
            proc = start_indexer(settings, tmp_path / "indexer.log")
        stop.set()
        await stream
        expected = await chain_events(node, await program_history(node))
        await eventually(lambda: _count_at_least(pool, len(expected)), what="the indexer to catch up")
        assert await indexed_events(pool) == expected
        s = await state(pool)
        assert s["events_indexed"] == len(expected)
        assert s["cursor_signature"] == expected[-1][0]
    finally:
        stop.set()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        await asyncio.gather(stream, return_exceptions=True)


@pytest.fixture
def node(start_node, tmp_path):
    """This module's node keeps a ledger, so it can be restarted with its history."""
    return start_node(ledger=tmp_path / "ledger")


async def test_node_restarted_with_its_ledger_the_indexer_reconnects_and_backfills(node, market: Market, indexer, pool):
    first = await market.supplier()
    before = await chain_events(node, await program_history(node))
    await eventually(lambda: _count_at_least(pool, len(before)), what="indexing before the restart")

    assert node.stop() == 0
    node.start()  # same ports, same ledger: the WebSocket dropped under the indexer
    # Transactions land while the indexer is still reconnecting (its backoff is running).
    await market.send(first.wallet, [ix.stake(first.wallet.pubkey(), first.tokens, IO)] * 3)
    await market.supplier()

    expected = await chain_events(node, await program_history(node))
    assert len(expected) > len(before)
    await eventually(lambda: _count_at_least(pool, len(expected)), what="the backfill after the restart")
    assert await indexed_events(pool) == expected
    await eventually(lambda: _reconnected(pool), what="the reconnect to be counted")


async def _reconnected(pool) -> bool:
    return (await state(pool))["reconnects"] >= 1


async def test_indexer_killed_inside_its_database_transaction_leaves_nothing_half_written(
    node, market: Market, pool, settings, tmp_path
):
    """Deterministic variant: the test holds the cursor row, so the indexer's write blocks on its
    last statement with the batch's events and derived rows already inserted; it is killed there."""
    await market.supplier()
    async with pool.acquire() as conn:  # as a first pass would, so the next write is the batch's
        await conn.execute("UPDATE indexer_state SET genesis_hash = $1", node.call("getGenesisHash")["result"])
    async with pool.acquire() as holder:
        lock = holder.transaction()
        await lock.start()
        await holder.execute("SELECT * FROM indexer_state FOR UPDATE")
        proc = start_indexer(settings, tmp_path / "indexer.log")
        try:

            async def blocked_mid_write() -> bool:
                async with pool.acquire() as conn:
                    return (
                        await conn.fetchval(
                            "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)"
                            " WHERE NOT l.granted AND a.query LIKE 'UPDATE indexer_state SET cursor_signature%'"
                        )
                        > 0
                    )

            await eventually(blocked_mid_write, what="the indexer to block on its cursor update")
            proc.send_signal(signal.SIGKILL)
            assert proc.wait(timeout=30) == -signal.SIGKILL
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
            await lock.rollback()
    async with pool.acquire() as conn:  # the killed session's rows died with it
        assert await conn.fetchval("SELECT count(*) FROM events") == 0
        assert await conn.fetchval("SELECT count(*) FROM providers") == 0

    proc = start_indexer(settings, tmp_path / "indexer.log")
    try:
        expected = await chain_events(node, await program_history(node))
        await eventually(lambda: _count_at_least(pool, len(expected)), what="the restarted indexer")
        assert await indexed_events(pool) == expected
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0  # a stuck database connection is cut after 10 s
