"""Settlements in flight against a node that confirms like a real cluster (2 slots after a
transaction's own): 1,000 receipts of 100 shares settled in one pass with up to 100 transactions
outstanding, each receipt paid exactly once (the chain's events against the receipts, to the
GPU-second and the base unit), a second pass of the same receipts sending nothing; a pass
cancelled with its transactions in flight (a coordinator killed), then run again from scratch,
paying every GPU-second once; and a leader deposed with transactions in flight."""

from __future__ import annotations

import asyncio
from collections import defaultdict

import pytest
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solders.pubkey import Pubkey

from coordinator.db import leader as leader_db
from coordinator.leader import Fenced
from coordinator.settlement import Settler, SignedUsage, Status
from gpunet.accounts import fetch
from gpunet.amounts import IO
from gpunet.client import InFlight
from gpunet.events import decode_events
from gpunet.testbed import Market, Supplier, at_most, funded_wallet
from gpunet.usage import Receipt

from .test_leader import Replica, take_from

SHARES, RECEIPTS, WINDOW = 100, 10, 100
NODES_PER_LEASE = 4
PRICE = 2 * IO  # per GPU-hour, each node's (1 GPU)
SECONDS_PER_HOUR = 3_600

pytestmark = pytest.mark.timeout(600)


class World:
    """100 one-GPU nodes, four to a lease, on a node confirming 2 slots late."""

    def __init__(self, chain: AsyncClient) -> None:
        self.chain = chain
        self.shares: list[tuple[Pubkey, Supplier]] = []  # (lease, supplier) per share

    async def build(self) -> World:
        chain = self.chain
        self.market = market = await Market.create(
            chain, attester=await funded_wallet(chain, 100), usage_period_seconds=60
        )
        suppliers: list[Supplier] = await at_most(
            25, [market.supplier(gpus=1, price_per_gpu_hour=PRICE) for _ in range(SHARES)]
        )
        client = await market.client(1_000 * IO)

        async def lease(i: int) -> None:
            group = suppliers[i * NODES_PER_LEASE : (i + 1) * NODES_PER_LEASE]
            lease = await market.open_lease(client, i + 1, NODES_PER_LEASE)
            await market.assign(lease, [(s, 1) for s in group])
            self.shares += [(lease, s) for s in group]

        await at_most(25, [lease(i) for i in range(SHARES // NODES_PER_LEASE)])
        self.leases = {lease: await fetch(chain, lease, "Lease") for lease, _ in self.shares}
        return self

    def share(self, lease: Pubkey, s: Supplier):
        state = self.leases[lease]
        return next(a for a in state.assignments[: state.node_count] if a.node_key == s.node_key.pubkey())

    def receipts(self) -> list[SignedUsage]:
        """Each share's receipts of its first 1..RECEIPTS seconds of full use."""
        out = []
        for lease, s in self.shares:
            share = self.share(lease, s)
            for k in range(1, RECEIPTS + 1):
                r = Receipt(share.epoch, k, share.assigned_at + k)
                out.append(SignedUsage(lease, s.node_key.pubkey(), r, r.signature(lease, s.node_key)))
        return out

    async def wait_for_clock(self) -> None:
        """Until the chain's clock is past every receipt's end (the program refuses a receipt from the future)."""
        last = max(self.share(lease, s).assigned_at for lease, s in self.shares) + RECEIPTS
        while (await self.chain.get_block_time((await self.chain.get_slot()).value)).value <= last:
            await asyncio.sleep(0.2)

    async def settled_events(self) -> dict[tuple[str, str], list[dict]]:
        """Every UsageSettled event on chain, by (lease, node key), read from each lease's history."""
        found: dict[tuple[str, str], list[dict]] = defaultdict(list)
        seen: set[str] = set()
        for lease in self.leases:
            for entry in (await self.chain.get_signatures_for_address(lease, limit=1_000)).value:
                if str(entry.signature) in seen or entry.err is not None:
                    continue
                seen.add(str(entry.signature))
                tx = await self.chain.get_transaction(entry.signature, max_supported_transaction_version=0)
                for event in decode_events(tx.value.transaction.meta.log_messages or []):
                    if event.name == "UsageSettled":
                        data = event.data
                        found[(str(data.lease), str(self._node_key(data.lease, data.node)))].append(
                            {"receipt": data.receipt_gpu_seconds, "paid": data.gpu_seconds, "amount": data.amount}
                        )
        return found

    def _node_key(self, lease: Pubkey, node: Pubkey) -> Pubkey:
        return next(s.node_key.pubkey() for ls, s in self.shares if ls == lease and s.node == node)

    async def assert_each_second_paid_once(self) -> None:
        """Every share on chain: its receipt at RECEIPTS GPU-seconds, and its settlements together
        paid each of them once, at the price's exact cumulative rounding."""
        events = await self.settled_events()
        assert len(events) == SHARES
        for lease, s in self.shares:
            share = (await fetch(self.chain, lease, "Lease")).assignments
            share = next(a for a in share if a.node_key == s.node_key.pubkey())
            assert share.receipt_gpu_seconds == RECEIPTS
            mine = events[(str(lease), str(s.node_key.pubkey()))]
            assert sum(e["paid"] for e in mine) == RECEIPTS, mine
            assert sorted(e["receipt"] for e in mine) == sorted({e["receipt"] for e in mine}), "a receipt paid twice"
            assert sum(e["amount"] for e in mine) == PRICE * RECEIPTS // SECONDS_PER_HOUR


@pytest.fixture
async def world(start_node):
    node = start_node(confirm_slots=2)  # as a real cluster: "confirmed" two slots after the transaction's
    async with AsyncClient(node.url, commitment=Confirmed, timeout=60) as chain:
        yield await World(chain).build()


async def test_a_thousand_settlements_with_a_hundred_in_flight_each_paid_once(world) -> None:
    await world.wait_for_clock()
    sender = InFlight(world.chain, window=WINDOW)
    settler = Settler(world.chain, world.market.attester, sender=sender)
    peak = 0

    async def watch() -> None:
        nonlocal peak
        while True:
            peak = max(peak, sender.outstanding)
            await asyncio.sleep(0.01)

    watcher = asyncio.create_task(watch())
    outcomes = await settler.settle(world.receipts())
    watcher.cancel()
    assert [o.status for o in outcomes] == [Status.SETTLED] * SHARES * RECEIPTS, {o.reason for o in outcomes}
    assert peak == WINDOW, f"at most, and at one point exactly, {WINDOW} transactions out at once: {peak}"
    await world.assert_each_second_paid_once()

    # The same receipts again (a worker resending them): acknowledged from the chain, nothing sent.
    again = await Settler(world.chain, world.market.attester, sender=sender).settle(world.receipts())
    assert {o.status for o in again} == {Status.ALREADY_SETTLED}
    assert all(o.signature is None for o in again)
    await world.assert_each_second_paid_once()


async def test_a_pass_killed_with_transactions_in_flight_is_run_again_and_pays_each_second_once(world) -> None:
    await world.wait_for_clock()
    sender = InFlight(world.chain, window=WINDOW)
    killed = asyncio.create_task(Settler(world.chain, world.market.attester, sender=sender).settle(world.receipts()))
    while sender.outstanding < WINDOW:  # the window full: transactions sent, not yet confirmed
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.3)  # some confirmed, others still out
    killed.cancel()
    with pytest.raises(asyncio.CancelledError):
        await killed
    partly = await world.settled_events()
    paid = sum(e["paid"] for found in partly.values() for e in found)
    assert 0 < paid < SHARES * RECEIPTS, f"killed halfway, not before or after: {paid} GPU-seconds paid"

    # A restarted coordinator (a new sender and settler) is given the same receipts: what landed is
    # acknowledged from the chain, the rest is settled; a transaction of the killed pass that lands
    # late is refused by the program (its receipt no longer above what is settled), never paid twice.
    outcomes = await Settler(world.chain, world.market.attester).settle(world.receipts())
    assert Status.SETTLED in {o.status for o in outcomes}
    await asyncio.sleep(1.0)  # past any late landing of the killed pass's transactions (2 slots of 100 ms)
    await world.assert_each_second_paid_once()


async def test_a_leader_deposed_with_transactions_in_flight_sends_no_more_and_nothing_is_paid_twice(
    world, pool
) -> None:
    """Replica a settles through its fence with a small window; the lead passes to b halfway. Each of
    a's transactions was recorded under its term before it was sent; those not yet sent are refused
    by the fence (a's pass ends in Fenced once its sent ones are seen out), and b, given the same
    receipts, acknowledges what a landed and settles the rest: every GPU-second paid once."""
    await world.wait_for_clock()
    a, b = Replica(pool, "a"), Replica(pool, "b")
    await a.election.step()
    sender = InFlight(world.chain, window=10)
    settling = asyncio.create_task(
        Settler(world.chain, world.market.attester, intend=a.fence.intend, sender=sender).settle(world.receipts())
    )
    while sender.outstanding < 10:
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.5)  # some landed, the window still full
    await take_from(pool, a, b)
    with pytest.raises(Fenced):
        await settling
    async with pool.acquire() as conn:
        by_a = [d for d in await leader_db.decisions(conn) if d[1] == "a"]
    landed = sum(e["paid"] for found in (await world.settled_events()).values() for e in found)
    assert by_a and 0 < landed < SHARES * RECEIPTS, f"deposed halfway: {len(by_a)} decisions, {landed} paid"

    outcomes = await Settler(world.chain, world.market.attester, intend=b.fence.intend).settle(world.receipts())
    assert Status.SETTLED in {o.status for o in outcomes} and Status.ALREADY_SETTLED in {o.status for o in outcomes}
    await asyncio.sleep(1.0)  # past any late landing of a's last transactions
    await world.assert_each_second_paid_once()
