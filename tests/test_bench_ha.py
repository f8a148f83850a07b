"""bench/ha/takeover.py at smoke size, so it cannot rot: on the real processes (gpunet-localnet, two
coordinator replicas on one PostgreSQL, four workers) one leader is SIGKILLed and the benchmark runs to
the end, printing every figure, and no p99 from a single trial (a p99 needs 100 trials; below, it
says why there is none). Its timings and the work lost are not checked: a benchmark reports them, a
test does not."""

from __future__ import annotations

import re

import pytest

from tests.benchmarks import run_benchmark


@pytest.mark.timeout(120)
def test_the_takeover_benchmark_prints_its_figures_and_no_p99_from_one_trial(localnet_bin) -> None:
    out = run_benchmark(["bench/ha/takeover.py", "--smoke"], timeout=110, localnet_bin=localnet_bin)
    spans = r"n=1 p50 [\d.]+ s  max [\d.]+ s; p99: not reported \(n=1 < 100 trials\)$"
    assert re.search(r"^leader TTL 3 s, renewed every 1 s; 1 trial$", out, re.MULTILINE), out
    assert re.search(rf"^leader SIGKILLed -> the other replica elected: {spans}", out, re.MULTILINE), out
    assert re.search(
        rf"^leader SIGKILLed -> the other replica acting \(a lease placed\): {spans}", out, re.MULTILINE
    ), out
    assert re.search(r"^target: < 5 s -> (met|NOT met)$", out, re.MULTILINE), out
    assert re.search(
        r"^work lost: jobs interrupted \d+, innocent slashes \d+, settlement stalled \d+, leases not placed \d+$",
        out,
        re.MULTILINE,
    ), out
    assert re.search(r"^target: none -> (met|NOT met)$", out, re.MULTILINE), out
