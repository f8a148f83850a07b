"""Benchmark (not a test): does the coordinator's settlement path keep up with a 10,000-GPU fleet on
gpunet-localnet? 1,250 nodes of 8 GPUs (10 providers), one running 8-GPU lease per node, simulated
usage: each node's signed cumulative receipt (gpunet.usage.Receipt) of its first seconds of full use,
settled as the coordinator settles it (the node's Ed25519 instruction and settle_usage). Fees are
paid by a pool of 8 fee payers (coordinator.payers), the attester co-signing, as a coordinator with
GPUNET_FEE_PAYERS=8 sends them.

Measured, on a node with 400 ms slots (mainnet's) confirming 2 slots after a transaction's own (about
a real cluster's 0.5-1.5 s) unless --slot-ms / --confirm-slots:
  1. the coordinator's settler: `coordinator.settlement.Settler.settle` on a batch of --settler-reports
     receipts (default 250), one pass as the settlement loop runs it (it checks each receipt against
     the chain, then sends the packed transactions at once, --window outstanding at most: the
     coordinator's GPUNET_TX_WINDOW, default 256), cold caches: settlements/s;
  2. the raw rate: one settlement transaction per node (1,250), each signed, simulated, priced,
     sent and confirmed through the SDK (`gpunet.client.send_and_confirm`), --concurrency at a time;
  3. placements: a second lease per node (nodes of 16 GPUs, each lease 8) assigned through the
     coordinator's attester (`Attester.assign`), all at once within --window, as the placement loop
     sends one step's decisions: placements/s (the scheduler's decisions and the ledger are left out).
Against the rate the fleet needs: every 60 s (the per-period reports before receipts) 1,250 / 60 = 20.8
per second; hourly (receipts, the default cadence) 0.35 per second; and 1 M GPUs hourly, each its own
share (one-GPU leases, the worst case), 278 per second (the settler's rate is one coordinator's; the
chain's side is bench/scale/scale.py's).

    .venv/bin/python bench/scale/settle_rate.py
    .venv/bin/python bench/scale/settle_rate.py --slot-ms 100 --concurrency 64
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solders.keypair import Keypair

from coordinator.attester import Attester
from coordinator.payers import FeePayers
from coordinator.settlement import Settler, SignedUsage, Status
from gpunet import instructions as ix
from gpunet.accounts import fetch
from gpunet.amounts import IO
from gpunet.client import DEFAULT_WINDOW, InFlight, send_and_confirm
from gpunet.localnet import LocalnetProcess
from gpunet.pda import lease_pda
from gpunet.testbed import Market, at_most, funded_wallet
from gpunet.tokens import io_account
from gpunet.usage import Receipt

GPUS_PER_NODE, PROVIDERS, PAYERS = 8, 10, 8
NODES = 10_000 // GPUS_PER_NODE  # the fleet, unless --nodes
PRICE = 2 * IO


async def setup(
    chain: AsyncClient, concurrency: int, count: int
) -> tuple[Market, list[tuple[Keypair, Keypair, object, object]], list]:
    """The market, (supplier wallet, node key, its running lease, a second lease open for it) per node
    (of twice 8 GPUs: the second lease is for the placement stage), and the funded fee-payer pool."""
    market = await Market.create(chain, usage_period_seconds=3_600, unbonding_seconds=60, jail_seconds=60)
    suppliers = []
    for _ in range(PROVIDERS):
        wallet = await funded_wallet(chain, 100)
        tokens = await market.fund(wallet.pubkey(), 100_000 * IO)
        await market.send(wallet, [ix.register_provider(wallet.pubkey(), market.mint),
                                   ix.stake(wallet.pubkey(), tokens, 50_000 * IO)])  # fmt: skip
        suppliers.append(wallet)
    client = await market.client(count * 100 * IO)  # each lease escrows 3 IO x 8 GPUs x 2 h = 48 IO
    spec = ix.NodeSpec(1, 2 * GPUS_PER_NODE, 80, 1, PRICE, bytes(32))
    terms = ix.LeaseTerms(ix.ANY, 24, GPUS_PER_NODE, ix.ANY, 3 * IO, 2 * 3_600)

    async def node(i: int) -> tuple[Keypair, Keypair, object, object]:
        supplier, key = suppliers[i % PROVIDERS], Keypair()
        await send_and_confirm(chain, supplier, [ix.register_node(supplier.pubkey(), key.pubkey(), spec)], [key])
        opening = [ix.open_lease(client.wallet.pubkey(), client.tokens, market.mint, 2 * i + n, terms) for n in (1, 2)]
        await send_and_confirm(chain, client.wallet, opening)
        lease, waiting = lease_pda(client.wallet.pubkey(), 2 * i + 1), lease_pda(client.wallet.pubkey(), 2 * i + 2)
        share = ix.Share(key.pubkey(), supplier.pubkey(), GPUS_PER_NODE, PRICE)
        await send_and_confirm(chain, market.admin, [ix.assign_lease(market.admin.pubkey(), lease, [share])])
        return supplier, key, lease, waiting

    nodes = await at_most(concurrency, [node(i) for i in range(count)])
    payers = [await funded_wallet(chain, 10) for _ in range(PAYERS)]
    return market, nodes, payers


def report(node_key: Keypair, lease: object, seq: int, started: int) -> SignedUsage:
    """The node's receipt through second `seq` after its lease started, at full use, signed by the node."""
    r = Receipt(1, seq * GPUS_PER_NODE, started + seq)  # cumulative: `seq` seconds of its GPUs
    return SignedUsage(lease, node_key.pubkey(), r, r.signature(lease, node_key))


async def measure(url: str, a: argparse.Namespace) -> None:
    async with AsyncClient(url, commitment=Confirmed, timeout=60) as chain:
        t = time.perf_counter()
        market, nodes, payer_keys = await setup(chain, a.concurrency, a.nodes)
        gpus = a.nodes * GPUS_PER_NODE
        print(f"set-up: {a.nodes:,} nodes of {GPUS_PER_NODE} GPUs ({gpus:,} GPUs, {PROVIDERS} providers), one lease "
              f"each, in {time.perf_counter() - t:.0f} s")  # fmt: skip
        started = {str(lease): (await fetch(chain, lease, "Lease")).started_at for _, _, lease, _ in nodes}
        while (await chain.get_block_time((await chain.get_slot()).value)).value < max(started.values()) + 2:
            await asyncio.sleep(0.5)
        payers = FeePayers(chain, market.attester, payer_keys)

        # 1. the coordinator's settler, one pass over a batch
        batch = [report(key, lease, 1, started[str(lease)]) for _, key, lease, _ in nodes[: a.settler_reports]]
        t = time.perf_counter()
        sender = InFlight(chain, window=a.window)
        outcomes = await Settler(chain, market.attester, payers, sender=sender).settle(batch)
        settler_s = time.perf_counter() - t
        settled = sum(o.status is Status.SETTLED for o in outcomes)
        txs = len({o.signature for o in outcomes if o.signature})
        settler_rate = settled / settler_s

        # 2. the raw rate: one settlement per node, concurrently, through the SDK
        mint = market.mint
        latencies: list[float] = []
        failures: list[str] = []

        async def settle(supplier: Keypair, key: Keypair, lease: object) -> None:
            u = report(key, lease, 2, started[str(lease)])
            instructions = [
                u.receipt.signed_instruction(u.lease, u.node_key, u.signature),
                ix.settle_usage(
                    market.attester.pubkey(),
                    u.lease,
                    u.node_key,
                    supplier.pubkey(),
                    io_account(supplier.pubkey(), mint),
                    u.receipt,
                    GPUS_PER_NODE,  # one second more than the receipt settled before
                ),
            ]
            t0 = time.perf_counter()
            try:
                payer, cosigners = await payers.signing()
                await send_and_confirm(chain, payer, instructions, cosigners)
            except Exception as e:
                failures.append(f"{type(e).__name__}: {e}"[:200])
                return
            latencies.append(time.perf_counter() - t0)

        t = time.perf_counter()
        await at_most(a.concurrency, [settle(s, k, lease) for s, k, lease, _ in nodes])
        raw_s = time.perf_counter() - t

        # 3. placements: each node's waiting lease assigned through the coordinator's attester, all at
        # once as the placement loop sends a step's decisions, within the same window
        attester = Attester(chain, market.attester, payers=payers, sender=InFlight(chain, window=a.window))
        t = time.perf_counter()
        assigned = await asyncio.gather(
            *(attester.assign(waiting, [ix.Share(k.pubkey(), s.pubkey(), GPUS_PER_NODE, PRICE)])
              for s, k, _, waiting in nodes),
            return_exceptions=True,
        )  # fmt: skip
        placing_s = time.perf_counter() - t
        placed = sum(1 for r in assigned if not isinstance(r, BaseException))
        placement_errors = [f"{type(r).__name__}: {r}"[:200] for r in assigned if isinstance(r, BaseException)]

    need = {
        "every 60 s (before)": a.nodes / 60,
        "hourly (after)": a.nodes / 3_600,
        "hourly at 1 M GPUs, a share each (target)": 1_000_000 / 3_600,
    }
    print(f"\n1. coordinator settler, one pass: {settled}/{len(batch)} receipts settled in {txs} transactions, "
          f"{settler_s:.1f} s: {settler_rate:.2f} settlements/s (window {a.window}, cold caches)")  # fmt: skip
    print(f"2. raw, {a.concurrency} concurrent through send_and_confirm: {len(latencies):,}/{a.nodes:,} confirmed in "
          f"{raw_s:.1f} s: {len(latencies) / raw_s:.1f} settlements/s, latency p50 "
          f"{statistics.median(latencies) * 1e3:.0f} ms, p99 "
          f"{statistics.quantiles(latencies, n=100)[98] * 1e3:.0f} ms"
          + (f"; {len(failures)} failed, e.g. {failures[0]}" if failures else ""))  # fmt: skip
    print(f"3. placements through the coordinator's attester, window {a.window}: {placed:,}/{a.nodes:,} leases "
          f"assigned in {placing_s:.1f} s: {placed / placing_s:.1f} placements/s (target >= 100/s: "
          f"{'met' if placed / placing_s >= 100 else 'NOT met'}; the scheduler's decisions, about 20,000/s in "
          f"bench/scheduler, and the ledger's writes are left out)"
          + (f"; {len(placement_errors)} failed, e.g. {placement_errors[0]}" if placement_errors else ""))  # fmt: skip
    print(f"\nneeded ({GPUS_PER_NODE}-GPU nodes, one settlement each per cadence):")
    for cadence, rate in need.items():
        print(f"  settled {cadence}: {rate:.2f}/s -> settler {'PASS' if settler_rate >= rate else 'FAIL'} "
              f"({settler_rate / rate:.1f}x), raw {'PASS' if len(latencies) / raw_s >= rate else 'FAIL'} "
              f"({len(latencies) / raw_s / rate:.1f}x)")  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--slot-ms", type=int, default=400)
    p.add_argument("--confirm-slots", type=int, default=2, help="slots before confirmed (0: at once)")
    p.add_argument("--window", type=int, default=DEFAULT_WINDOW, help="transactions in flight at most")
    p.add_argument("--nodes", type=int, default=NODES, help="the fleet's 8-GPU nodes (one lease each)")
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--settler-reports", type=int, default=250)
    p.add_argument("--url", help="a running gpunet-localnet (default: start one)")
    a = p.parse_args()
    if a.url:
        asyncio.run(measure(a.url, a))
        return
    with tempfile.TemporaryDirectory() as tmp:
        node = LocalnetProcess(Path(tmp) / "node.log", slot_ms=a.slot_ms, confirm_slots=a.confirm_slots).start()
        try:
            build = os.environ.get("GPUNET_PROGRAM_SO") or "native (set GPUNET_PROGRAM_SO for the SBF build)"
            print(f"gpunet-localnet, {a.slot_ms} ms slots, confirmed after {a.confirm_slots}, program: {build}")
            asyncio.run(measure(node.url, a))
        finally:
            node.stop()


if __name__ == "__main__":
    main()
