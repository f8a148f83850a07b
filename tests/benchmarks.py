"""Running a benchmark at smoke size from a test: a subprocess in the repository, the node binary the
session built, and a temporary directory of its own that is removed afterwards."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.conftest import REPO


def run_benchmark(args: list[str], timeout: float, localnet_bin: Path | None = None) -> str:
    """The benchmark's stdout once it exited 0; else the assertion shows the tail of its output.

    TMPDIR is a fresh directory under the system's: the benchmarks keep their deployments' logs and
    databases in a mkdtemp, which would pile up in /tmp run after run, and pytest's tmp_path is no
    place for them (when we are root, PostgreSQL runs as its own user and must traverse every parent,
    and its socket's path must stay short)."""
    tmp = tempfile.mkdtemp(prefix="gpunet-bench-test-")
    os.chmod(tmp, 0o755)
    env = {**os.environ, "TMPDIR": tmp}
    if localnet_bin is not None:
        env["GPUNET_LOCALNET_BIN"] = str(localnet_bin)
    try:
        run = subprocess.run(
            [sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return run.stdout
