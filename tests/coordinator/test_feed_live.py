"""The explorer's live settlements feed (coordinator.web.feed.live) on a real ledger: a page is sent
every settlement after the last one it shows, once and in chain order, the ones that landed before
it connected (caught up from the ledger) and the ones after (from the one poller); a page too far
behind is told to reload; the poller runs only while a page listens; a settlement of simulated GPUs
says so. Settlements are written by the indexer's own write path from decoded transactions (the
chain is the boundary faked here)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from itertools import count

import pytest
from solders.keypair import Keypair

from coordinator.db import feed as ledger
from coordinator.db.chain import write_batch
from coordinator.indexer.decode import DecodedTransaction
from coordinator.web.feed import live
from coordinator.web.feed.pages import settlements

_slots = count(100)
LEASE, NODE, PROVIDER = (str(Keypair().pubkey()) for _ in range(3))


def _settled(amount: int, node: str = NODE) -> DecodedTransaction:
    """A settle_usage transaction as the indexer decodes it: one UsageSettled event."""
    data = {
        "lease": LEASE,
        "node": node,
        "provider": PROVIDER,
        "epoch": 1,
        "receipt_gpu_seconds": amount,
        "through": 0,
        "gpu_seconds": amount,
        "amount": amount,
        "payout": amount - amount // 20,
        "fee": amount // 20,
        "escrow_left": 10**9,
        "to_pool": 0,
        "income_epoch": 0,
    }
    signature = str(Keypair().sign_message(str(amount).encode()))
    return DecodedTransaction(signature, next(_slots), 1_700_000_000, False, [("UsageSettled", data)])


async def _write(pool, *amounts: int) -> list[str]:
    txs = [_settled(a) for a in amounts]
    async with pool.acquire() as conn:
        await write_batch(conn, txs)
    return [t.signature for t in txs]


async def _next_event(events: AsyncIterator[str]) -> tuple[str, dict]:
    """The stream's next event (its name and data), past keepalives."""
    while True:
        chunk = await anext(events)
        lines = dict(line.split(": ", 1) for line in chunk.strip().split("\n") if not line.startswith(":"))
        if "event" in lines:
            return lines["event"], json.loads(lines["data"])


async def test_a_page_gets_every_settlement_after_its_last_once_and_in_order(pool) -> None:
    hub = live.SettlementHub(pool, poll_seconds=0.05)
    (shown,) = await _write(pool, 1000)  # on the page when it was rendered
    async with pool.acquire() as conn:
        last_shown = await conn.fetchval("SELECT max(id) FROM events")
    missed = await _write(pool, 2000, 3000)  # landed before the page connected

    events = live.stream(hub, pool, last_shown)
    assert await anext(events) == "retry: 1000\n\n"
    assert [(await _next_event(events))[1]["signature"] for _ in missed] == missed
    later = await _write(pool, 4000) + await _write(pool, 5000, 6000)  # while it listens
    got = [await _next_event(events) for _ in later]
    assert [(name, data["signature"]) for name, data in got] == [("settlement", s) for s in later]
    assert 'data-amount="5000"' in got[1][1]["html"] and shown not in [d["signature"] for _, d in got]
    assert "data-simulated" not in got[1][1]["html"]  # no node of the ledger says its GPUs are simulated
    assert hub._task is not None and len(hub.pages) == 1
    await events.aclose()
    assert hub._task is None and not hub.pages  # nobody listens: the poller stops


async def test_a_page_too_far_behind_is_told_to_reload(pool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(live, "CATCH_UP", 2)
    hub = live.SettlementHub(pool, poll_seconds=0.05)
    await _write(pool, 1, 2, 3)
    behind = live.stream(hub, pool, 0)
    await anext(behind)
    assert (await _next_event(behind))[0] == "reload"
    # The control: a page two behind is caught up instead.
    await _write(pool, 4, 5)
    async with pool.acquire() as conn:
        after = await conn.fetchval("SELECT max(id) FROM events") - 2
    near = live.stream(hub, pool, after)
    await anext(near)
    assert [(await _next_event(near))[0] for _ in range(2)] == ["settlement", "settlement"]
    await near.aclose()


async def test_a_settlement_of_simulated_gpus_says_so(pool) -> None:
    """Its node was verified as the simulated reference (tier 1 on chain; the explorer's one rule,
    which also takes the coordinator's verification records); the control's node never was."""
    marked = {}
    for verified in (True, False):
        node, node_key = (str(Keypair().pubkey()) for _ in range(2))
        spec = {"gpu_model": 1, "gpu_count": 1, "vram_gb": 80, "region": 1, "price_per_gpu_hour": 3600}
        keys = {"node": node, "node_key": node_key, "provider": PROVIDER}
        events = [("NodeRegistered", {**keys, "spec": {**spec, "inventory_hash": "00" * 32}, "bonded_stake": 100})]
        if verified:
            events.append(("NodeVerified", {**keys, "tier": 1, "valid_until": 2**40, "evidence_hash": "11" * 32}))
        signature = str(Keypair().sign_message(node.encode()))
        async with pool.acquire() as conn:
            await write_batch(conn, [DecodedTransaction(signature, next(_slots), 0, False, events)])
            await write_batch(conn, [_settled(5, node=node)])
            found = await ledger.settlements_before(conn, None, 10)
            (row,) = [r for r in await settlements(conn, found) if r["node"] == node]
        marked[verified] = row["simulated"]
    assert marked == {True: True, False: False}
