"""bench/indexer/indexer.py at smoke size, so it cannot rot: on gpunet-localnet and an embedded
PostgreSQL its burst of settle-shaped transactions (one settlement, one UsageSettled event each) is
indexed by one backfill pass and its live path follows a steady stream, and it prints both figures;
so does its packed variant (--packed-stakes). Its rates and lags are not checked: a benchmark reports
them, a test does not."""

from __future__ import annotations

import re

import pytest

from tests.benchmarks import run_benchmark

LAG = (
    r"^lag: \d+ transactions at 10/s for 2 s \(slot 100 ms\): confirmed -> indexed p50 \d+ ms, p99 \d+ ms, "
    r"max \d+ ms \(target p99 < 1000 ms\); sent -> indexed p50 \d+ ms, p99 \d+ ms"
)


def _throughput(events: int) -> str:
    return (
        rf"^throughput: {events} events \(40 transactions\) indexed in [\d.]+ s = [\d,]+ events/s, "
        r"[\d,]+ transactions/s \(target >= 5,000 events/s\)$"
    )


@pytest.mark.timeout(90)
def test_the_indexer_benchmark_indexes_one_settlement_a_transaction(localnet_bin) -> None:
    out = run_benchmark(["bench/indexer/indexer.py", "--smoke"], timeout=80, localnet_bin=localnet_bin)
    assert re.search(r"^burst: sending 40 transactions, 1 settlement .* each, over 32 shares", out, re.MULTILINE), out
    assert re.search(_throughput(40), out, re.MULTILINE), out  # one event to a transaction: all indexed
    assert re.search(LAG, out, re.MULTILINE), out


@pytest.mark.timeout(90)
def test_the_indexer_benchmark_packed_variant(localnet_bin) -> None:
    out = run_benchmark(
        ["bench/indexer/indexer.py", "--smoke", "--packed-stakes", "10"], timeout=80, localnet_bin=localnet_bin
    )
    assert re.search(r"^burst: sending 40 transactions, 10 identical stake instructions", out, re.MULTILINE), out
    assert re.search(_throughput(400), out, re.MULTILINE), out
    assert re.search(LAG, out, re.MULTILINE), out
