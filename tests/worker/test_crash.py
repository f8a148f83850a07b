"""The agent as a real process (`gpunet worker run`), killed with SIGKILL mid-job: its job dies
with it, its journal survives, and after a restart the newest unacknowledged receipt is sent
exactly once, metering counts on from it, and no second is metered twice.
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

from solders.pubkey import Pubkey

from gpunet.keys import create_keypair_file
from gpunet.protocol import Cancel, Dispatch, Heartbeat, JobLog, JobSpec, JobStatus, UsageReceiptMessage
from tests.worker.gateway import FakeGateway
from tests.worker.sandboxes import HOST_JOBS_ENV, job_pid
from worker.journal import Journal

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


async def test_sigkill_loses_no_receipt_and_restart_counts_on_from_the_newest(tmp_path) -> None:
    keyfile, state, log = tmp_path / "node.json", tmp_path / "state", tmp_path / "agent.log"
    node = create_keypair_file(keyfile)
    lease = str(Pubkey.new_unique())
    spec = JobSpec(command=[sys.executable, JOB], env={"STEPS": "100000", "STEP_SECONDS": "0.1"})
    async with FakeGateway(usage_period_seconds=2) as gateway:
        gateway.ack_usage = lambda receipt: False  # nothing recorded before the crash
        agent = start_agent(gateway, keyfile, state, log)
        try:
            await gateway.wait_for(lambda: gateway.messages(Heartbeat), what=f"a heartbeat (log: {log})")
            await gateway.send(Dispatch(lease=lease, gpus=2, job=spec))
            await gateway.wait_for(lambda: len(gateway.messages(UsageReceiptMessage)) >= 3, what="three receipts")
            pid = job_pid(state / "jobs" / lease / "work")
            assert pid is not None, "the job is not running"
            agent.send_signal(signal.SIGKILL)
            agent.wait(timeout=30)
        finally:
            if agent.poll() is None:
                agent.kill()
        await wait_until(lambda: is_gone(pid), what="the job to die with its agent")
        before = gateway.messages(UsageReceiptMessage, session=1)

        journal = Journal(state / "usage.jsonl")  # what the crash left on disk
        [newest] = journal.unacked()  # the share's newest receipt: it supersedes every one before
        journal.close()
        # everything sent was journaled first: the newest on disk is at least the last one sent
        assert (newest.through, newest.gpu_seconds) >= (before[-1].through, before[-1].gpu_seconds)
        gateway.ack_usage = lambda receipt: True

        agent = start_agent(gateway, keyfile, state, log)
        try:
            await gateway.wait_for(lambda: gateway.sessions == 2 or None, what="the second session")
            await gateway.wait_for(lambda: gateway.messages(UsageReceiptMessage, 2), what="the newest receipt again")
            # a few heartbeats later: nothing sent twice, nothing more metered (the share is not held)
            beats = len(gateway.messages(Heartbeat, 2))
            await gateway.wait_for(lambda: len(gateway.messages(Heartbeat, 2)) >= beats + 3, what="heartbeats")
            assert gateway.messages(UsageReceiptMessage, 2) == [newest]
            assert not gateway.messages(Heartbeat, 2)[-1].running  # the agent does not restart jobs on its own

            # the coordinator dispatches the lease again: the job resumes from its checkpoint and
            # metering counts on from the newest receipt, without the time the agent was down
            dispatched = int(time.time())
            await gateway.send(Dispatch(lease=lease, gpus=2, job=spec))
            await gateway.wait_for(
                lambda: any(m.line.startswith("resumed from") for m in gateway.messages(JobLog, 2)),
                what="the job resuming",
            )
            await gateway.wait_for(lambda: len(gateway.messages(UsageReceiptMessage, 2)) >= 3, what="new receipts")
            resumed = gateway.messages(UsageReceiptMessage, 2)[1]
            assert resumed.gpu_seconds - newest.gpu_seconds <= 2 * (resumed.through - dispatched)
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

    usage = gateway.messages(UsageReceiptMessage)
    assert all(r.verify(node.pubkey()) and r.epoch == 1 for r in usage)
    assert usage[-1].final and not any(r.final for r in usage[:-1])
    # never a second counted twice: the cumulative only grows, by at most 2 GPUs x the seconds between
    assert all(
        0 <= b.gpu_seconds - a.gpu_seconds <= 2 * (b.through - a.through) for a, b in itertools.pairwise(usage)
    ), "a second metered twice"
