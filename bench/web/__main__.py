"""Benchmark (not a test): gpunet's explorer with N settlements in the ledger (default 10,000).

1. Populate: gpunet-localnet (100 ms slots), a market (providers with 10 nodes of 8 GPUs each, clients
   with 16-GPU leases over two nodes of two providers) and N real settle_usage transactions, one
   UsageSettled event each, indexed live by the coordinator's own indexer into its embedded
   PostgreSQL. The coordinator runs as the demo runs it (`gpunet coordinator run`, default settings).
   Timed separately: the set-up, the burst (sent and confirmed), the indexing after the last one.
2. Pages, in headless Debian Chromium (Playwright): each page's load (navigation start to the end of
   the load event) and first contentful paint, p50/p99 over repeated first visits. Target < 1 s
   (the issue's, for the explorer's pages and the lease page's first paint).
3. The read API's queries behind the pages, p50/p99 under a few concurrent clients.
4. The live feed: a settlement's confirmation -> its row on /web/settlements (server-sent events).

A page not served yet answers 404 and is reported "not served (404)". Prints figures against the
targets; asserts none.

    .venv/bin/python -m bench.web                 # 10,000 settlements (a few minutes)
    .venv/bin/python -m bench.web --smoke         # 200, a handful of loads: checks the benchmark runs
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path

import httpx
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed

from bench.web.api import audit_queries, measure_api, page_queries
from bench.web.feed import measure_feed
from bench.web.ledger import Shape, build_market, burst, settlements_indexed
from bench.web.pages import chromium, measure_loads
from bench.web.report import Report
from gpunet.demo.processes import CoordinatorProcess
from gpunet.keys import create_keypair_file
from gpunet.localnet import LocalnetProcess, program_build
from gpunet.testbed import Market

SLOT_MS = 100


async def run(args: argparse.Namespace, work: Path) -> Report:
    report = Report()
    shape = Shape.for_settlements(args.settlements)
    with LocalnetProcess(work / "localnet.log", slot_ms=SLOT_MS) as node:
        async with AsyncClient(node.url, commitment=Confirmed, timeout=60) as chain:
            t0 = time.perf_counter()
            market = await Market.create(chain, usage_period_seconds=3_600)  # hourly, as production
            attester = work / "attester.json"
            create_keypair_file(attester, market.attester)
            coordinator = CoordinatorProcess(work, node.url, node.ws_url, attester)
            coordinator.start()  # its PostgreSQL starts while the market is built
            try:
                shares = await build_market(market, shape)
                await asyncio.to_thread(coordinator.wait_ready)
                report.populated("set-up", shape.describe(), time.perf_counter() - t0)

                t0 = time.perf_counter()
                sent = await burst(market, shares, shape.settlements)
                signatures = sent.signatures
                report.populated(
                    "settlements sent and confirmed",
                    f"{len(signatures):,} settle_usage transactions in {sent.rounds} rounds paced by the chain's"
                    f" clock (a share bills one second more each); sending alone {sent.sending_seconds:.1f} s,"
                    f" {len(signatures) / sent.sending_seconds:,.0f} tx/s",
                    time.perf_counter() - t0,
                )
                t0 = time.perf_counter()
                await settlements_indexed(coordinator.api_url, shape.settlements)
                report.populated(
                    "indexed after the last confirmation", "the coordinator's ledger", time.perf_counter() - t0
                )

                lease, middle = shares[len(shares) // 2].lease, shares[len(shares) // 2].supplier
                web = f"{coordinator.api_url}/web"
                pages = {
                    "/web/ (network)": f"{web}/",
                    "/web/leases/{lease}": f"{web}/leases/{lease}",
                    "/web/providers/{provider}": f"{web}/providers/{middle.provider}",
                    "/web/nodes/{node}": f"{web}/nodes/{middle.node}",
                    "/web/settlements": f"{web}/settlements",
                    "/web/tx/{signature}": f"{web}/tx/{signatures[len(signatures) // 2]}",
                    "/web/search?q={lease}": f"{web}/search?q={lease}",
                }
                async with chromium() as browser:
                    for name, url in pages.items():
                        report.page(name, await measure_loads(browser, url, args.loads))
                    await csv(report, coordinator.api_url, middle.provider, args.loads)
                    asked = page_queries(lease, middle.provider, middle.node_key.pubkey(), shape.settlements)
                    latencies = await measure_api(coordinator.api_url, asked, args.clients, args.rounds)
                    report.api(latencies, f"{args.clients} clients")
                    audits = audit_queries(lease, middle.provider)
                    latencies = await measure_api(coordinator.api_url, audits, args.clients, max(2, args.rounds // 5))
                    report.api(latencies, f"{args.clients} clients, audits alone")
                    feed = await measure_feed(
                        browser, f"{web}/settlements", market, shares, args.live_rate, args.live_seconds
                    )
                    report.feed(feed, args.live_rate)
            finally:
                coordinator.stop(timeout=60)
    return report


async def csv(report: Report, api_url: str, provider: object, samples: int) -> None:
    """The CSV export, fetched whole (no browser: it is a download), for all and for one provider."""
    async with httpx.AsyncClient(base_url=api_url, timeout=120) as http:
        for name, path in (
            ("/web/settlements.csv", "/web/settlements.csv"),
            ("/web/settlements.csv?provider=", f"/web/settlements.csv?provider={provider}"),
        ):
            seconds, size, status = [], 0, 200
            for _ in range(samples):
                t0 = time.perf_counter()
                response = await http.get(path)
                seconds.append(time.perf_counter() - t0)
                status, size = response.status_code, len(response.content)
                if status != 200:
                    break
            report.download(name, seconds, size, status)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="200 settlements, 2 loads a page, short phases")
    parser.add_argument("--settlements", type=int, help="settlements in the ledger (default 10,000; smoke 200)")
    parser.add_argument("--loads", type=int, help="loads of each page (default 20; smoke 2)")
    parser.add_argument("--clients", type=int, default=4, help="concurrent API clients")
    parser.add_argument("--rounds", type=int, help="rounds of every API query per client (default 50; smoke 3)")
    parser.add_argument("--live-rate", type=float, default=2.0, help="settlements per second in the feed phase")
    parser.add_argument("--live-seconds", type=float, help="length of the feed phase (default 15; smoke 3)")
    args = parser.parse_args()
    defaults = (
        {"settlements": 200, "loads": 2, "rounds": 3, "live_seconds": 3.0}
        if args.smoke
        else {"settlements": 10_000, "loads": 20, "rounds": 50, "live_seconds": 15.0}
    )
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.settlements < 2:
        parser.error("--settlements must be at least 2")

    print(
        f"gpunet-localnet {SLOT_MS} ms slots, program: {program_build()}; {args.settlements:,} settlements", flush=True
    )
    work = Path(tempfile.mkdtemp(prefix="gpunet-bench-web-"))
    try:
        report = asyncio.run(run(args, work))
    except BaseException:
        print(f"the benchmark failed; logs in {work}", file=sys.stderr)
        raise
    report.print()
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
