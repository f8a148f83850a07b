"""The coordinator's settlement path on gpunet-localnet with the real program: signed cumulative
receipts verified and settled in packed transactions, each paying its increment; forged, stale,
over-claimed and early receipts refused or held; the increment cut to what the coordinator saw
online; a restarted coordinator given the same receipts settles nothing twice. Through the
database and the settlement loop: a lease metered every second pays exactly its receipts whatever
the cadence, and a restart between metering and settlement loses nothing."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import replace

import asyncpg
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.signature import Signature

from coordinator.db import usage
from coordinator.fleet import Fleet
from coordinator.leader import Fence
from coordinator.loops.settlement import Settlement
from coordinator.settlement import Settler, SignedUsage, Status
from gpunet import instructions as ix
from gpunet.accounts import fetch
from gpunet.amounts import IO
from gpunet.protocol import UsageReceiptMessage
from gpunet.tokens import token_balance
from gpunet.usage import Receipt

from .chain import PERIOD, Cluster
from .conftest import eventually


def cost(gpu_seconds: int) -> int:
    return gpu_seconds * Cluster.PRICE // 3_600


async def test_good_receipts_settle_packed_and_a_restarted_settler_pays_nothing_twice(cluster) -> None:
    await cluster.wait_for_period(2)
    receipts = [cluster.receipt(n, 2) for n in (0, 1)]
    before = [await cluster.earned(n) for n in (0, 1)]
    outcomes = await Settler(cluster.client, cluster.admin).settle(list(reversed(receipts)))
    assert [o.status for o in outcomes] == [Status.SETTLED] * 2, [o.reason for o in outcomes]
    assert len({o.signature for o in outcomes}) == 1  # both settlements in one transaction
    lease = await fetch(cluster.client, cluster.lease, "Lease")
    shares = list(lease.assignments)[:2]
    assert [(a.epoch, a.receipt_gpu_seconds, a.gpu_seconds) for a in shares] == [(1, 8, 8), (2, 8, 8)]
    paid = [await cluster.earned(n) - before[n] for n in (0, 1)]
    assert paid[0] == paid[1] > 0 and sum(paid) == lease.paid and lease.paid + lease.fees == 2 * cost(8)

    # The coordinator restarts and is handed the same receipts (a worker re-sent them): all
    # are acknowledged as settled on chain, and no token moves.
    again = await Settler(cluster.client, cluster.admin).settle(receipts)
    assert {o.status for o in again} == {Status.ALREADY_SETTLED}
    assert [await cluster.earned(n) - before[n] for n in (0, 1)] == paid
    assert (await fetch(cluster.client, cluster.lease, "Lease")).paid == lease.paid

    # A later receipt pays only its increment
    await cluster.wait_for_period(3)
    [later] = await Settler(cluster.client, cluster.admin).settle([cluster.receipt(0, 3)])
    assert later.status is Status.SETTLED and later.gpu_seconds == 4


async def test_forged_stale_overclaimed_and_early_receipts_are_refused_or_held(cluster) -> None:
    await cluster.wait_for_period(2)
    settler = Settler(cluster.client, cluster.admin)
    forged = cluster.receipt(0, 2, signer=Keypair())
    wrong_node = cluster.receipt(1, 2, signer=cluster.nodes[0][1])
    over_span = cluster.receipt(0, 2, gpu_seconds=PERIOD * 2 * 2 + 1)  # more than 2 GPUs x 4 s
    stale = cluster.receipt(1, 2, epoch=1)  # node 1's share is the lease's assignment 2
    ahead = cluster.receipt(1, 2, through=await cluster.now() + 60)
    outcomes = {id(o.usage): o for o in await settler.settle([forged, wrong_node, over_span, stale, ahead])}
    assert outcomes[id(forged)].status is Status.REFUSED and "signature" in outcomes[id(forged)].reason
    assert outcomes[id(wrong_node)].status is Status.REFUSED
    assert outcomes[id(over_span)].status is Status.REFUSED and "GPU-seconds claimed" in outcomes[id(over_span)].reason
    assert outcomes[id(stale)].status is Status.REFUSED and "assignment 1" in outcomes[id(stale)].reason
    assert outcomes[id(ahead)].status is Status.WAITING
    lease = await fetch(cluster.client, cluster.lease, "Lease")
    assert lease.paid == 0 and [a.receipt_gpu_seconds for a in list(lease.assignments)[:2]] == [0, 0]
    # the controls: the same shares' honest receipts settle
    outcomes = await settler.settle([cluster.receipt(0, 2), cluster.receipt(1, 2)])
    assert [o.status for o in outcomes] == [Status.SETTLED, Status.SETTLED]


async def test_receipts_for_an_unknown_lease_or_a_node_without_a_share_are_refused(cluster) -> None:
    stray = SignedUsage(Pubkey.new_unique(), cluster.nodes[0][1].pubkey(), Receipt(1, 1, 1), bytes(64))
    outsider = Keypair()
    receipt = Receipt(1, 1, cluster.started + 1)
    foreign = SignedUsage(cluster.lease, outsider.pubkey(), receipt, receipt.signature(cluster.lease, outsider))
    outcomes = await Settler(cluster.client, cluster.admin).settle([stray, foreign])
    assert [o.status for o in outcomes] == [Status.REFUSED, Status.REFUSED]
    assert "no Lease account" in outcomes[0].reason and "has no share" in outcomes[1].reason


async def test_only_the_seconds_seen_online_are_paid_and_the_share_goes_on(cluster) -> None:
    await cluster.wait_for_period(2)
    settler = Settler(cluster.client, cluster.admin)
    # node 0 claims 4 s x 2 GPUs; the coordinator saw it online 1 s of them: 2 GPU-seconds are paid
    [cut] = await settler.settle([cluster.receipt(0, 2)], observed=lambda u, since: 1)
    assert cut.status is Status.SETTLED and cut.gpu_seconds == 2
    share = next(iter((await fetch(cluster.client, cluster.lease, "Lease")).assignments))
    assert (share.receipt_gpu_seconds, share.gpu_seconds) == (8, 2)  # the rest of the increment is settled unpaid
    # the share's later usage is not blocked: the next receipt pays its own increment, in full
    await cluster.wait_for_period(3)
    [later] = await settler.settle([cluster.receipt(0, 3)], observed=lambda u, since: u.receipt.through - since)
    assert later.status is Status.SETTLED and later.gpu_seconds == 4
    lease = await fetch(cluster.client, cluster.lease, "Lease")
    assert lease.paid + lease.fees == cost(6)


# --- through the database and the settlement loop


def _message(u: SignedUsage, final: bool = False) -> UsageReceiptMessage:
    r = u.receipt
    return UsageReceiptMessage(
        simulated=True,
        final=final,
        lease=str(u.lease),
        epoch=r.epoch,
        gpu_seconds=r.gpu_seconds,
        through=r.through,
        signature=str(Signature.from_bytes(u.signature)),
    )


async def _record(pool: asyncpg.Pool, u: SignedUsage, final: bool = False) -> None:
    async with pool.acquire() as conn:
        await usage.record_receipt(conn, u.node_key, _message(u, final))


def _settlement(
    pool: asyncpg.Pool,
    cluster: Cluster,
    interval: float,
    fence: Fence,
    paused: Callable[[Pubkey], bool] = lambda _node_key: False,
) -> Settlement:
    # Everything before `blind_until` is unseen and not held against the nodes (no heartbeats here).
    return Settlement(
        pool,
        Settler(cluster.client, cluster.admin, intend=fence.intend),
        Fleet(),
        started_at=0,
        reconnect_grace_seconds=4e9,
        interval_seconds=interval,
        min_amount=0,
        fence=fence,
        paused=paused,
    )


async def _indexed(pool: asyncpg.Pool, cluster: Cluster) -> None:
    async def both() -> bool:
        async with pool.acquire() as conn:
            return await conn.fetchval("SELECT count(*) FROM assignments WHERE lease = $1", str(cluster.lease)) == 2

    await eventually(both, what="the lease's shares indexed")


async def _meter(pool: asyncpg.Pool, cluster: Cluster, seconds: int, each_second=None) -> list[SignedUsage]:
    """Both nodes sign (and the coordinator records) a receipt every second of the chain's clock."""
    newest: list[SignedUsage] = []
    last = await cluster.now()
    end = last + seconds
    while last < end:
        while (now := await cluster.now()) <= last:
            await asyncio.sleep(0.1)
        last = now
        newest = [cluster.receipt(n, 0, through=now) for n in (0, 1)]
        for u in newest:
            await _record(pool, u)
        if each_second is not None:
            await each_second()
    return newest


async def test_a_lease_metered_every_second_pays_exactly_its_receipts_whatever_the_cadence(
    cluster, pool, indexer, fence
) -> None:
    await _indexed(pool, cluster)
    before = [await cluster.earned(n) for n in (0, 1)]
    # Hourly (the default cadence): a few seconds of receipts are not worth a transaction yet ...
    hourly = _settlement(pool, cluster, 3_600, fence)
    await _meter(pool, cluster, 3, each_second=hourly.step)
    assert (await fetch(cluster.client, cluster.lease, "Lease")).paid == 0
    # /metrics' settlement figures: both shares' newest receipts wait, their usage unpaid since the start
    figure = hourly.metrics.registry.get_sample_value
    assert figure("gpunet_coordinator_settlement_queue") == 2
    started = (await fetch(cluster.client, cluster.lease, "Lease")).started_at
    assert figure("gpunet_coordinator_settlement_lag_seconds") >= time.time() - started - 1.5
    # ... on a short cadence they settle as they come, a few seconds at a time
    short = _settlement(pool, cluster, 2, fence)
    newest = await _meter(pool, cluster, 6, each_second=short.step)
    mid = await fetch(cluster.client, cluster.lease, "Lease")
    assert mid.paid > 0
    # at the close everything pending is settled, due or not
    await short.settle()
    lease = await fetch(cluster.client, cluster.lease, "Lease")
    totals = [u.receipt.gpu_seconds for u in newest]
    assert [a.receipt_gpu_seconds for a in list(lease.assignments)[:2]] == totals
    # to the base unit: what the escrow paid is the cost of the newest receipts, however split
    assert lease.paid + lease.fees == sum(cost(t) for t in totals)
    assert sum([await cluster.earned(n) - before[n] for n in (0, 1)]) == lease.paid
    async with pool.acquire() as conn:
        settlements = await conn.fetchval("SELECT count(DISTINCT settled_by) FROM usage_receipts")
        statuses = {r["status"] for r in await conn.fetch("SELECT status FROM usage_receipts")}
    assert statuses == {"settled"} and settlements >= 1
    await short.step()  # nothing left: the queue is empty and nothing lags
    assert short.metrics.registry.get_sample_value("gpunet_coordinator_settlement_queue") == 0
    assert short.metrics.registry.get_sample_value("gpunet_coordinator_settlement_lag_seconds") == 0


async def test_a_coordinator_restart_between_metering_and_settlement_loses_nothing(
    cluster, pool, indexer, fence
) -> None:
    await _indexed(pool, cluster)  # receipts are recorded only of shares the ledger has
    newest = await _meter(pool, cluster, 3)  # recorded by the coordinator that then stops, unsettled
    restarted = _settlement(pool, cluster, 3_600, fence)  # a new process over the same database
    await restarted.settle()
    lease = await fetch(cluster.client, cluster.lease, "Lease")
    assert lease.paid + lease.fees == sum(cost(u.receipt.gpu_seconds) for u in newest)
    # and once more after another restart: nothing is paid twice
    await _settlement(pool, cluster, 3_600, fence).settle()
    assert (await fetch(cluster.client, cluster.lease, "Lease")).paid == lease.paid
    async with pool.acquire() as conn:
        assert await usage.pending_receipts(conn) == []


async def test_a_final_receipt_of_a_settled_claim_stays_settled_and_a_smaller_one_is_pending(
    cluster, pool, indexer, fence
) -> None:
    """A worker signs a receipt at the lease's end and the final one at its cancel, claiming the
    same: recorded after the first was settled, the final one keeps its status (pending again, it
    would wait for a settlement the lease's finalization may already have made impossible). The
    control: a final receipt that claims less (billing ended earlier) is pending, to be settled."""
    await _indexed(pool, cluster)
    newest = await _meter(pool, cluster, 2)
    await _settlement(pool, cluster, 3_600, fence).settle()

    async def statuses() -> dict[str, tuple[str, bool]]:
        async with pool.acquire() as conn:
            rows = await conn.fetch("SELECT node_key, status, final FROM usage_receipts")
        return {r["node_key"]: (r["status"], r["final"]) for r in rows}

    same, smaller = newest
    await _record(pool, same, final=True)
    r = smaller.receipt
    less = cluster.receipt(1, 0, gpu_seconds=r.gpu_seconds - 2, through=r.through - 1)
    await _record(pool, less, final=True)
    assert await statuses() == {str(same.node_key): ("settled", True), str(less.node_key): ("pending", True)}


async def test_a_node_s_receipts_wait_while_a_correlated_outage_pauses_it(cluster, pool, indexer, fence) -> None:
    """A paused node's window is recorded as online time only when the pause ends: settled before,
    its held time in the outage would be cut. Its receipt waits, then settles in full; the node
    outside the pause, the control, settles at once."""
    await _indexed(pool, cluster)
    await cluster.wait_for_period(2)
    waiting, control = cluster.receipt(0, 2), cluster.receipt(1, 2)
    for u in (waiting, control):
        await _record(pool, u)
    paused = {waiting.node_key}
    settlement = _settlement(pool, cluster, 0, fence, paused=lambda node_key: node_key in paused)
    await settlement.step()
    lease = await fetch(cluster.client, cluster.lease, "Lease")
    shares = list(lease.assignments)[: lease.node_count]
    assert [s.receipt_gpu_seconds for s in shares] == [0, control.receipt.gpu_seconds]
    paused.clear()  # the pause ends
    await settlement.step()
    lease = await fetch(cluster.client, cluster.lease, "Lease")
    shares = list(lease.assignments)[: lease.node_count]
    assert [s.receipt_gpu_seconds for s in shares] == [waiting.receipt.gpu_seconds, control.receipt.gpu_seconds]
    assert lease.paid + lease.fees == 2 * cost(waiting.receipt.gpu_seconds)  # to the base unit


async def test_junk_receipts_stored_before_the_gateway_checked_never_stop_an_honest_settlement(
    cluster, pool, indexer, fence
) -> None:
    await _indexed(pool, cluster)
    await cluster.wait_for_period(2)
    # 600 receipts node 0 signed for made-up leases whose addresses sort first, as a coordinator
    # stored them before its gateway checked what a node holds: more than the settlement window
    node_key, receipt = cluster.nodes[0][1], cluster.receipt(0, 2).receipt
    async with pool.acquire() as conn:
        for i in range(1, 601):
            made_up = Pubkey(bytes(30) + i.to_bytes(2, "big"))
            await conn.execute(
                "INSERT INTO usage_receipts (lease, node_key, epoch, gpu_seconds, through, final, signature, "
                "simulated) VALUES ($1, $2, $3, $4, $5, false, $6, true)",
                str(made_up),
                str(node_key.pubkey()),
                receipt.epoch,
                receipt.gpu_seconds,
                receipt.through,
                str(Signature.from_bytes(receipt.signature(made_up, node_key))),
            )
    honest = cluster.receipt(1, 2)
    await _record(pool, honest)
    before = await cluster.earned(1)
    settlement = _settlement(pool, cluster, 0, fence)  # every receipt is due at once
    await settlement.step()
    lease = await fetch(cluster.client, cluster.lease, "Lease")
    share = list(lease.assignments)[1]
    assert share.receipt_gpu_seconds == honest.receipt.gpu_seconds  # the honest supplier's settlement went through
    assert lease.paid + lease.fees == cost(honest.receipt.gpu_seconds)  # to the base unit
    assert await cluster.earned(1) - before == lease.paid
    # the junk is no settlement's business: not in the queue, never sent
    assert settlement.metrics.registry.get_sample_value("gpunet_coordinator_settlement_queue") == 0
    async with pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM usage_receipts WHERE status = 'refused'") == 0


async def test_the_settlement_window_takes_the_nodes_receipts_in_turn(pool) -> None:
    """However many real shares one node has pending, a window holds every node's first before
    anyone's second: no node's receipts keep another's out (rows as the indexer and the gateway
    leave them; the window's order is the ledger's)."""
    busy, other = Keypair().pubkey(), Keypair().pubkey()
    shares = [(busy, Pubkey(bytes(31) + bytes([i]))) for i in range(1, 6)] + [(other, Pubkey(bytes(31) + b"\xff"))]
    async with pool.acquire() as conn:
        for node_key, lease in shares:
            await conn.execute(
                """INSERT INTO assignments (lease, node, node_key, provider, gpus, price_per_gpu_hour, settled_until,
                     gpu_seconds, active, signature, epoch)
                   VALUES ($1, $2, $3, 'provider', 2, 3600, 0, 0, true, 'sig', 1)""",
                str(lease),
                str(Pubkey.new_unique()),
                str(node_key),
            )
            await conn.execute(
                "INSERT INTO usage_receipts (lease, node_key, epoch, gpu_seconds, through, final, signature, "
                "simulated) VALUES ($1, $2, 1, 2, 1, false, $3, true)",
                str(lease),
                str(node_key),
                str(Signature.default()),
            )
        window = await usage.pending_receipts(conn, limit=3)
    assert [(u.usage.node_key, u.usage.lease) for u in window] == [shares[0], shares[5], shares[1]]


async def test_a_receipt_pays_its_share_s_provider_after_the_node_key_changes_hands(cluster) -> None:
    """The client closes the lease, node 0's supplier deregisters and releases the node, and another
    provider registers the same key: node 0's last receipt still pays node 0's supplier (the provider
    of the lease's share), not the key's new owner; node 1's, the control, pays node 1's as ever."""
    await cluster.wait_for_period(2)
    last, control = cluster.receipt(0, 2), cluster.receipt(1, 2)
    market, client = cluster.market, cluster.client
    await market.close_lease(cluster.lessee, cluster.lease)
    # the admin shortens the periods (the lease keeps its deadline): the key changes hands inside it
    market.params = replace(market.params, unbonding_seconds=0, settle_window_seconds=1)
    await market.send(cluster.admin, [ix.update_config(cluster.admin.pubkey(), market.params)])
    wallet, key = cluster.nodes[0]
    await market.send(wallet, [ix.deregister_node(wallet.pubkey(), key.pubkey())])
    await asyncio.sleep(1.5)
    await market.send(wallet, [ix.release_node(wallet.pubkey(), key.pubkey())])
    newcomer = await market.supplier(2, Cluster.PRICE, 50 * IO, node_key=key)
    newcomer_before = await token_balance(client, newcomer.tokens)
    before = [await cluster.earned(n) for n in (0, 1)]

    outcomes = await Settler(client, cluster.admin).settle([last, control])
    assert [o.status for o in outcomes] == [Status.SETTLED, Status.SETTLED], [o.reason for o in outcomes]
    lease = await fetch(client, cluster.lease, "Lease")
    paid = [await cluster.earned(n) - before[n] for n in (0, 1)]
    assert paid[0] == paid[1] > 0 and sum(paid) == lease.paid and lease.paid + lease.fees == 2 * cost(PERIOD * 2 * 2)
    assert await token_balance(client, newcomer.tokens) == newcomer_before
