"""The agent as a real process (`gpunet worker run`), killed with SIGKILL mid-job: its job dies
with it, its journal survives, and after a restart every unacknowledged report is sent exactly
once, the open period is closed where the journal left it, and no second is metered twice.
Also the real no-driver path of `gpunet worker run`."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from solders.pubkey import Pubkey

from gpunet.keys import create_keypair_file
from gpunet.protocol import Cancel, Dispatch, Heartbeat, JobLog, JobSpec, JobStatus, UsageReportMessage
from tests.worker.gateway import FakeGateway
from tests.worker.sandboxes import HOST_JOBS_ENV, job_pid
from worker.gpus import GpusUnavailable
from worker.journal import Journal
from worker.nvml import NvmlGpus

GPUNET = str(Path(sys.executable).parent / "gpunet")
JOB = str(Path(__file__).parent / "jobs" / "steps.py")


def start_agent(gateway: FakeGateway, keyfile: Path, state: Path, log: Path, *extra: str) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "GPUNET_WORKER_METER_TICK_SECONDS": "0.2",
        "GPUNET_WORKER_RECONNECT_BASE_SECONDS": "0.1",
        "GPUNET_WORKER_RECONNECT_CAP_SECONDS": "1",
        "GPUNET_WORKER_STOP_GRACE_SECONDS": "5",
        **HOST_JOBS_ENV,
    }
    with open(log, "ab") as out:
        return subprocess.Popen(
            [
                GPUNET,
                "worker",
                "run",
                "-k",
                str(keyfile),
                "--gateway",
                gateway.url,
                "--simulate-gpus",
                "H100:2:80",
                "--state-dir",
                str(state),
                *extra,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )


def is_gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:")[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


async def wait_until(condition, timeout: float = 60.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


async def test_sigkill_loses_no_report_and_restart_sends_each_once(tmp_path) -> None:
    keyfile, state, log = tmp_path / "node.json", tmp_path / "state", tmp_path / "agent.log"
    node = create_keypair_file(keyfile)
    lease = str(Pubkey.new_unique())
    spec = JobSpec(command=[sys.executable, JOB], env={"STEPS": "100000", "STEP_SECONDS": "0.1"})
    async with FakeGateway(usage_period_seconds=2) as gateway:
        gateway.ack_usage = lambda report: report.seq == 1
        agent = start_agent(gateway, keyfile, state, log)
        try:
            await gateway.wait_for(lambda: gateway.messages(Heartbeat), what=f"a heartbeat (log: {log})")
            await gateway.send(Dispatch(lease=lease, gpus=2, job=spec))
            await gateway.wait_for(lambda: len(gateway.messages(UsageReportMessage)) >= 3, what="three reports")
            pid = job_pid(state / "jobs" / lease / "work")
            assert pid is not None, "the job is not running"
            agent.send_signal(signal.SIGKILL)
            agent.wait(timeout=30)
        finally:
            if agent.poll() is None:
                agent.kill()
        await wait_until(lambda: is_gone(pid), what="the job to die with its agent")
        before = gateway.messages(UsageReportMessage, session=1)

        journal = Journal(state / "usage.jsonl")  # what the crash left on disk
        unacked = journal.unacked()
        open_period = journal.open_periods.get(lease)
        journal.close()
        assert [r.seq for r in journal.reports.values()] == list(range(1, len(journal.reports) + 1))
        assert (lease, 1) in journal.acked and unacked == journal.unacked()
        sent_unacked = [r for r in before if r.seq > 1]
        assert unacked[: len(sent_unacked)] == sent_unacked  # everything sent was journaled first
        last_end = max(r.period_end for r in journal.reports.values())
        recovers = open_period is not None and int(open_period.run_seconds * 2) > 0

        agent = start_agent(gateway, keyfile, state, log)
        try:
            await gateway.wait_for(lambda: gateway.sessions == 2 or None, what="the second session")
            expected = len(unacked) + recovers
            await gateway.wait_for(
                lambda: len(gateway.messages(UsageReportMessage, 2)) >= expected, what="resent reports"
            )
            # a few heartbeats later: nothing sent twice
            beats = len(gateway.messages(Heartbeat, 2))
            await gateway.wait_for(lambda: len(gateway.messages(Heartbeat, 2)) >= beats + 3, what="heartbeats")
            after = gateway.messages(UsageReportMessage, 2)
            assert after[: len(unacked)] == unacked
            assert len(after) == expected
            if recovers:
                recovered = after[-1]
                assert recovered.seq == len(journal.reports) + 1 and recovered.period_start == last_end
                assert 0 < recovered.gpu_seconds <= 2 * (recovered.period_end - recovered.period_start)
                assert recovered.verify(node.pubkey())
            assert not gateway.messages(Heartbeat, 2)[-1].running  # the agent does not restart jobs on its own

            # the coordinator dispatches the lease again: the job resumes from its checkpoint and
            # metering continues after the last reported second
            await gateway.send(Dispatch(lease=lease, gpus=2, job=spec))
            await gateway.wait_for(
                lambda: any(m.line.startswith("resumed from") for m in gateway.messages(JobLog, 2)),
                what="the job resuming",
            )
            await gateway.wait_for(
                lambda: len(gateway.messages(UsageReportMessage, 2)) >= expected + 2, what="new reports"
            )
            await gateway.send(Cancel(lease=lease, reason="lease closed"))
            await gateway.wait_for(
                lambda: any(m.state == "cancelled" for m in gateway.messages(JobStatus, 2)), what="cancel"
            )
            await gateway.wait_for(lambda: len(gateway.messages(Heartbeat, 2)) >= beats + 6, what="heartbeats")

            agent.send_signal(signal.SIGTERM)  # a graceful stop
            assert agent.wait(timeout=60) == 0
        finally:
            if agent.poll() is None:
                agent.kill()

    distinct = {r.seq: r for r in gateway.messages(UsageReportMessage)}
    usage = [distinct[seq] for seq in sorted(distinct)]
    assert [r.seq for r in usage] == list(range(1, len(usage) + 1))
    assert all(b.period_start >= a.period_end for a, b in itertools.pairwise(usage)), "a second metered twice"
    assert all(r.verify(node.pubkey()) for r in usage)
    # and the same (lease, seq) never came with different content
    assert all(m == distinct[m.seq] for m in gateway.messages(UsageReportMessage))


def test_without_a_driver_the_worker_refuses_to_start_and_says_why(tmp_path) -> None:
    try:
        NvmlGpus().close()
        pytest.skip("this machine has a working NVIDIA driver: the no-driver path cannot happen here")
    except GpusUnavailable:
        pass
    keyfile = tmp_path / "node.json"
    create_keypair_file(keyfile)
    out = subprocess.run(
        [
            GPUNET,
            "worker",
            "run",
            "-k",
            str(keyfile),
            "--gateway",
            "ws://127.0.0.1:9/worker",
            "--state-dir",
            str(tmp_path / "state"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "COLUMNS": "300"},
    )
    assert out.returncode == 10
    assert "no NVIDIA driver" in out.stderr and "--simulate-gpus MODEL:COUNT:VRAM_GB" in out.stderr
    assert not (tmp_path / "state").exists()  # refused before touching anything


def test_a_bad_gateway_url_is_refused_before_anything_starts(tmp_path) -> None:
    out = subprocess.run(
        [
            GPUNET,
            "worker",
            "run",
            "-k",
            str(tmp_path / "missing.json"),
            "--gateway",
            "http://x/worker",
            "--simulate-gpus",
            "H100:1:80",
            "--state-dir",
            str(tmp_path / "state"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "COLUMNS": "300"},
    )
    assert out.returncode == 2
    assert (
        "gateway_url: Value error, the gateway URL must start with ws:// or wss://, got 'http://x/worker'" in out.stderr
    )
    assert not (tmp_path / "state").exists()
