"""The scheduler's, the coordinator's and the chain's throughput benchmarks at smoke size, so that none
can rot: each runs to the end on the same code path as its full run (the real processes where it
starts them), given small sizes through its own options, and prints every figure. Their values are
not checked: a benchmark reports them, a test does not."""

from __future__ import annotations

import re

import pytest

from tests.benchmarks import run_benchmark

FEW_TRIALS = r"n=\d+ p50 [\d.]+ s  max [\d.]+ s; p99: not reported \(n=\d+ < 100 trials\)"


def _line(pattern: str, out: str) -> None:
    assert re.search(pattern, out, re.MULTILINE), out


@pytest.mark.timeout(60)
def test_the_scheduler_benchmark_prints_a_row_per_fleet() -> None:
    out = run_benchmark(["bench/scheduler/placements.py", "--nodes", "1000", "--requests", "300"], timeout=50)
    _line(r"^ +1,000 +[\d,]+ +[\d,]+ +[\d.]+ +[\d.]+ +[\d.]+ +[\d.]+ +[\d.]+ +[\d.]+% +[\d,]+ +\d+% +[\d.]+", out)
    _line(r"^why p99 = ms to work out a NotPlaced reason", out)


@pytest.mark.timeout(120)
def test_the_time_to_running_benchmark_runs_its_rounds(localnet_bin) -> None:
    out = run_benchmark(
        ["bench/coordinator/time_to_running.py", "--rounds", "2", "--nodes", "2"],
        timeout=110,
        localnet_bin=localnet_bin,
    )
    _line(rf"^lease opened -> job running on all 2 nodes: {FEW_TRIALS}$", out)
    _line(r"^target: p50 < 1 s, p99 < 3 s -> (met|NOT met)$", out)


@pytest.mark.timeout(120)
def test_the_failover_benchmark_moves_a_lease_off_a_killed_worker(localnet_bin) -> None:
    out = run_benchmark(["bench/coordinator/failover.py", "--trials", "1"], timeout=110, localnet_bin=localnet_bin)
    _line(rf"^node loss detected -> lease running again elsewhere: {FEW_TRIALS}$", out)
    _line(rf"^worker killed -> lease running again elsewhere: {FEW_TRIALS}$", out)
    _line(r"^target \(from detection\): < 10 s -> (met|NOT met)$", out)


@pytest.mark.timeout(120)
def test_the_local_node_settle_benchmark_confirms_every_transaction(localnet_bin) -> None:
    out = run_benchmark(
        ["bench/localnet/settle_usage.py", "--txs", "60", "--nodes", "8", "--clients", "2"],
        timeout=110,
        localnet_bin=localnet_bin,
    )
    _line(r"^confirmed (\d+)/\1 settle_usage transactions in [\d.]+ s with 2 clients$", out)
    _line(r"^throughput: \d+ tx/s \(target >= 500 tx/s: (met|NOT met)\)$", out)
    _line(r"^confirmation latency: p50 [\d.]+ ms, p99 [\d.]+ ms$", out)


@pytest.mark.timeout(150)
def test_the_settle_rate_benchmark_settles_through_the_coordinator_and_raw(localnet_bin) -> None:
    out = run_benchmark(
        ["bench/scale/settle_rate.py", "--settler-reports", "20", "--concurrency", "4"],
        timeout=140,
        localnet_bin=localnet_bin,
    )
    _line(r"^1\. coordinator settler, one pass: 20/20 receipts settled in \d+ transactions", out)
    _line(r"^2\. raw, 4 concurrent through send_and_confirm: ([\d,]+)/\1 confirmed", out)
    _line(r"^  settled hourly \(after\): [\d.]+/s -> settler (PASS|FAIL)", out)


@pytest.mark.timeout(60)
def test_the_scale_model_prints_each_fleet_before_and_after() -> None:
    out = run_benchmark(["bench/scale/scale.py"], timeout=50)
    for model in ("before", "after"):
        for gpus in ("10,000", "100,000", "1,000,000"):
            _line(rf"^{model} +{gpus} +[\d,]+ +[\d.]+ +[\d,]+ +[\d.]+ % .+ [\d.]+ %", out)
