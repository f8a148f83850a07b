"""bench/verification/memory.py at smoke size, so it cannot rot: it runs to the end and prints each
of its figures (their values are not checked: a benchmark reports them, a test does not)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.conftest import REPO


@pytest.mark.timeout(160)
def test_the_memory_benchmark_prints_its_figures() -> None:
    run = subprocess.run([sys.executable, "bench/verification/memory.py", "--smoke"], cwd=REPO,
                         capture_output=True, text=True, timeout=150)  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    out = run.stdout
    assert re.search(r"^H100 +\d+x\d+x1024 = 64 GiB +[\d.]+ s", out, re.MULTILINE), out
    assert re.search(r"holds +12.5% of its VRAM .* caught in \d+%", out), out
    assert re.search(r"holds 25% of its VRAM: chain [\d.]+ of the lane -> at least [\d.]+ s", out), out
    assert re.search(r"false positives: \d+ of 5 honest memory challenges", out), out
    assert re.search(r"detection rate: [\d.]+%", out), out
