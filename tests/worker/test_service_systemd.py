"""The worker as a service under a real systemd: a podman container whose PID 1 is systemd
(scripts/sandbox-setup builds its image) runs `gpunet worker install` from this checkout, mounted
read-only at the same path. The unit starts, the worker is admitted by the coordinator's real
gateway on this machine and runs a job in its bubblewrap sandbox under the unit's hardening; a
crash is restarted, a stop is a clean exit, and uninstalling stops it and keeps the key and the
journal. The control: a node the coordinator does not know exits 13, which a restart cannot fix, and
systemd leaves it stopped."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from coordinator.gateway import Gateway
from gpunet.exits import Exit
from gpunet.keys import create_keypair_file
from gpunet.protocol import Dispatch, JobLog, JobSpec, JobStatus
from tests.worker.conftest import podman_missing
from tests.worker.recording_coordinator import Coordinator, until
from tests.worker.sandboxes import HOST_JOBS_ENV, JOBS, SYSTEMD_IMAGE
from worker.service import STATE_DIR, UNIT, UNIT_NAME

REPO = Path(__file__).resolve().parents[2]
GPUNET = str(Path(sys.executable).with_name("gpunet"))  # the venv's, as the service runs it


class Machine:
    """A container booted by systemd, with this checkout, its venv and its Python at their paths."""

    def __init__(self, name: str) -> None:
        self.name = name

    def run(self, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            ["podman", "exec", self.name, *args], capture_output=True, text=True, timeout=timeout, check=False
        )
        assert not check or done.returncode == 0, f"{args}: {done.returncode} {done.stdout} {done.stderr}"
        return done

    def boot(self, timeout: float = 120) -> None:
        """Waits for systemd to finish booting (`podman exec` may come before PID 1 is systemd's)."""
        deadline = time.monotonic() + timeout
        while (state := self.run("systemctl", "is-system-running", "--wait", check=False).stdout.strip()) not in (
            "running",
            "degraded",
        ):
            assert time.monotonic() < deadline, f"systemd in the container did not boot: {state!r}"
            time.sleep(0.5)

    def show(self, prop: str) -> str:
        return self.run("systemctl", "show", "-p", prop, "--value", UNIT_NAME).stdout.strip()


def _mounts(*paths: Path) -> list[str]:
    """Each path read-only at its own place, skipping those under another and the image's /usr."""
    kept: list[Path] = []
    for path in sorted({p.resolve() for p in paths}, key=lambda p: len(p.parts)):
        if path.is_relative_to("/usr") or any(path.is_relative_to(k) for k in kept):
            continue
        kept.append(path)
    return [f"--volume={p}:{p}:ro" for p in kept]


@pytest.fixture
def machine(tmp_path, monkeypatch) -> Iterator[Machine]:
    conf = tmp_path / "containers.conf"
    conf.write_text("[containers]\ndefault_ulimits = []\n")
    monkeypatch.setenv("CONTAINERS_CONF", str(conf))
    if reason := podman_missing(SYSTEMD_IMAGE):
        pytest.skip(reason)
    keys = tmp_path / "keys"
    keys.mkdir()
    name = f"gpunet-systemd-{uuid.uuid4().hex[:8]}"
    # privileged: systemd mounts its cgroups and bubblewrap makes the jobs' namespaces, as on a machine;
    # the host's network: the worker reaches the gateway this test serves on 127.0.0.1
    mounts = [*_mounts(REPO, Path(sys.prefix), Path(sys.base_prefix)), f"--volume={keys}:{keys}"]
    started = subprocess.run(
        [
            "podman",
            "run",
            "--detach",
            "--name",
            name,
            "--runtime",
            "runc",
            "--systemd=always",
            "--privileged",
            "--network=host",
            *mounts,
            SYSTEMD_IMAGE,
            "/sbin/init",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if started.returncode:
        pytest.skip(f"podman cannot boot systemd in a container here: {started.stderr.strip()}")
    box = Machine(name)
    try:
        box.boot()
        yield box
    finally:
        # the service's log, shown by pytest when the test failed
        print(box.run("journalctl", "--no-pager", "-o", "cat", "-u", UNIT_NAME, check=False, timeout=30).stdout)
        subprocess.run(["podman", "rm", "--force", "--time", "0", name], capture_output=True, timeout=120, check=False)


def _key(directory: Path, name: str) -> tuple[Keypair, Path]:
    node = Keypair()
    path = directory / f"{name}.json"
    create_keypair_file(path, node)
    return node, path


def _install(machine: Machine, key: Path, gateway: str, *settings: str) -> subprocess.CompletedProcess[str]:
    sets = [f"--set={k}={v}" for k, v in {**HOST_JOBS_ENV, "GPUNET_WORKER_RECONNECT_CAP_SECONDS": "1"}.items()]
    return machine.run(
        GPUNET, "worker", "install", "--keypair", str(key), "--gateway", gateway, "--simulate-gpus", "H100:1:80",
        *sets, *settings, check=False,
    )  # fmt: skip


async def _shows(machine: Machine, prop: str, value: str, what: str, timeout: float = 60) -> None:
    """Waits until systemd shows the unit's `prop` as `value` (asking in a thread: the gateway serves
    the worker on this loop meanwhile)."""

    async def poll() -> None:
        while await asyncio.to_thread(machine.show, prop) != value:
            await asyncio.sleep(0.2)

    try:
        await asyncio.wait_for(poll(), timeout)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what} ({prop}={machine.show(prop)!r})") from None


async def test_the_worker_runs_under_systemd_restarts_after_a_crash_and_uninstalls_keeping_its_key(
    machine: Machine, tmp_path: Path
) -> None:
    node, key = _key(tmp_path / "keys", "node")
    coordinator = Coordinator({node.pubkey()})
    gateway = await Gateway(coordinator, heartbeat_seconds=0.3, usage_period_seconds=1).start()
    try:
        installed = _install(machine, key, gateway.url)
        assert installed.returncode == 0, installed.stderr
        assert machine.run("systemctl", "is-enabled", UNIT_NAME).stdout.strip() == "enabled"
        await until(lambda: gateway.online(node.pubkey()), "the service's worker admitted", timeout=90)

        # a job runs in the worker's bubblewrap sandbox under the unit's hardening
        lease = str(Pubkey.new_unique())
        job = JobSpec(command=[sys.executable, str(JOBS / "steps.py")], env={"STEPS": "5", "STEP_SECONDS": "0.1"})
        await gateway.send(node.pubkey(), Dispatch(lease=lease, gpus=1, job=job))
        await until(lambda: any(s.state in ("succeeded", "failed") for s in coordinator.of(JobStatus)), "the job's end")
        logs = [line.line for line in coordinator.of(JobLog)]
        assert coordinator.of(JobStatus)[-1].state == "succeeded" and logs[-1] == "done", logs

        # a crash: systemd starts it again (Restart=on-failure) and the gateway admits it again
        first = machine.show("MainPID")
        machine.run("systemctl", "kill", "--signal=SIGKILL", UNIT_NAME)
        await _shows(machine, "NRestarts", "1", "the restart after the crash")
        await _shows(machine, "ActiveState", "active", "the restarted service")
        assert machine.show("MainPID") not in (first, "0")
        await until(lambda: gateway.online(node.pubkey()), "the restarted worker admitted", timeout=60)

        # a stop is SIGTERM and a clean exit (not a failure)
        machine.run("systemctl", "stop", UNIT_NAME)
        assert (machine.show("ActiveState"), machine.show("Result"), machine.show("ExecMainStatus")) == (
            "inactive",
            "success",
            "0",
        )

        uninstalled = machine.run(GPUNET, "worker", "uninstall")
        assert f"removed /{UNIT}" in uninstalled.stderr
        assert machine.run("test", "-e", f"/{UNIT}", check=False).returncode == 1
        assert machine.run("systemctl", "is-enabled", UNIT_NAME, check=False).returncode != 0
        # kept: the node key, the journal and the job's checkpoint (its last step)
        assert key.exists() and machine.run("test", "-f", str(STATE_DIR / "usage.jsonl"), check=False).returncode == 0
        assert machine.run("cat", str(STATE_DIR / "jobs" / lease / "checkpoints" / "step")).stdout == "5"
    finally:
        await gateway.stop()


async def test_a_node_the_coordinator_does_not_know_exits_13_and_systemd_leaves_it_stopped(
    machine: Machine, tmp_path: Path
) -> None:
    _, key = _key(tmp_path / "keys", "stranger")
    gateway = await Gateway(Coordinator(set())).start()
    try:
        installed = _install(machine, key, gateway.url, "--set=GPUNET_WORKER_NOT_REGISTERED_EXIT_SECONDS=2")
        assert installed.returncode == 0, installed.stderr
        await _shows(machine, "ActiveState", "failed", "the unregistered worker's exit", timeout=90)
        assert machine.show("ExecMainStatus") == str(int(Exit.NOT_REGISTERED))
        await asyncio.sleep(7)  # past RestartSec=5: a restart would have begun
        assert (machine.show("ActiveState"), machine.show("NRestarts")) == ("failed", "0")
        assert sum(gateway.refused.values()) >= 1
    finally:
        await gateway.stop()
