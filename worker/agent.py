"""The worker agent: GPUs, journal, jobs and meters, tied to one coordinator session."""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict
from solders.keypair import Keypair

from gpunet.protocol import (
    PROTOCOL_VERSION,
    Ack,
    Cancel,
    Checkpoint,
    Dispatch,
    Error,
    Heartbeat,
    Hello,
    UsageAck,
    Welcome,
)
from worker.checkpoints import CheckpointTooLarge, fingerprint, snapshot
from worker.gpus import GpuBackend
from worker.journal import Journal
from worker.metering import LeaseMeter, recover_open_periods
from worker.runner import JobDirs, JobRunner, find_container_engine
from worker.session import Backoff, Session

__all__ = ["Agent", "StateDirBusy", "WorkerSettings"]

log = logging.getLogger("gpunet.worker")


class WorkerSettings(BaseSettings):
    """The agent's configuration; every field also reads GPUNET_WORKER_<NAME> from the environment."""

    model_config = SettingsConfigDict(env_prefix="GPUNET_WORKER_")

    gateway_url: str = "ws://127.0.0.1:8910/worker"
    state_dir: Path = Path("~/.local/state/gpunet-worker").expanduser()
    usage_period_seconds: int = 60  # until the coordinator's welcome says otherwise
    meter_tick_seconds: float = 1.0  # how often metering progress is journaled (the most a crash can lose)
    stop_grace_seconds: float = 10.0  # SIGTERM -> SIGKILL
    reconnect_base_seconds: float = 0.5
    reconnect_cap_seconds: float = 30.0

    @field_validator("gateway_url")
    @classmethod
    def _websocket_url(cls, url: str) -> str:
        if not url.startswith(("ws://", "wss://")):
            raise ValueError(f"the gateway URL must start with ws:// or wss://, got {url!r}")
        return url


class StateDirBusy(RuntimeError):
    """Another agent holds this state directory: two writers would meter the same leases twice."""


def _lock_state_dir(state_dir: Path) -> int:
    state_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(state_dir / "agent.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released by the kernel when the agent dies
    except BlockingIOError:
        os.close(fd)
        raise StateDirBusy(f"{state_dir}: another worker agent is running with this state directory") from None
    return fd


@dataclass
class _Job:
    runner: JobRunner
    meter: LeaseMeter
    gpu_uuids: list[str]
    task: asyncio.Task[Any] | None = field(default=None)
    checkpoint_seen: tuple = ()  # fingerprint of the checkpoint last sent to the coordinator


class Agent:
    def __init__(self, settings: WorkerSettings, node: Keypair, gpus: GpuBackend) -> None:
        self.settings, self.node, self.gpus = settings, node, gpus
        self.simulated = gpus.simulated
        self.inventory = gpus.inventory()
        self._lock = _lock_state_dir(settings.state_dir)
        try:
            self.journal = Journal(settings.state_dir / "usage.jsonl")
        except BaseException:
            os.close(self._lock)
            raise
        self.jobs: dict[str, _Job] = {}
        self.usage_period_seconds = settings.usage_period_seconds
        self.engine = find_container_engine()
        self.session = Session(settings.gateway_url, node, simulated=self.simulated, hello=self.hello,
                               heartbeat=self.heartbeat, on_welcome=self.on_welcome, handle=self.handle,
                               backoff=Backoff(settings.reconnect_base_seconds, settings.reconnect_cap_seconds))
        # periods a crash left open are closed at their last journaled instant, before anything else
        recovered = recover_open_periods(self.journal, node, self.simulated)
        if recovered:
            log.info("usage.recovered reports=%d", len(recovered))

    async def run(self) -> None:
        """Until cancelled: the session (reconnecting forever) and the metering clock."""
        meter = asyncio.create_task(self._meter_clock())
        try:
            await self.session.run_forever()
        finally:
            meter.cancel()
            await self.stop_jobs("agent stopping")
            self.close()

    def close(self) -> None:
        """Closes the journal and releases the state directory (idempotent)."""
        self.journal.close()
        if self._lock >= 0:
            os.close(self._lock)
            self._lock = -1

    async def stop_jobs(self, reason: str) -> None:
        for job in list(self.jobs.values()):
            job.runner.cancel(reason)
        tasks = [job.task for job in self.jobs.values() if job.task]
        await asyncio.gather(*tasks, return_exceptions=True)

    # --- what the session asks for

    def hello(self) -> Hello:
        return Hello(simulated=self.simulated, version=PROTOCOL_VERSION, node_key=str(self.node.pubkey()),
                     inventory=self.inventory)

    def heartbeat(self) -> Heartbeat:
        samples = self.gpus.sample()
        return Heartbeat(simulated=self.simulated, healthy=all(s.healthy for s in samples), gpus=samples,
                         running=[lease for lease, job in self.jobs.items() if job.runner.state == "running"])

    def on_welcome(self, welcome: Welcome) -> list[BaseModel]:
        self.usage_period_seconds = welcome.usage_period_seconds
        return list(self.journal.unacked())

    async def handle(self, message: Any) -> None:
        if isinstance(message, Dispatch):
            self._dispatch(message)
        elif isinstance(message, Cancel):
            self._cancel(message)
        elif isinstance(message, UsageAck):
            ok = self.journal.record_ack(message.lease, message.seq)
            if not ok:
                self._refuse("ack", message.lease, f"no usage report {message.seq} of this lease was sent by this node")
        elif isinstance(message, Error):
            log.warning("coordinator.error code=%s message=%s", message.code, message.message)

    # --- jobs

    def _refuse(self, of: str, lease: str | None, error: str) -> None:
        log.warning("coordinator.refused of=%s lease=%s error=%s", of, lease, error)
        self.session.send(Ack(simulated=self.simulated, of=of, lease=lease, error=error))

    def _dispatch(self, d: Dispatch) -> None:
        if d.lease in self.jobs:  # a repeated dispatch (e.g. after a reconnect) never starts a second copy
            self.session.send(Ack(simulated=self.simulated, of="dispatch", lease=d.lease))
            return
        samples = {s.uuid: s for s in self.gpus.sample()}
        busy = {uuid for job in self.jobs.values() for uuid in job.gpu_uuids}
        free = [g.uuid for g in self.inventory.gpus if g.uuid not in busy and samples.get(g.uuid, None) is not None
                and samples[g.uuid].healthy]
        if d.gpus > len(free):
            self._refuse("dispatch", d.lease, f"{d.gpus} GPUs asked for, {len(free)} free and healthy on this node")
            return
        if d.job.image is not None and self.engine is None:
            self._refuse("dispatch", d.lease, f"the job names image {d.job.image!r} but neither docker nor podman "
                                              "is installed on this node")
            return
        uuids = free[: d.gpus]
        meter = LeaseMeter(self.journal, self.node, d.lease, d.gpus, self.usage_period_seconds, self.simulated)

        def on_run(running: bool, t: float) -> None:
            for report in (meter.start(t) if running else meter.stop(t)):
                self.session.send(report)

        runner = JobRunner(d, uuids, JobDirs.of(self.settings.state_dir, d), simulated=self.simulated,
                           send=self.session.send, on_run=on_run, grace_seconds=self.settings.stop_grace_seconds,
                           container_engine=self.engine)
        job = self.jobs[d.lease] = _Job(runner, meter, uuids)
        job.task = asyncio.create_task(self._run_job(d.lease, job))
        self.session.send(Ack(simulated=self.simulated, of="dispatch", lease=d.lease))
        log.info("job.dispatched lease=%s gpus=%s", d.lease, ",".join(uuids))

    async def _run_job(self, lease: str, job: _Job) -> None:
        try:
            final = await job.runner.run()
            log.info("job.ended lease=%s state=%s exit_code=%s", lease, final.state, final.exit_code)
        finally:
            for report in job.meter.finish(time.time()):
                self.session.send(report)
            self._send_checkpoint(lease, job)  # the last one, written just before the job ended
            del self.jobs[lease]

    def _cancel(self, c: Cancel) -> None:
        job = self.jobs.get(c.lease)
        if job is None:
            self._refuse("cancel", c.lease, "no job of this lease is running on this node")
            return
        job.runner.cancel(c.reason)
        self.session.send(Ack(simulated=self.simulated, of="cancel", lease=c.lease))

    async def _meter_clock(self) -> None:
        while True:
            await asyncio.sleep(self.settings.meter_tick_seconds)
            now = time.time()
            for lease, job in list(self.jobs.items()):
                for report in job.meter.tick(now):
                    self.session.send(report)
                self._send_checkpoint(lease, job)

    def _send_checkpoint(self, lease: str, job: _Job) -> None:
        """Sends the job's checkpoint directory when it changed, so another node can resume it."""
        seen = fingerprint(job.runner.dirs.checkpoint)
        if seen == job.checkpoint_seen:
            return
        job.checkpoint_seen = seen
        try:
            files = snapshot(job.runner.dirs.checkpoint)
        except CheckpointTooLarge as e:
            log.warning("checkpoint.kept_local lease=%s reason=%s", lease, e)
            return
        if files:
            self.session.send(Checkpoint(simulated=self.simulated, lease=lease, files=files))
