"""bench/web at smoke size, so it cannot rot: it runs to the end and prints a figure for every page,
query and phase (a measure, or "not served (404)" for a page not built yet). Its timings are not
checked: a benchmark reports them, a test does not."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.conftest import REPO

PAGES = ("/web/ (network)", "/web/leases/{lease}", "/web/providers/{provider}", "/web/nodes/{node}",
         "/web/settlements", "/web/tx/{signature}", "/web/search?q={lease}")  # fmt: skip
FIGURE = r"p50 [\d,]+ ms, p99 [\d,]+ ms \(n=\d+\)"


@pytest.mark.timeout(150)
def test_the_web_benchmark_runs_at_smoke_size_and_prints_its_figures(localnet_bin) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "bench.web", "--smoke"],
        cwd=REPO,
        env={**os.environ, "GPUNET_LOCALNET_BIN": str(localnet_bin)},
        capture_output=True,
        text=True,
        timeout=140,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    out = run.stdout
    assert re.search(r"settlements sent and confirmed: [\d.,]+ s +200 settle_usage transactions", out), out
    assert re.search(r"indexed after the last confirmation: [\d.,]+ s", out), out
    table = out[out.index("\nfigure ") :]
    for page in PAGES:  # each page measured, or said not to be served yet
        assert re.search(rf"page load {re.escape(page)} +({FIGURE}|- +p99 < 1,000 ms +not served \(404\))", table), page
    assert re.search(rf"page load /web/ \(network\) +{FIGURE}", table), table  # served today
    api = re.findall(rf"^API .+ \(4 clients[^)]*\) +{FIGURE} ", table, re.MULTILINE)
    assert len(api) == 11, table
    assert re.search(r"^live feed: confirmed -> row on /web/settlements \(2/s\) +(p50|- )", table, re.MULTILINE), table
    assert "left out:" in out
