"""The agent in this process against the fake gateway over a real WebSocket: authentication,
heartbeats, a dispatched job with its logs, statuses and signed usage, the share billed while
it is held (jobs or not) and the lease's jobs run on it one at a time, bad coordinator input
refused while the agent keeps running, and a dropped connection resumed without losing state."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import json
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from gpunet.protocol import (
    Ack,
    Cancel,
    Dispatch,
    Heartbeat,
    Hello,
    JobLog,
    JobSpec,
    JobStatus,
    LeaseEnd,
    UsageAck,
    UsageReceiptMessage,
)
from gpunet.secrets import seal
from tests.worker.gateway import FakeGateway
from tests.worker.sandboxes import HOST_JOBS_SETTINGS
from worker.agent import Agent, StateDirBusy, WorkerSettings
from worker.session import Backoff
from worker.simulate import SimulatedGpus

JOB = str(Path(__file__).parent / "jobs" / "steps.py")


def job(steps: int, step_seconds: float = 0.1, **spec: object) -> JobSpec:
    return JobSpec(command=[sys.executable, JOB], env={"STEPS": str(steps), "STEP_SECONDS": str(step_seconds)}, **spec)


@contextlib.asynccontextmanager
async def running_agent(
    gateway: FakeGateway, state_dir: Path, node: Keypair | None = None, **settings_: object
) -> AsyncIterator[Agent]:
    node = node or Keypair()
    quick = {
        "meter_tick_seconds": 0.2,
        "stop_grace_seconds": 2,
        "reconnect_base_seconds": 0.1,
        "reconnect_cap_seconds": 1,
    }
    settings = WorkerSettings(gateway_url=gateway.url, state_dir=state_dir, **(quick | HOST_JOBS_SETTINGS | settings_))
    agent = Agent(settings, node, SimulatedGpus.parse("H100:2:80", str(node.pubkey())))
    task = asyncio.create_task(agent.run())
    try:
        yield agent
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        agent.close()  # a task cancelled before it ever ran never reached its own cleanup


def final_status(gateway: FakeGateway, lease: str, job_number: int = 1):
    return next(
        (
            m
            for m in gateway.messages(JobStatus)
            if m.lease == lease
            and m.job_number == job_number
            and m.state in ("succeeded", "failed", "cancelled", "timed_out", "refused")
        ),
        None,
    )


def script(code: str) -> JobSpec:
    return JobSpec(command=[sys.executable, "-c", code], restart_policy="never")


def increasing(usage: list[UsageReceiptMessage], gpus: int) -> bool:
    """One share's receipts as sent: each newer than the last, never more GPU-seconds more than its
    GPUs x the seconds since the last (a receipt sent again repeats the one before it)."""
    usage = [b for a, b in itertools.pairwise(usage) if b != a] if usage else []
    return len({r.epoch for r in usage}) <= 1 and all(
        0 <= b.gpu_seconds - a.gpu_seconds <= gpus * (b.through - a.through) and b.through > a.through
        for a, b in itertools.pairwise(usage)
    )


def reports(gateway: FakeGateway, lease: str, session: int | None = None) -> list[UsageReceiptMessage]:
    """The usage receipts of `lease` the gateway received (in a session, or in all)."""
    return [m for m in gateway.messages(UsageReceiptMessage, session) if m.lease == lease]


async def test_a_dispatched_job_runs_and_its_usage_is_signed_reported_and_acked(tmp_path) -> None:
    node, lease = Keypair(), str(Pubkey.new_unique())
    async with FakeGateway() as gateway, running_agent(gateway, tmp_path, node) as agent:
        hello = await gateway.wait_for(lambda: gateway.messages(Hello), what="hello")
        assert hello[0].node_key == str(node.pubkey()) and hello[0].inventory.simulated
        await gateway.wait_for(lambda: gateway.messages(Heartbeat), what="a heartbeat")

        await gateway.send(Dispatch(lease=lease, gpus=2, job=job(steps=30)))
        status = await gateway.wait_for(lambda: final_status(gateway, lease), what="the job's end")
        assert (status.state, status.exit_code) == ("succeeded", 0)
        lines = [m.line for m in gateway.messages(JobLog) if m.stream == "stdout"]
        assert lines[0] == "fresh start" and lines[-1] == "done" and len(lines) == 32

        # usage: every receipt signed by the node key, cumulative, never over wall time x GPUs
        # (the share stays held, so receipts go on after the job: wait for those of its 3 s or more on 2 GPUs)
        await gateway.wait_for(
            lambda: (
                agent.journal.unacked() == []
                and max((r.gpu_seconds for r in reports(gateway, lease)), default=0) >= 2 * 2
            ),
            what="acks",
        )
        usage = reports(gateway, lease)
        assert increasing(usage, 2) and all(r.verify(node.pubkey()) for r in usage)
        assert usage[0].epoch == 1 and 0 < usage[0].gpu_seconds
        # simulated GPUs are marked in every message the worker sent
        assert gateway.received and all(m.simulated for _, m in gateway.received)
        assert [m.of for m in gateway.messages(Ack)] == ["dispatch"]


async def test_bad_coordinator_input_is_refused_and_reported_and_the_agent_keeps_running(tmp_path) -> None:
    lease = str(Pubkey.new_unique())
    async with FakeGateway() as gateway, running_agent(gateway, tmp_path) as agent:
        await gateway.wait_for(lambda: gateway.messages(Heartbeat), what="a heartbeat")

        def dispatch(job: dict) -> str:
            return json.dumps({"type": "dispatch", "lease": lease, "gpus": 1, "job": job})

        bad = [
            "this is not json",
            '{"type": "reboot", "now": true}',
            f'{{"type": "dispatch", "lease": "{lease}", "gpus": 1, '
            '"job": {"command": ["x"], "env": {"CUDA_VISIBLE_DEVICES": "0"}}}',
            f'{{"type": "dispatch", "lease": "{lease}", "gpus": 1, "job": {{"command": []}}}}',
            f'{{"type": "dispatch", "lease": "{lease}", "gpus": 1, '
            '"job": {"command": ["x"], "checkpoint_dir": "../../etc"}}',
            '{"type": "cancel", "lease": "not-a-key"}',
            '{"type": "cancel", "lease": ' + "[" * 5000 + "]" * 5000 + "}",  # nested past any parser's stack
        ]
        for raw in bad:
            await gateway.send(raw)
        await gateway.send(Dispatch(lease=lease, gpus=3, job=job(steps=1)))  # valid, but only 2 GPUs here
        await gateway.send(Cancel(lease=str(Pubkey.new_unique())))  # no such job
        await gateway.send(UsageAck(lease=lease, epoch=1, gpu_seconds=7, through=7))  # never sent

        refusals = await gateway.wait_for(lambda: len(gateway.messages(Ack)) >= 10, what="10 refusals")
        refusals = gateway.messages(Ack)
        errors = [(a.of, a.error) for a in refusals]
        assert errors[0][0] == "?" and errors[0][1].startswith("not JSON")
        assert errors[1] == ("reboot", "unknown coordinator message type 'reboot'")
        assert errors[2][0] == "dispatch" and "CUDA_VISIBLE_DEVICES is set by the worker" in errors[2][1]
        assert errors[3][0] == "dispatch" and "a job needs a command or an image" in errors[3][1]
        assert errors[4][0] == "dispatch" and "job.checkpoint_dir" in errors[4][1]
        assert errors[5][0] == "cancel" and "not a base58 public key" in errors[5][1]
        assert errors[6][0] == "?" and errors[6][1].startswith("not JSON: recursion limit exceeded")
        assert errors[7] == ("dispatch", "3 GPUs asked for, 2 free and healthy on this node")
        assert errors[8] == ("cancel", "this node holds no share of this lease")
        assert errors[9] == ("ack", "no usage receipt of 7 GPU-seconds through 7 (epoch 1) was sent by this node")
        assert agent.shares == {} and not (tmp_path / "jobs").exists()  # nothing was started

        # still the same session, still serving: a good dispatch runs
        await gateway.send(Dispatch(lease=lease, gpus=1, job=job(steps=2)))
        status = await gateway.wait_for(lambda: final_status(gateway, lease), what="the job's end")
        assert status.state == "succeeded" and gateway.sessions == 1


async def test_a_dropped_connection_is_resumed_without_losing_or_repeating_anything(tmp_path) -> None:
    node, lease = Keypair(), str(Pubkey.new_unique())
    async with FakeGateway() as gateway, running_agent(gateway, tmp_path, node) as agent:
        await gateway.wait_for(lambda: gateway.messages(Heartbeat), what="a heartbeat")
        gateway.ack_usage = lambda report: False  # nothing acked in the first session
        await gateway.send(Dispatch(lease=lease, gpus=1, job=job(steps=60)))
        await gateway.wait_for(lambda: len(reports(gateway, lease, 1)) >= 2, what="two receipts")
        gateway.ack_usage = lambda report: True
        await gateway.drop()

        await gateway.wait_for(lambda: gateway.sessions == 2 or None, what="the second session")
        # a repeated dispatch after the reconnect does not start a second copy
        await gateway.send(Dispatch(lease=lease, gpus=1, job=job(steps=60)))
        await gateway.wait_for(lambda: final_status(gateway, lease), timeout=90, what="the job's end")
        await gateway.wait_for(lambda: agent.journal.unacked() == [] or None, what="every report acked")

        lines = [m.line for m in gateway.recorded_of(JobLog) if m.stream == "stdout"]
        assert lines.count("fresh start") == 1 and lines.count("done") == 1
        assert [line for line in lines if line.startswith("step")] == [f"step {i}" for i in range(1, 61)]
        assert agent.session.unconfirmed == 0
        first = reports(gateway, lease, 1)
        second = reports(gateway, lease, 2)
        # the newest receipt of session 1 (unacked, and superseding those before it) came again first
        # in session 2, or a newer one already; then the new ones, all counting on from it
        assert (second[0].through, second[0].gpu_seconds) >= (first[-1].through, first[-1].gpu_seconds)
        assert increasing(first, 1) and increasing(first[-1:] + second, 1)
        assert gateway.messages(Ack, 2)[-1].of == "dispatch"


async def test_job_status_and_logs_the_coordinator_could_not_record_are_sent_again_once_and_in_order(tmp_path) -> None:
    lease = str(Pubkey.new_unique())
    async with FakeGateway() as gateway, running_agent(gateway, tmp_path) as agent:
        await gateway.wait_for(lambda: gateway.messages(Heartbeat), what="a heartbeat")
        await gateway.send(Dispatch(lease=lease, gpus=1, job=job(steps=40, step_seconds=0.05)))
        await gateway.wait_for(lambda: len(gateway.recorded_of(JobLog)) >= 5 or None, what="lines recorded")
        gateway.can_record = lambda message: False  # the coordinator's database goes down mid-job
        await gateway.wait_for(lambda: agent.session.holding or None, what="the agent holding")
        await gateway.wait_for(lambda: final_status(gateway, lease), timeout=60, what="the job's end sent")
        assert final_status(gateway, lease) not in gateway.recorded  # sent, not recorded
        gateway.can_record = lambda message: True  # the database is back
        await gateway.wait_for(lambda: agent.session.unconfirmed == 0 or None, what="everything recorded")

        assert gateway.sessions == 1  # held, never reconnected
        lines = [m.line for m in gateway.recorded_of(JobLog) if m.stream == "stdout"]
        assert lines == ["fresh start", *(f"step {i}" for i in range(1, 41)), "done"]  # all, once, in order
        states = [m.state for m in gateway.recorded_of(JobStatus)]
        assert states[-1] == "succeeded" and states.count("succeeded") == 1
        assert [m.n for m in gateway.recorded] == sorted(m.n for m in gateway.recorded)
        # the control: more was sent than recorded (the messages held up were sent again)
        assert len(gateway.messages(JobLog)) > len(gateway.recorded_of(JobLog))


async def test_a_share_assigned_again_stops_the_old_job_before_the_new_one_starts(tmp_path) -> None:
    lease = str(Pubkey.new_unique())
    old, new = (str(Keypair().sign_message(bytes([i]))) for i in range(2))  # two assignment transactions
    spec = job(steps=1000, step_seconds=0.05)

    def stepping(epoch: str):
        return lambda: (
            sum(m.line.startswith("step ") and m.epoch == epoch for m in gateway.messages(JobLog)) >= 3 or None
        )

    async with FakeGateway() as gateway, running_agent(gateway, tmp_path):
        await gateway.send(Dispatch(lease=lease, gpus=1, job=spec, epoch=old))
        await gateway.wait_for(stepping(old), what="the job stepping under the first assignment")
        # The share moved away and back while this node kept running (it never heard of the move).
        await gateway.send(Dispatch(lease=lease, gpus=1, job=spec, epoch=new))
        await gateway.wait_for(stepping(new), what="the job stepping under the new assignment")

        statuses = [(m.epoch, m.state) for m in gateway.messages(JobStatus)]
        ended_old = statuses.index((old, "cancelled"))
        assert all(epoch == old for epoch, _ in statuses[: ended_old + 1]), (
            "the old copy stopped before the new started"
        )
        assert {epoch for epoch, _ in statuses[ended_old + 1 :]} == {new}
        lines = [(m.epoch, m.line) for m in gateway.messages(JobLog)]
        last_old = max(i for i, (epoch, _) in enumerate(lines) if epoch == old)
        assert all(epoch == new for epoch, _ in lines[last_old + 1 :])  # never interleaved: one copy at a time
        # the control: the same assignment dispatched again is a repeat, never a second copy
        await gateway.send(Dispatch(lease=lease, gpus=1, job=spec, epoch=new))
        await gateway.wait_for(lambda: len(gateway.messages(Ack)) >= 3 or None, what="the repeat acknowledged")
        await asyncio.sleep(0.5)
        assert [m.epoch for m in gateway.messages(JobStatus) if m.state == "cancelled"] == [old]


async def test_reports_the_coordinator_could_not_record_are_sent_again_in_the_same_session(tmp_path) -> None:
    lease = str(Pubkey.new_unique())
    async with FakeGateway() as gateway, running_agent(gateway, tmp_path, usage_resend_seconds=0.5) as agent:
        await gateway.wait_for(lambda: gateway.messages(Heartbeat), what="a heartbeat")
        gateway.ack_usage = lambda report: False  # its database is down: nothing recorded, nothing acked
        await gateway.send(Dispatch(lease=lease, gpus=1, job=job(steps=100)))
        await gateway.wait_for(lambda: reports(gateway, lease, 1), what="a receipt")
        await gateway.wait_for(
            lambda: any(a == b for a, b in itertools.pairwise(reports(gateway, lease, 1))) or None,
            what="a receipt sent again",
        )
        gateway.ack_usage = lambda report: True  # the database is back
        await gateway.wait_for(lambda: agent.journal.unacked() == [] or None, what="every receipt acked")
        assert gateway.sessions == 1  # held, never reconnected
        # the control: an acknowledged receipt is not sent again
        sent = len(reports(gateway, lease, 1))
        acked = set(map(str, reports(gateway, lease, 1)))
        await asyncio.sleep(1.5)
        assert not set(map(str, reports(gateway, lease, 1)[sent:])) & acked


async def test_a_held_share_is_billed_after_its_job_exits_and_the_next_job_runs_on_the_same_gpus(tmp_path) -> None:
    lease = str(Pubkey.new_unique())
    gpus = "import os; print(os.environ['CUDA_VISIBLE_DEVICES'])"
    async with FakeGateway() as gateway, running_agent(gateway, tmp_path) as agent:
        await gateway.wait_for(lambda: gateway.messages(Heartbeat), what="a heartbeat")
        await gateway.send(Dispatch(lease=lease, gpus=1, job=script(f"import time; {gpus}; time.sleep(1.5)")))
        await gateway.wait_for(
            lambda: any(m.state == "running" for m in gateway.messages(JobStatus)), what="job 1 running"
        )
        # a new job while one runs is refused, and the running one goes on
        await gateway.send(Dispatch(lease=lease, gpus=1, job=script("print('too early')"), job_number=2))
        refusal = await gateway.wait_for(lambda: [a for a in gateway.messages(Ack) if a.error], what="the refusal")
        assert refusal[0].error == "job 1 of this lease still runs on this node; job 2 may start once it has ended"
        first = await gateway.wait_for(lambda: final_status(gateway, lease), what="job 1's end")
        assert first.state == "succeeded" and not [m for m in gateway.messages(JobStatus) if m.job_number == 2]

        # nothing runs now, yet the share is held and billed: every second after the job's end
        ended = len(reports(gateway, lease))

        def idle() -> list[UsageReceiptMessage]:
            return reports(gateway, lease)[max(ended - 1, 0) :]

        await gateway.wait_for(lambda: len(idle()) >= 3, what="receipts with no job running")
        assert all(
            b.gpu_seconds - a.gpu_seconds == b.through - a.through for a, b in itertools.pairwise(idle())
        )  # every second x 1 GPU
        beat = gateway.messages(Heartbeat)[-1]
        assert beat.held == [lease] and beat.running == []

        # after job 1 ended, job 2 starts on the GPUs the lease holds; billing never breaks
        await gateway.send(Dispatch(lease=lease, gpus=1, job=script(f"print('second job'); {gpus}"), job_number=2))
        second = await gateway.wait_for(lambda: final_status(gateway, lease, 2), what="job 2's end")
        assert second.state == "succeeded"
        lines = {n: [m.line for m in gateway.messages(JobLog) if m.job_number == n] for n in (1, 2)}
        assert lines[2][0] == "second job" and lines[2][1] == lines[1][0]  # the same GPU
        assert lines[1][0] in [g.uuid for g in agent.inventory.gpus]
        billed = len(reports(gateway, lease))
        await gateway.wait_for(lambda: len(reports(gateway, lease)) >= billed + 2, what="billing after job 2 too")
        assert increasing(reports(gateway, lease), 1)


async def test_a_repeated_dispatch_never_starts_a_second_copy_even_after_the_job_ended(tmp_path) -> None:
    lease = str(Pubkey.new_unique())
    async with FakeGateway() as gateway, running_agent(gateway, tmp_path):
        await gateway.wait_for(lambda: gateway.messages(Heartbeat), what="a heartbeat")
        first = Dispatch(lease=lease, gpus=2, job=script("import time; print('job 1 ran'); time.sleep(1)"))
        await gateway.send(first)
        await gateway.send(first)  # while it runs
        await gateway.wait_for(lambda: final_status(gateway, lease), what="job 1's end")
        await gateway.send(first)  # after it ended
        await gateway.send(Dispatch(lease=lease, gpus=2, job=script("print('job 2 ran')"), job_number=2))
        await gateway.wait_for(lambda: final_status(gateway, lease, 2), what="job 2's end")
        await gateway.send(first)  # an older job than the current one
        acks = await gateway.wait_for(lambda: len(gateway.messages(Ack)) >= 5 and gateway.messages(Ack), what="5 acks")
        assert [(a.of, a.error) for a in acks] == [("dispatch", None)] * 4 + [
            ("dispatch", "job 1 is older than job 2, which this node has for this lease")
        ]
        lines = [m.line for m in gateway.messages(JobLog)]
        assert lines.count("job 1 ran") == 1 and lines.count("job 2 ran") == 1  # the control: a new number runs


async def test_billing_stops_at_the_cancel_or_at_the_lease_end_which_a_top_up_moves(tmp_path) -> None:
    cancelled, ending = str(Pubkey.new_unique()), str(Pubkey.new_unique())
    async with FakeGateway() as gateway, running_agent(gateway, tmp_path) as agent:
        await gateway.wait_for(lambda: gateway.messages(Heartbeat), what="a heartbeat")
        now = int(time.time())
        await gateway.send(Dispatch(lease=cancelled, gpus=1, job=job(steps=100000)))
        await gateway.send(Dispatch(lease=ending, gpus=1, job=job(steps=100000), ends_at=now + 3))
        await gateway.send(LeaseEnd(lease=ending, ends_at=now + 5))  # a top-up
        await gateway.wait_for(lambda: reports(gateway, cancelled), what="a receipt of the cancelled lease")
        await gateway.send(Cancel(lease=cancelled, reason="the lease was closed"))
        await gateway.wait_for(lambda: final_status(gateway, cancelled), what="the cancelled job's end")
        cancel_ack = next(i for i, (_, m) in enumerate(gateway.received) if isinstance(m, Ack) and m.of == "cancel")
        await asyncio.sleep(max(0.0, now + 8 - time.time()))  # past the end; no cancel for `ending`

        # the cancelled lease: its final receipt came before the cancel's ack, nothing after it; its GPU
        # is free and no longer held
        late = [
            m for _, m in gateway.received[cancel_ack:] if isinstance(m, UsageReceiptMessage) and m.lease == cancelled
        ]
        assert late == [] and reports(gateway, cancelled)[-1].final
        assert cancelled not in gateway.messages(Heartbeat)[-1].held and cancelled not in agent.shares
        # the ended lease: billed up to its moved end exactly, then no more, though its share is still held
        usage = reports(gateway, ending)
        assert increasing(usage, 1) and usage[-1].through == now + 5 and not usage[-1].final
        assert usage[-1].gpu_seconds >= 4  # the whole seconds from the dispatch to the end
        assert ending in gateway.messages(Heartbeat)[-1].held
        await gateway.send(LeaseEnd(lease=cancelled, ends_at=now + 100))
        refusal = await gateway.wait_for(
            lambda: [a for a in gateway.messages(Ack) if a.of == "lease_end" and a.error],
            what="the refusal of a lease_end for a share not held",
        )
        assert refusal[0].error == "this node holds no share of this lease"
        assert [a.error for a in gateway.messages(Ack) if a.of == "lease_end"] == [None, refusal[0].error]


async def test_the_next_leases_share_waits_for_the_closed_leases_job_to_stop_on_the_same_gpus(tmp_path) -> None:
    """The coordinator frees a lease's nodes at its close, once the worker acknowledged the cancel: the
    next lease's dispatch onto the same GPUs may come while the old job still stops. It is neither
    refused (the node would be judged unable) nor started beside the old job: it waits for it."""
    first, second = str(Pubkey.new_unique()), str(Pubkey.new_unique())
    slow_stop = script(  # takes a second to stop once told (saving its state, say)
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *_: (time.sleep(1.0), print('stopped', flush=True), sys.exit(0)))\n"
        "print('up', flush=True)\n"
        "while True: time.sleep(0.05)\n"
    )
    async with FakeGateway() as gateway, running_agent(gateway, tmp_path) as agent:
        await gateway.send(Dispatch(lease=first, gpus=2, job=slow_stop))
        await gateway.wait_for(
            lambda: any(m.lease == first and m.line == "up" for m in gateway.messages(JobLog)) or None,
            what="the first lease's job up",
        )
        await gateway.wait_for(lambda: reports(gateway, first), what="a receipt of the first lease")
        await gateway.send(Cancel(lease=first, reason="the lease was closed"))
        await gateway.send(Dispatch(lease=second, gpus=2, job=job(steps=100000)))  # its GPUs, at once
        await gateway.wait_for(
            lambda: any(m.lease == second and m.state == "running" for m in gateway.messages(JobStatus)) or None,
            what="the second lease's job running",
        )
        assert [a.error for a in gateway.messages(Ack) if a.lease == second] == [None]  # taken, not refused
        events = [
            (m.lease, getattr(m, "state", None) or getattr(m, "line", None))
            for _, m in gateway.received
            if isinstance(m, JobStatus | JobLog)
        ]
        first_end = events.index((first, "cancelled"))
        assert (first, "stopped") in events[:first_end]
        assert all(lease == first for lease, _ in events[:first_end]), "the first job stopped before the second began"
        # billing: the second share from its take, after the first share's final receipt
        receipts = [(i, m) for i, (_, m) in enumerate(gateway.received) if isinstance(m, UsageReceiptMessage)]
        last_first = max(i for i, m in receipts if m.lease == first)
        assert [m.final for i, m in receipts if m.lease == first][-1]
        assert all(i > last_first for i, m in receipts if m.lease == second)
        assert set(agent.shares) == {second} and not agent.waiting

        # the control: a lease that needs GPUs no share releases is refused as before
        third = str(Pubkey.new_unique())
        await gateway.send(Dispatch(lease=third, gpus=1, job=job(steps=10)))
        refusal = await gateway.wait_for(
            lambda: [a for a in gateway.messages(Ack) if a.lease == third and a.error], what="the refusal"
        )
        assert refusal[0].unable and third not in agent.waiting


async def test_a_dispatch_of_an_ended_job_holds_the_share_without_running_it(tmp_path) -> None:
    lease = str(Pubkey.new_unique())
    async with FakeGateway() as gateway, running_agent(gateway, tmp_path) as agent:
        await gateway.wait_for(lambda: gateway.messages(Heartbeat), what="a heartbeat")
        # e.g. the agent restarted after job 1 ended: the coordinator gives the share back, not the job
        await gateway.send(Dispatch(lease=lease, gpus=2, job=script("print('ran again')"), job_ended=True))
        await gateway.wait_for(lambda: len(reports(gateway, lease)) >= 2, what="two receipts")
        assert gateway.messages(JobStatus) == [] and gateway.messages(JobLog) == []
        assert agent.shares[lease].runner is None and gateway.messages(Heartbeat)[-1].held == [lease]
        # the control: the lease's next job does run there
        await gateway.send(Dispatch(lease=lease, gpus=2, job=script("print('job 2')"), job_number=2))
        await gateway.wait_for(lambda: final_status(gateway, lease, 2), what="job 2's end")
        assert [m.line for m in gateway.messages(JobLog)] == ["job 2"]


class FailingGpus(SimulatedGpus):
    """Simulated GPUs whose first one can be made to fail (as NVML reports a lost GPU)."""

    lost = False

    def sample(self):
        samples = super().sample()
        if self.lost:
            samples[0] = samples[0].model_copy(update={"healthy": False, "problems": ["NVML: GpuIsLost"]})
        return samples


async def test_an_unhealthy_gpu_shows_in_heartbeats_and_takes_no_job(tmp_path) -> None:
    node, lease = Keypair(), str(Pubkey.new_unique())
    gpus = FailingGpus.parse("H100:2:80", str(node.pubkey()))
    async with FakeGateway() as gateway:
        agent = Agent(
            WorkerSettings(gateway_url=gateway.url, state_dir=tmp_path, meter_tick_seconds=0.2, **HOST_JOBS_SETTINGS),
            node,
            gpus,
        )
        task = asyncio.create_task(agent.run())
        try:
            await gateway.wait_for(lambda: gateway.messages(Heartbeat), what="a heartbeat")
            gpus.lost = True
            beat = await gateway.wait_for(
                lambda: next((b for b in gateway.messages(Heartbeat) if not b.healthy), None),
                what="an unhealthy heartbeat",
            )
            assert beat.gpus[0].problems == ["NVML: GpuIsLost"] and beat.gpus[1].healthy
            await gateway.send(Dispatch(lease=lease, gpus=2, job=job(steps=1)))
            ack = await gateway.wait_for(lambda: gateway.messages(Ack), what="the refusal")
            assert ack[0].error == "2 GPUs asked for, 1 free and healthy on this node"
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            agent.close()


async def test_one_state_directory_serves_one_agent(tmp_path) -> None:
    async with FakeGateway() as gateway, running_agent(gateway, tmp_path):
        with pytest.raises(StateDirBusy, match="another worker agent is running with this state directory"):
            node = Keypair()
            Agent(
                WorkerSettings(gateway_url=gateway.url, state_dir=tmp_path, **HOST_JOBS_SETTINGS),
                node,
                SimulatedGpus.parse("H100:1:80", str(node.pubkey())),
            )


async def test_a_refused_session_is_retried_with_backoff_until_admitted(tmp_path) -> None:
    async with FakeGateway() as gateway:
        gateway.refuse_next = 3  # e.g. the node is registered on chain a moment later
        async with running_agent(gateway, tmp_path) as agent:
            await gateway.wait_for(lambda: gateway.messages(Heartbeat), what="a heartbeat")
            assert gateway.refused == 3 and gateway.sessions == 1 and agent.session.sessions == 1


def test_backoff_grows_with_full_jitter_up_to_its_cap_and_resets() -> None:
    import random

    backoff = Backoff(base=0.5, cap=4.0, rng=random.Random(7))
    delays = [backoff.next_delay() for _ in range(12)]
    bounds = [min(4.0, 0.5 * 2**i) for i in range(12)]
    assert all(0 <= d <= b for d, b in zip(delays, bounds, strict=True))
    assert max(delays[6:]) > 2.0  # it does grow (seeded: deterministic)
    backoff.reset()
    assert backoff.next_delay() <= 0.5


async def test_a_job_waits_for_its_secrets_sealed_to_this_node_and_then_reads_them(tmp_path) -> None:
    node, lease, waiting = Keypair(), str(Pubkey.new_unique()), str(Pubkey.new_unique())
    code = "import hashlib, os; print('token', hashlib.sha256(os.environ['TOKEN'].encode()).hexdigest(), flush=True)"
    spec = script(code).model_copy(update={"secrets": ["TOKEN"]})
    async with FakeGateway() as gateway, running_agent(gateway, tmp_path, node) as agent:
        await gateway.wait_for(lambda: gateway.messages(Heartbeat), what="a heartbeat")

        def states(of: str) -> list[tuple[str, str]]:
            return [(m.state, m.detail) for m in gateway.messages(JobStatus) if m.lease == of]

        await gateway.send(Dispatch(lease=lease, gpus=1, job=spec))  # no secrets yet: it waits, holding the GPU
        await gateway.wait_for(lambda: states(lease), what="the job waiting")
        assert states(lease) == [("waiting_secrets", "waiting for the client's secrets sealed to this node (TOKEN)")]
        await gateway.wait_for(lambda: reports(gateway, lease), what="the held share billed")
        # sealed to another node: it does not open here, and the job still waits
        await gateway.send(Dispatch(lease=lease, gpus=1, job=spec, secrets={"TOKEN": seal(Keypair().pubkey(), "x")}))
        await gateway.wait_for(lambda: len(states(lease)) == 2, what="the wrong secret refused")
        assert states(lease)[1][0] == "waiting_secrets" and "does not open with this node's key" in states(lease)[1][1]
        # control: sealed to this node, the job starts and reads it
        await gateway.send(Dispatch(lease=lease, gpus=1, job=spec, secrets={"TOKEN": seal(node.pubkey(), "hunter2")}))
        status = await gateway.wait_for(lambda: final_status(gateway, lease), what="the job's end")
        assert (status.state, status.exit_code) == ("succeeded", 0)
        assert [m.line for m in gateway.messages(JobLog) if m.lease == lease and m.stream == "stdout"] == [
            f"token {hashlib.sha256(b'hunter2').hexdigest()}"
        ]
        assert "hunter2" not in agent.shares[lease].dispatch.model_dump_json()  # the share keeps the sealed one

        # a share released while its job waits: the job ends there as cancelled
        await gateway.send(Dispatch(lease=waiting, gpus=1, job=spec))
        await gateway.wait_for(lambda: states(waiting), what="the other job waiting")
        await gateway.send(Cancel(lease=waiting, reason="the share moved"))
        status = await gateway.wait_for(lambda: final_status(gateway, waiting), what="the waiting job's end")
        assert status.state == "cancelled" and "before the client's secrets came" in status.detail
        assert waiting not in agent.shares
