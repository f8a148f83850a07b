"""Benchmark (not a test): gpunet events indexed into PostgreSQL.

The transactions are settle-shaped: each is one usage settlement, the node's Ed25519 instruction
over its receipt and the settle_usage after it (one UsageSettled event, its settlement row
derived), of one GPU-second more of a (lease, node) share, the bulk of what the indexer reads in
a running market. `--packed-stakes N` is the variant this benchmark measured before: N identical
stake instructions to a transaction (N Staked events), which flatters the indexer (one
getTransaction and one transaction row for N events).

1. Throughput: a burst of real transactions lands on gpunet-localnet first; then one backfill
   pass indexes them all (getSignaturesForAddress + batched getTransaction, decode, events +
   derived rows + cursor written per batch in one database transaction). Prints events written
   per second.
2. Lag: with the indexer running live (logsSubscribe wakes the backfill), transactions are sent
   at `--rate` per second; for each, lag = the time its row was committed in PostgreSQL
   (transactions.indexed_at) minus the time the sender saw it confirmed. Prints p50/p99.

Targets: >= 5,000 events/s, lag p99 < 1 s. Starts its own node and embedded PostgreSQL.

Left out: the coordinator packs the receipts it has ready into as few transactions as fit a packet
(coordinator.settlement), so a busy market's settlements come several to a transaction: one to a
transaction is the indexer's worst case per event. Every settlement here pays one GPU-second of
one of `--shares` single-GPU leases, all of one supplier; no compute budget instructions.

    .venv/bin/python bench/indexer/indexer.py [--transactions 1000 --rate 20 --seconds 15]
        [--shares 128] [--packed-stakes 10] [--smoke]

--smoke: 40 transactions to 32 shares, 2 s of the live path at 10 tx/s, 100 ms slots: every
figure printed in seconds (for the test suite: tests/test_bench_indexer.py), none meaningful.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solana.rpc.types import TxOpts
from solders.instruction import Instruction
from solders.keypair import Keypair
from solders.message import Message
from solders.transaction import Transaction

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "localnet"))

from settle_usage import Pair, SettlementAccounts, setup  # the settle_usage benchmark's shares

from coordinator.db import open_database
from coordinator.indexer import Indexer
from coordinator.settings import Settings
from gpunet import instructions as ix
from gpunet.amounts import IO
from gpunet.client import send_and_confirm
from gpunet.localnet import LocalnetProcess
from gpunet.testbed import Market
from gpunet.usage import Receipt

TARGET_EVENTS_PER_S = 5_000
TARGET_LAG_P99_S = 1.0


class Settlements:
    """Settle-shaped transactions: one settlement each, of the next GPU-second of a share in turn."""

    def __init__(self, shares: list[Pair], accounts: SettlementAccounts) -> None:
        self.shares, self.accounts = shares, accounts

    def describe(self) -> str:
        return f"1 settlement (Ed25519 + settle_usage: 1 UsageSettled event) each, over {len(self.shares)} shares"

    def next(self, i: int) -> tuple[Keypair, list[Instruction]]:
        """The attester and the instructions of the i-th settlement: its share's receipt one GPU-second on."""
        p = self.shares[i % len(self.shares)]
        p.gpu_seconds += 1
        p.settled_until += 1
        receipt = Receipt(p.epoch, p.gpu_seconds, p.settled_until)
        a = self.accounts
        return a.attester, ix.signed_settlement(
            a.attester.pubkey(), p.lease, p.node_key, a.supplier, a.supplier_tokens, receipt, 1
        )

    async def wait_for(self, chain: AsyncClient, count: int) -> None:
        """Until the chain's clock is past the `count` next settlements' GPU-seconds (the program
        refuses a receipt through a second it has not reached)."""
        ahead = -(-count // len(self.shares)) + 1
        while True:
            now = (await chain.get_block_time((await chain.get_slot()).value)).value
            if now is not None and now - max(p.settled_until for p in self.shares) >= ahead:
                return
            await asyncio.sleep(0.2)


class PackedStakes:
    """The packed variant: `per_tx` identical stake instructions to a transaction, each a Staked event."""

    def __init__(self, suppliers: list, per_tx: int) -> None:
        self.suppliers, self.per_tx = suppliers, per_tx

    def describe(self) -> str:
        return f"{self.per_tx} identical stake instructions ({self.per_tx} Staked events) each, packed"

    def next(self, i: int) -> tuple[Keypair, list[Instruction]]:
        s = self.suppliers[i % len(self.suppliers)]
        amount = IO + i  # a distinct transaction every time
        return s.wallet, [ix.stake(s.wallet.pubkey(), s.tokens, amount)] * self.per_tx

    async def wait_for(self, chain: AsyncClient, count: int) -> None:
        return None  # a stake is good at any time


Shape = Settlements | PackedStakes


async def burst(chain: AsyncClient, shape: Shape, count: int) -> None:
    """`count` transactions sent without waiting, then confirmed."""
    blockhash = (await chain.get_latest_blockhash()).value.blockhash
    sigs = []
    for i in range(count):
        if i % 200 == 0:
            blockhash = (await chain.get_latest_blockhash()).value.blockhash
        payer, instructions = shape.next(i)
        tx = Transaction([payer], Message.new_with_blockhash(instructions, payer.pubkey(), blockhash), blockhash)
        sent = await chain.send_raw_transaction(bytes(tx), opts=TxOpts(skip_preflight=True, skip_confirmation=True))
        sigs.append(sent.value)
    pending = list(sigs)
    while pending:
        statuses = []
        for i in range(0, len(pending), 256):
            statuses += (await chain.get_signature_statuses(pending[i : i + 256])).value
        failed = [s for s, st in zip(pending, statuses, strict=True) if st is not None and st.err is not None]
        if failed:
            raise RuntimeError(f"{len(failed)} burst transactions failed")
        pending = [s for s, st in zip(pending, statuses, strict=True) if st is None]
        await asyncio.sleep(0.1)


async def steady(
    chain: AsyncClient, shape: Shape, first: int, rate: float, seconds: float
) -> dict[str, tuple[float, float]]:
    """Sends at `rate` tx/s (transactions `first`, `first` + 1, ... of `shape`); for each, the wall
    time it was sent and first seen confirmed (5 ms polls)."""
    times: dict[str, tuple[float, float]] = {}

    async def one(i: int) -> None:
        payer, instructions = shape.next(i)
        sent = time.time()
        sig = await send_and_confirm(chain, payer, instructions, poll_seconds=0.005)
        times[str(sig)] = (sent, time.time())

    tasks = []
    start = time.monotonic()
    n = 0
    while time.monotonic() - start < seconds:
        tasks.append(asyncio.create_task(one(first + n)))
        n += 1
        await asyncio.sleep(max(0.0, start + n / rate - time.monotonic()))
    await asyncio.gather(*tasks)
    return times


def pct(values: list[float], q: int) -> float:
    # inclusive: between the values measured (the default, exclusive, puts a few values' p99 past their max)
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


async def main(args: argparse.Namespace) -> int:
    work = Path(tempfile.mkdtemp(prefix="gpunet-bench-indexer-"))
    try:
        return await run(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)  # node ledger and PostgreSQL data, both stopped by now


async def run(args: argparse.Namespace, work: Path) -> int:
    with LocalnetProcess(work / "localnet.log", slot_ms=args.slot_ms) as node:
        settings = Settings(rpc_url=node.url, ws_url=node.ws_url, state_dir=work / "state", poll_seconds=5)
        async with AsyncClient(node.url, commitment=Confirmed) as client, open_database(settings) as pool:
            shape: Shape
            if args.packed_stakes:
                market = await Market.create(client)
                shape = PackedStakes([await market.supplier() for _ in range(8)], args.packed_stakes)
            else:
                shape = Settlements(*await setup(client, args.shares))
            steady_count = int(args.rate * args.seconds) + 1
            await shape.wait_for(client, args.transactions + steady_count)
            # Index the set-up so the burst is measured alone.
            indexer = Indexer(settings, pool)
            await indexer.backfill()

            print(f"burst: sending {args.transactions} transactions, {shape.describe()} ...", flush=True)
            await burst(client, shape, args.transactions)
            t0 = time.perf_counter()
            events = await indexer.backfill()
            elapsed = time.perf_counter() - t0
            rate = events / elapsed
            print(
                f"throughput: {events} events ({args.transactions} transactions) indexed in {elapsed:.2f} s"
                f" = {rate:,.0f} events/s, {args.transactions / elapsed:,.0f} transactions/s"
                f" (target >= {TARGET_EVENTS_PER_S:,} events/s)"
            )

            # Lag: the live indexer (subscription + backfill) against a steady stream.
            task = asyncio.create_task(indexer.run())
            await asyncio.sleep(1.0)  # subscribed
            times = await steady(client, shape, args.transactions, args.rate, args.seconds)
            deadline = time.monotonic() + 60
            async with pool.acquire() as conn:
                while time.monotonic() < deadline:
                    rows = await conn.fetch(
                        "SELECT signature, extract(epoch FROM indexed_at)::float8 AS at"
                        " FROM transactions WHERE signature = ANY($1::text[])",
                        list(times),
                    )
                    if len(rows) == len(times):
                        break
                    await asyncio.sleep(0.2)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            # A client polling every 5 ms can see the confirmation after the indexer has written it.
            lags = [max(0.0, r["at"] - times[r["signature"]][1]) for r in rows]
            from_send = [r["at"] - times[r["signature"]][0] for r in rows]
            missing = len(times) - len(rows)
            print(
                f"lag: {len(lags)} transactions at {args.rate:g}/s for {args.seconds:g} s (slot {args.slot_ms} ms):"
                f" confirmed -> indexed p50 {pct(lags, 50) * 1000:.0f} ms, p99 {pct(lags, 99) * 1000:.0f} ms,"
                f" max {max(lags) * 1000:.0f} ms (target p99 < {TARGET_LAG_P99_S * 1000:.0f} ms);"
                f" sent -> indexed p50 {pct(from_send, 50) * 1000:.0f} ms, p99 {pct(from_send, 99) * 1000:.0f} ms"
                f"{f'; {missing} NOT INDEXED' if missing else ''}"
            )
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--transactions", type=int, default=1000, help="transactions in the burst")
    parser.add_argument("--rate", type=float, default=20.0, help="transactions per second in the lag phase")
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--slot-ms", type=int, default=400)
    parser.add_argument("--shares", type=int, default=128, help="(lease, node) shares the settlements take turns on")
    parser.add_argument(
        "--packed-stakes",
        type=int,
        metavar="N",
        help="the packed variant instead: N identical stake instructions (N Staked events) to a transaction",
    )
    parser.add_argument("--smoke", action="store_true", help="a small burst and 2 s of the live path (CI)")
    args = parser.parse_args()
    if args.smoke:
        args.transactions, args.shares, args.rate, args.seconds, args.slot_ms = 40, 32, 10.0, 2.0, 100
    if args.packed_stakes is not None and args.packed_stakes < 1:
        parser.error("--packed-stakes must be >= 1")
    sys.exit(asyncio.run(main(args)))
