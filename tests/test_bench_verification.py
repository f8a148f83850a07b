"""bench/verification at smoke size, so it cannot rot: each CPU backend runs to the end and prints
its figures (their values are not checked: a benchmark reports them, a test does not). The cupy
backend needs a GPU: bench/verification/gpu-check runs it on one."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.conftest import REPO


def _bench(*args: str) -> str:
    run = subprocess.run([sys.executable, "bench/verification/verification.py", *args], cwd=REPO,
                         capture_output=True, text=True, timeout=150)  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return run.stdout


@pytest.mark.timeout(160)
def test_the_numpy_backend_prints_prover_verifier_and_verdict_figures() -> None:
    out = _bench("--smoke")
    assert re.search(r"^H100 +sim 64x256x\d+ +[\d.]+ s +[\d.]+ s +[\d.]+ s +\d+x$", out, re.MULTILINE), out
    assert re.search(r"a A100 +claiming H100 +: +[\d.]+ s to commit, deadline +[\d.]+ s -> caught \(deadline\)", out)
    assert re.search(r"false positives: \d+ of 20 honest challenges", out), out
    assert re.search(r"under \d+ busy processes .*: \d+ past the deadline, \d+ with openings that do not hold; "
                     r"the slowest commitment [\d.]+ s against the [\d.]+ s deadline", out), out  # fmt: skip
    assert re.search(r"detection rate: [\d.]+%", out), out
