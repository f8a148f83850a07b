"""The coordinator's settlement path on gpunet-localnet with the real program: signed reports
verified and settled in packed transactions; forged, replayed, out-of-order and over-claimed
reports refused or held; a restarted coordinator given the same reports settles nothing twice."""

from __future__ import annotations

import asyncio

import pytest
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from coordinator.settlement import Settler, SignedUsage, Status
from gpunet import instructions as ix
from gpunet.accounts import fetch
from gpunet.amounts import IO
from gpunet.client import send_and_confirm
from gpunet.pda import lease_pda
from gpunet.tokens import create_mint, ensure_io_account, mint_io, token_balance, io_account
from gpunet.usage import UsageReport

PERIOD = 2


async def _wallet(client: AsyncClient) -> Keypair:
    kp = Keypair()
    sig = (await client.request_airdrop(kp.pubkey(), 10**10)).value
    await client.confirm_transaction(sig)
    return kp


async def _chain_time(client: AsyncClient) -> int:
    return (await client.get_block_time((await client.get_slot()).value)).value


class Cluster:
    """An initialised gpunet with two 2-GPU nodes sharing one active 4-GPU lease (admin = attester)."""

    async def build(self, client: AsyncClient) -> Cluster:
        self.client = client
        self.admin = await _wallet(client)
        mint = await create_mint(client, self.admin)
        self.mint = mint
        treasury = await ensure_io_account(client, self.admin, self.admin.pubkey(), mint)
        await send_and_confirm(client, self.admin, [ix.initialize(self.admin.pubkey(), mint, ix.ConfigParams(
            treasury=treasury, protocol_fee_bps=500, min_stake_per_gpu=10 * IO, unbonding_seconds=60,
            usage_period_seconds=60, jail_seconds=60, slash_bps=(1_000, 2_000, 5_000), slash_client_share_bps=5_000,
            attesters=[self.admin.pubkey()]))])
        self.nodes: list[tuple[Keypair, Keypair]] = []  # (supplier wallet, node key)
        for _ in range(2):
            supplier, node_key = await _wallet(client), Keypair()
            tokens = await ensure_io_account(client, self.admin, supplier.pubkey(), mint)
            await mint_io(client, self.admin, mint, tokens, 100 * IO)
            await send_and_confirm(client, supplier, [
                ix.register_provider(supplier.pubkey(), mint), ix.stake(supplier.pubkey(), tokens, 50 * IO),
                ix.register_node(supplier.pubkey(), node_key.pubkey(), ix.NodeSpec(1, 2, 80, 1, 3_600 * IO // 1000)),
            ], [node_key])
            self.nodes.append((supplier, node_key))
        self.client_wallet = await _wallet(client)
        client_tokens = await ensure_io_account(client, self.admin, self.client_wallet.pubkey(), mint)
        await mint_io(client, self.admin, mint, client_tokens, 100 * IO)
        self.lease = lease_pda(self.client_wallet.pubkey(), 1)
        await send_and_confirm(client, self.client_wallet, [ix.open_lease(
            self.client_wallet.pubkey(), client_tokens, mint, 1, ix.LeaseTerms(1, 80, 4, ix.ANY, 10 * IO, 3_600))])
        await send_and_confirm(client, self.admin, [ix.assign_lease(self.admin.pubkey(), self.lease, [
            ix.Share(node_key.pubkey(), supplier.pubkey(), 2) for supplier, node_key in self.nodes])])
        self.started = (await fetch(client, self.lease, "Lease")).started_at
        return self

    def report(self, node: int, seq: int, gpu_seconds: int | None = None, signer: Keypair | None = None) -> SignedUsage:
        node_key = self.nodes[node][1]
        start = self.started + (seq - 1) * PERIOD
        report = UsageReport(seq, start, start + PERIOD, PERIOD * 2 if gpu_seconds is None else gpu_seconds)
        return SignedUsage(self.lease, node_key.pubkey(), report, report.signature(self.lease, signer or node_key))

    async def wait_for_period(self, seq: int) -> None:
        while await _chain_time(self.client) < self.started + seq * PERIOD:
            await asyncio.sleep(0.2)

    async def earned(self, node: int) -> int:
        return await token_balance(self.client, io_account(self.nodes[node][0].pubkey(), self.mint))


@pytest.fixture
async def cluster(node):
    async with AsyncClient(node.url, commitment=Confirmed) as client:
        yield await Cluster().build(client)


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
