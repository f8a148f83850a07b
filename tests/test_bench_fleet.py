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
    _line(r"^again p99 = ms to retry a waiting lease", out)


@pytest.mark.timeout(120)
def test_the_time_to_running_benchmark_runs_its_rounds(localnet_bin) -> None:
    out = run_benchmark(
        ["bench/coordinator/time_to_running.py", "--rounds", "2", "--nodes", "2"],
        timeout=110,
        localnet_bin=localnet_bin,
    )
    free = r"\(onto free nodes; 100 ms slots, confirmed after 0\)"
    _line(rf"^lease opened -> job running on all 2 nodes {free}: {FEW_TRIALS}$", out)
    _line(r"^target: p50 < 1 s, p99 < 3 s -> (met|NOT met); p50 < 0\.5 s -> (met|NOT met)$", out)


@pytest.mark.timeout(150)
def test_the_time_to_running_benchmark_runs_back_to_back_at_a_real_cluster_s_pace(localnet_bin) -> None:
    out = run_benchmark(
        [
            *("bench/coordinator/time_to_running.py", "--rounds", "2", "--nodes", "2", "--back-to-back"),
            *("--slot-ms", "400", "--confirm-slots", "2"),
        ],
        timeout=140,
        localnet_bin=localnet_bin,
    )
    _line(
        r"^lease opened -> job running on all 2 nodes \(back to back, onto the closed lease's nodes; "
        rf"400 ms slots, confirmed after 2\): {FEW_TRIALS}$",
        out,
    )


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
        [
            "bench/scale/settle_rate.py",
            "--nodes",
            "40",
            "--settler-reports",
            "20",
            "--concurrency",
            "8",
            "--slot-ms",
            "100",
        ],
        timeout=140,
        localnet_bin=localnet_bin,
    )
    _line(r"^1\. coordinator settler, one pass: 20/20 receipts settled in \d+ transactions", out)
    _line(r"^2\. raw, 8 concurrent through send_and_confirm: ([\d,]+)/\1 confirmed", out)
    _line(r"^3\. placements through the coordinator's attester, window 256: 40/40 leases assigned in", out)
    _line(r"^  settled hourly \(after\): [\d.]+/s -> settler (PASS|FAIL)", out)
    _line(r"^  settled hourly at 1 M GPUs, a share each \(target\): 277\.78/s -> settler (PASS|FAIL)", out)


@pytest.mark.timeout(60)
def test_the_scale_model_prints_each_fleet_before_and_after() -> None:
    out = run_benchmark(["bench/scale/scale.py"], timeout=50)
    for model in ("before", "after", "combined"):  # combined: after and a lease's own transactions
        for gpus in ("10,000", "100,000", "1,000,000"):
            _line(rf"^{model} +{gpus} +[\d,]+ +[\d.]+ +[\d,]+ +[\d.]+ % .+ [\d.]+ %", out)
    for lease in (r"8-GPU leases \(1 node\)", r"1-GPU leases \(8 a node\)"):
        _line(
            rf"^  after \+ lease lifecycle, {lease} of 3,600 s: (PASS|FAIL): block [\d.]+ %, "
            r"hottest account [a-z (),]+ [\d.]+ %",
            out,
        )


@pytest.mark.timeout(150)
def test_the_chaos_benchmark_completes_every_job_and_balances_every_lease(localnet_bin) -> None:
    out = run_benchmark(["bench/chaos/chaos.py", "--leases", "2"], timeout=140, localnet_bin=localnet_bin)
    _line(r"^2 leases, \d+ workers killed \(30% of the shares\)$", out)
    _line(r"^checkpointing jobs completed: \d+/2$", out)
    _line(rf"^time to recover \(kill -> running elsewhere\): ({FEW_TRIALS}|n=0: no trial measured)$", out)
    _line(r"^conservation: \d+/2 leases balance; base units mis-settled: \d+$", out)
    _line(r"^target: every job completes, 0 mis-settled -> (met|NOT met)$", out)


@pytest.mark.timeout(150)
def test_the_faults_benchmark_runs_a_scenario_with_its_control(localnet_bin) -> None:
    out = run_benchmark(
        ["bench/faults/faults.py", "--runs", "1", "--scenarios", "one-node-lost"],
        timeout=140,
        localnet_bin=localnet_bin,
    )
    _line(r"^one-node-lost +1 +\d+ +\d+ +\d+ +\d+$", out)
    _line(
        r"^targets: 0 innocent slashes, 0 unpaid GPU-seconds, 0 jobs run twice; the control slashed exactly once", out
    )


@pytest.mark.timeout(150)
def test_the_ray_benchmark_forms_a_cluster_and_replaces_its_head(localnet_bin) -> None:
    out = run_benchmark(
        ["bench/ray/ray.py", "--rounds", "1", "--sizes", "2", "--head-rounds", "1"],
        timeout=140,
        localnet_bin=localnet_bin,
    )
    _line(rf"^N=2: lease opened -> Ray cluster ready with all 2 nodes: {FEW_TRIALS}$", out)
    _line(rf"^N=2: head lost -> cluster whole again on a new head: {FEW_TRIALS}$", out)
    _line(r"^N=2: target p50 < 30 s -> (met|NOT met)$", out)
