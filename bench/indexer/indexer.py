"""Benchmark (not a test): gpunet events indexed into PostgreSQL.

1. Throughput: a burst of real transactions (each `--per-tx` stake instructions, so as many
   Staked events) lands on gpunet-localnet first; then one backfill pass indexes them all
   (getSignaturesForAddress + batched getTransaction, decode, events + derived rows + cursor
   written per batch in one database transaction). Prints events written per second.
2. Lag: with the indexer running live (logsSubscribe wakes the backfill), transactions are sent
   at `--rate` per second; for each, lag = the time its row was committed in PostgreSQL
   (transactions.indexed_at) minus the time the sender saw it confirmed. Prints p50/p99.

Targets: >= 5,000 events/s, lag p99 < 1 s. Starts its own node and embedded PostgreSQL.

    .venv/bin/python bench/indexer/indexer.py [--transactions 1000 --per-tx 10 --rate 20 --seconds 15]
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
from solders.message import Message
from solders.transaction import Transaction

from coordinator.db import open_database
from coordinator.indexer import Indexer
from coordinator.settings import Settings
from gpunet import instructions as ix
from gpunet.amounts import IO
from gpunet.client import send_and_confirm
from gpunet.localnet import LocalnetProcess
from gpunet.testbed import Market

TARGET_EVENTS_PER_S = 5_000
TARGET_LAG_P99_S = 1.0


async def burst(market: Market, suppliers, count: int, per_tx: int) -> None:
    """`count` transactions sent without waiting, then confirmed."""
    c = market.chain
    blockhash = (await c.get_latest_blockhash()).value.blockhash
    sigs = []
    for i in range(count):
        s = suppliers[i % len(suppliers)]
        if i % 200 == 0:
            blockhash = (await c.get_latest_blockhash()).value.blockhash
        amount = IO + i  # a distinct transaction every time
        message = Message.new_with_blockhash(
            [ix.stake(s.wallet.pubkey(), s.tokens, amount)] * per_tx, s.wallet.pubkey(), blockhash
        )
        tx = Transaction([s.wallet], message, blockhash)
        sigs.append(
            (await c.send_raw_transaction(bytes(tx), opts=TxOpts(skip_preflight=True, skip_confirmation=True))).value
        )
    pending = list(sigs)
    while pending:
        statuses = []
        for i in range(0, len(pending), 256):
            statuses += (await c.get_signature_statuses(pending[i : i + 256])).value
        failed = [s for s, st in zip(pending, statuses, strict=True) if st is not None and st.err is not None]
        if failed:
            raise RuntimeError(f"{len(failed)} burst transactions failed")
        pending = [s for s, st in zip(pending, statuses, strict=True) if st is None]
        await asyncio.sleep(0.1)


async def steady(market: Market, suppliers, rate: float, seconds: float, per_tx: int) -> dict[str, tuple[float, float]]:
    """Sends at `rate` tx/s; for each, the wall time it was sent and first seen confirmed (5 ms polls)."""
    times: dict[str, tuple[float, float]] = {}

    async def one(s, amount: int) -> None:
        sent = time.time()
        sig = await send_and_confirm(
            market.chain, s.wallet, [ix.stake(s.wallet.pubkey(), s.tokens, amount)] * per_tx, poll_seconds=0.005
        )
        times[str(sig)] = (sent, time.time())

    tasks = []
    start = time.monotonic()
    n = 0
    while time.monotonic() - start < seconds:
        tasks.append(asyncio.create_task(one(suppliers[n % len(suppliers)], 2 * IO + n)))
        n += 1
        await asyncio.sleep(max(0.0, start + n / rate - time.monotonic()))
    await asyncio.gather(*tasks)
    return times


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[q - 1] if len(values) > 1 else values[0]


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
            market = await Market.create(client)
            suppliers = [await market.supplier() for _ in range(8)]
            # Index the set-up so the burst is measured alone.
            indexer = Indexer(settings, pool)
            await indexer.backfill()

            print(f"burst: sending {args.transactions} transactions x {args.per_tx} events ...", flush=True)
            await burst(market, suppliers, args.transactions, args.per_tx)
            t0 = time.perf_counter()
            events = await indexer.backfill()
            elapsed = time.perf_counter() - t0
            rate = events / elapsed
            print(
                f"throughput: {events} events ({args.transactions} transactions) indexed in {elapsed:.2f} s"
                f" = {rate:,.0f} events/s (target >= {TARGET_EVENTS_PER_S:,})"
            )

            # Lag: the live indexer (subscription + backfill) against a steady stream.
            task = asyncio.create_task(indexer.run())
            await asyncio.sleep(1.0)  # subscribed
            times = await steady(market, suppliers, args.rate, args.seconds, args.per_tx)
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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transactions", type=int, default=1000)
    parser.add_argument("--per-tx", type=int, default=10, help="stake instructions (Staked events) per transaction")
    parser.add_argument("--rate", type=float, default=20.0, help="transactions per second in the lag phase")
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--slot-ms", type=int, default=400)
    sys.exit(asyncio.run(main(parser.parse_args())))
