"""The coordinator's settlement path on gpunet-localnet with the real program: signed reports
verified and settled in packed transactions; forged, replayed, out-of-order and over-claimed
reports refused or held; a restarted coordinator given the same reports settles nothing twice."""

from __future__ import annotations

from solders.keypair import Keypair
from solders.pubkey import Pubkey

from coordinator.settlement import Settler, SignedUsage, Status
from gpunet.accounts import fetch
from gpunet.usage import UsageReport

from .chain import PERIOD


async def test_good_reports_settle_packed_and_a_restarted_settler_pays_nothing_twice(cluster) -> None:
    await cluster.wait_for_period(2)
    reports = [cluster.report(n, seq) for n in (0, 1) for seq in (1, 2)]
    before = [await cluster.earned(n) for n in (0, 1)]
    outcomes = await Settler(cluster.client, cluster.admin).settle(list(reversed(reports)))
    assert [o.status for o in outcomes] == [Status.SETTLED] * 4, [o.reason for o in outcomes]
    assert len({o.signature for o in outcomes}) < 4  # several settlements share a transaction
    lease = await fetch(cluster.client, cluster.lease, "Lease")
    assert [(a.last_seq, a.gpu_seconds) for a in list(lease.assignments)[:2]] == [(2, 8), (2, 8)]
    paid = [await cluster.earned(n) - before[n] for n in (0, 1)]
    assert paid[0] == paid[1] > 0 and sum(paid) == lease.paid

    # The coordinator restarts and is handed the same reports (a worker re-sent them): all
    # are acknowledged as settled on chain, and no token moves.
    again = await Settler(cluster.client, cluster.admin).settle(reports)
    assert {o.status for o in again} == {Status.ALREADY_SETTLED}
    assert [await cluster.earned(n) - before[n] for n in (0, 1)] == paid
    assert (await fetch(cluster.client, cluster.lease, "Lease")).paid == lease.paid


async def test_forged_overclaimed_and_out_of_order_reports_are_refused_or_held(cluster) -> None:
    await cluster.wait_for_period(2)
    settler = Settler(cluster.client, cluster.admin)
    forged = cluster.report(0, 1, signer=Keypair())
    wrong_node = cluster.report(1, 1, signer=cluster.nodes[0][1])
    over_span = cluster.report(0, 1, gpu_seconds=PERIOD * 2 + 1)  # more than 2 GPUs x 2 s
    gap = cluster.report(1, 2)  # seq 2 before seq 1 of node 1
    outcomes = {id(o.usage): o for o in await settler.settle([forged, wrong_node, over_span, gap])}
    assert outcomes[id(forged)].status is Status.REFUSED and "signature" in outcomes[id(forged)].reason
    assert outcomes[id(wrong_node)].status is Status.REFUSED
    assert outcomes[id(over_span)].status is Status.REFUSED and "GPU-seconds claimed" in outcomes[id(over_span)].reason
    assert outcomes[id(gap)].status is Status.WAITING

    # Over what the coordinator observed online (1 s of the 2 s period): refused, nothing paid.
    observed_half = await settler.settle([cluster.report(0, 1)], observed=lambda u: 1)
    assert observed_half[0].status is Status.REFUSED and "at most 2 observed" in observed_half[0].reason
    lease = await fetch(cluster.client, cluster.lease, "Lease")
    assert lease.paid == 0 and [a.last_seq for a in list(lease.assignments)[:2]] == [0, 0]

    # Once the missing report arrives, both settle in order.
    outcomes = await settler.settle([gap, cluster.report(1, 1)])
    assert [o.status for o in outcomes] == [Status.SETTLED, Status.SETTLED]


async def test_reports_for_an_unknown_lease_or_a_node_without_a_share_are_refused(cluster) -> None:
    stray = SignedUsage(Pubkey.new_unique(), cluster.nodes[0][1].pubkey(), UsageReport(1, 0, 1, 1), bytes(64))
    outsider = Keypair()
    report = UsageReport(1, cluster.started, cluster.started + 1, 1)
    foreign = SignedUsage(cluster.lease, outsider.pubkey(), report, report.signature(cluster.lease, outsider))
    outcomes = await Settler(cluster.client, cluster.admin).settle([stray, foreign])
    assert [o.status for o in outcomes] == [Status.REFUSED, Status.REFUSED]
    assert "no Lease account" in outcomes[0].reason and "has no share" in outcomes[1].reason


async def test_a_refused_report_never_blocks_the_share_s_later_usage(cluster) -> None:
    await cluster.wait_for_period(2)
    settler = Settler(cluster.client, cluster.admin)
    node_key = cluster.nodes[0][1].pubkey()
    # seq 1 claims more than the coordinator saw online (1 s of its 2 s): refused
    [first] = await settler.settle([cluster.report(0, 1)], observed=lambda u: 1)
    assert first.status is Status.REFUSED
    # a later batch that does not know it was refused waits for it (the control) ...
    [waiting] = await settler.settle([cluster.report(0, 2)])
    assert waiting.status is Status.WAITING
    # ... and one that knows settles seq 2 past it: the program takes a higher seq
    [settled] = await settler.settle([cluster.report(0, 2)], refused={(cluster.lease, node_key, 1)})
    assert settled.status is Status.SETTLED, settled.reason
    # within one batch, node 1's refused seq 1 does not hold its seq 2 back either
    outcomes = await settler.settle(
        [cluster.report(1, 1), cluster.report(1, 2)], observed=lambda u: 1 if u.report.seq == 1 else None
    )
    assert [o.status for o in outcomes] == [Status.REFUSED, Status.SETTLED]
    lease = await fetch(cluster.client, cluster.lease, "Lease")
    assert [(a.last_seq, a.gpu_seconds) for a in list(lease.assignments)[:2]] == [(2, 4), (2, 4)]
