"""The sandboxes the worker tests run their jobs in: host jobs (the test jobs are Python scripts)
inside bubblewrap, reading this directory's jobs/ (scripts/setup installs bubblewrap)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from worker.sandbox import Sandbox

JOBS = Path(__file__).parent / "jobs"
IMAGE = "localhost/gpunet-sandbox-test:bookworm-2"  # scripts/sandbox-setup builds it (the container tests)
SYSTEMD_IMAGE = "localhost/gpunet-systemd-test:bookworm-1"  # and this (the worker under systemd)
# the worker settings (GPUNET_WORKER_* variables) of an agent process that runs these jobs
# (no container engine: they run host jobs only, so nothing depends on podman or the egress filter here)
HOST_JOBS_ENV = {
    "GPUNET_WORKER_ALLOW_HOST_JOBS": "1",
    "GPUNET_WORKER_HOST_JOB_PATHS": f'["{JOBS}"]',
    "GPUNET_WORKER_CONTAINER_ENGINE": "none",
}
HOST_JOBS_SETTINGS: dict[str, object] = {"allow_host_jobs": True, "host_job_paths": [JOBS], "container_engine": "none"}


def host_jobs(*hidden: Path, network: str = "egress") -> Sandbox:
    return Sandbox.configure(
        engine="none",
        allow_host_jobs=True,
        host_paths=[JOBS],
        hidden=list(hidden),
        network=network,  # type: ignore[arg-type]
    )


def job_pid(workdir: Path) -> int | None:
    """The host pid of the host job running in `workdir` (inside bubblewrap's pid namespace the job
    sees another pid), found by its GPUNET_WORKDIR; None when it is not running."""
    marker = f"\0GPUNET_WORKDIR={workdir}\0".encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if Path(os.readlink(proc / "exe")).name == "bwrap":  # bubblewrap itself and its init
                continue
            if marker in b"\0" + (proc / "environ").read_bytes():
                return int(proc.name)
        except OSError:
            continue
    return None


@contextlib.contextmanager
def agent_started(argv: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """`gpunet worker run ...` (argv) started, once it says it waits for its gateway (it passed its
    checks at start); terminated at the end."""
    with open(log, "wb") as err:
        agent = subprocess.Popen(argv, stderr=err, env=env)
    try:
        deadline = time.monotonic() + 60
        while "simulated GPU(s), gateway" not in log.read_text():
            assert agent.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        yield agent
    finally:
        agent.terminate()
        agent.wait(timeout=30)
