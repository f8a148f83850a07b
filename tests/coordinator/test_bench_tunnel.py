"""bench/tunnel at smoke size, so it cannot rot: on the real processes (gpunet-localnet, the coordinator
with its relay, a worker, a job) it runs to the end and prints every figure of its table, every stream
opened and exchanged without an error. Its timings are not checked: a benchmark reports them, a test
does not."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.conftest import REPO

RATE = r"median [\d,.]+ MiB/s \(min [\d,.]+, max [\d,.]+\)"
LATENCY = r"p50 [\d,.]+ ms, p99 [\d,.]+ ms \(n=40\)"


@pytest.mark.timeout(150)
def test_the_tunnel_benchmark_runs_at_smoke_size_and_prints_its_figures(localnet_bin) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "bench.tunnel", "--smoke"],
        cwd=REPO,
        env={**os.environ, "GPUNET_LOCALNET_BIN": str(localnet_bin)},
        capture_output=True,
        text=True,
        timeout=140,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    out = run.stdout
    table = out[out.index("\nfigure ") :]
    assert re.search(rf"throughput, blocking sockets on loopback \(1 MiB sendall\) +{RATE}", table), table
    for direction in ("upload", "download"):
        for path in ("direct asyncio TCP to the job's port", r"through the relay \(TLS end to end\)",
                     r"the node's own listener \(TLS, no relay\)"):  # fmt: skip
            assert re.search(rf"throughput {direction}, {path} +{RATE}", table), (direction, path)
        assert re.search(
            rf"relay / direct asyncio TCP, {direction} \(one stream\) +\d+% .* >= 50% +(met|NOT met)", table
        )
        assert re.search(rf"{direction}: relay / worker / client CPU per GiB +-?[\d.]+ / [\d.]+ / [\d.]+ s/GiB", table)
    for path in ("direct asyncio TCP", "through the relay", "the node's own listener"):
        assert re.search(rf"1 KiB request \+ 1 KiB response, {path}.* +{LATENCY}", table), path
    assert re.search(r"added through the relay .* p50 -?[\d.]+ ms, p99 -?[\d.]+ ms +p99 < 5 ms +(met|NOT met)", table)
    # every stream opened, exchanged and closed: no error, whatever the timing
    assert re.search(
        r"20 streams opened at once .* 20 open in [\d.]+ s .*; 20 exchanged; 0 errors +0 errors +met", table
    )
    assert re.search(r"relay's process memory \(RSS\) +[\d,]+ MiB before, [\d,]+ MiB at the peak", table)
    assert re.search(r"relay CPU per GiB moved .* +-?[\d,.]+ s/GiB", table)
    assert "machine: " in out and "before the start" in out
    assert "left out:" in out
