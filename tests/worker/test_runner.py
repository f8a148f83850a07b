"""The job runner with real subprocesses: contract env, checkpoint and restart, time limit,
cancel (SIGTERM, then SIGKILL after the grace period), refusals."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from pydantic import BaseModel
from solders.pubkey import Pubkey

from gpunet.protocol import RAY_AUTH_TOKEN, ClusterPeer, Dispatch, JobLog, JobSpec, JobStatus, PortRange
from tests.worker.sandboxes import host_jobs
from worker import runner as runner_module
from worker.runner import JobDirs, JobRunner
from worker.sandbox import Sandbox

JOB = str(Path(__file__).parent / "jobs" / "steps.py")
LEASE = str(Pubkey.new_unique())
UUIDS = ["GPU-sim-a", "GPU-sim-b"]


class Recorder:
    def __init__(self) -> None:
        self.messages: list[BaseModel] = []

    def send(self, message: BaseModel) -> None:
        self.messages.append(message)

    def lines(self, stream: str = "stdout") -> list[str]:
        return [m.line for m in self.messages if isinstance(m, JobLog) and m.stream == stream]

    def states(self) -> list[str]:
        return [m.state for m in self.messages if isinstance(m, JobStatus)]


def runner(
    tmp_path: Path, rec: Recorder, env: dict[str, str], *, grace: float = 10.0, job_number: int = 1, **spec: object
) -> JobRunner:
    dispatch = Dispatch(
        lease=LEASE,
        gpus=2,
        job=JobSpec(command=[sys.executable, JOB], env=env, **spec),
        job_number=job_number,
        rank=1,
        world_size=2,
        peers=["10.0.0.1:29500", "10.0.0.2:29500"],
    )
    return JobRunner(
        dispatch,
        UUIDS,
        JobDirs.of(tmp_path / "state", dispatch),
        simulated=True,
        send=rec.send,
        grace_seconds=grace,
        restart_delay=0.1,
        sandbox=host_jobs(tmp_path / "state"),
    )


async def wait_for_line(rec: Recorder, prefix: str) -> None:
    for _ in range(600):
        if any(line.startswith(prefix) for line in rec.lines()):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"no line starting with {prefix!r}: {rec.lines()}")


async def test_a_failed_job_restarts_from_its_checkpoint_with_the_contract_env(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("SECRET_OF_THE_AGENT", "hunter2")
    rec = Recorder()
    final = await runner(tmp_path, rec, {"STEPS": "5", "FAIL_AT": "2", "MODE": "train"}).run()
    assert (final.state, final.exit_code, final.restarts) == ("succeeded", 0, 1)
    assert rec.lines() == ["fresh start", "step 1", "step 2", "resumed from 2", "step 3", "step 4", "step 5", "done"]
    assert rec.lines("stderr")[0] == (
        f"env CUDA_VISIBLE_DEVICES=GPU-sim-a,GPU-sim-b GPUNET_LEASE={LEASE} RANK=1 "
        "WORLD_SIZE=2 MASTER_ADDR=10.0.0.1 MASTER_PORT=29500 MODE=train SECRET_OF_THE_AGENT=-"
    )
    assert "failing on purpose" in rec.lines("stderr")
    assert rec.states() == ["starting", "running", "restarting", "running", "succeeded"]
    checkpoint = tmp_path / "state" / "jobs" / LEASE / "checkpoints" / "step"
    assert checkpoint.read_text() == "5"

    # the agent restarted (a new runner for the same lease): the job resumes from its checkpoint
    rec = Recorder()
    final = await runner(tmp_path, rec, {"STEPS": "7"}).run()
    assert final.state == "succeeded" and rec.lines()[:2] == ["resumed from 5", "step 6"]


async def test_every_status_and_log_line_names_the_job_it_belongs_to(tmp_path) -> None:
    rec = Recorder()
    final = await runner(tmp_path, rec, {"STEPS": "2"}, job_number=3).run()
    assert final.state == "succeeded" and final.job_number == 3
    assert rec.messages and {m.job_number for m in rec.messages} == {3}


async def test_a_job_runs_under_an_agent_with_the_service_s_umask(tmp_path) -> None:
    """gpunet-worker.service runs the agent with UMask=0077 (its journal and keys its own): the job's
    sandbox is still made with the permissions it asks for, so the job's uid reaches its own dirs."""
    rec = Recorder()
    umask = os.umask(0o077)
    try:
        final = await runner(tmp_path, rec, {"STEPS": "2"}).run()
    finally:
        os.umask(umask)
    assert (final.state, rec.lines()[-1:]) == ("succeeded", ["done"]), (final, rec.lines("stderr"))


async def test_restart_policy_never_reports_the_failure(tmp_path) -> None:
    rec = Recorder()
    final = await runner(tmp_path, rec, {"STEPS": "5", "FAIL_AT": "1"}, restart_policy="never").run()
    assert (final.state, final.exit_code, final.restarts, final.detail) == ("failed", 1, 0, "exited with 1")


async def test_restarts_stop_at_max_restarts(tmp_path) -> None:
    rec = Recorder()
    spec = JobSpec(command=[sys.executable, "-c", "import sys; sys.exit(3)"], max_restarts=2)
    dispatch = Dispatch(lease=LEASE, gpus=1, job=spec)
    final = await JobRunner(
        dispatch,
        UUIDS[:1],
        JobDirs.of(tmp_path, dispatch),
        simulated=False,
        send=rec.send,
        restart_delay=0.05,
        sandbox=host_jobs(),
    ).run()
    assert (final.state, final.exit_code, final.restarts) == ("failed", 3, 2)
    assert rec.states().count("running") == 3


async def test_the_time_limit_stops_the_job(tmp_path) -> None:
    rec = Recorder()
    final = await runner(tmp_path, rec, {"STEPS": "100000", "STEP_SECONDS": "0.05"}, time_limit_seconds=1).run()
    assert (final.state, final.exit_code) == ("timed_out", -signal.SIGTERM)
    assert rec.states().count("running") == 1


async def test_cancel_sends_sigterm(tmp_path) -> None:
    rec = Recorder()
    job = runner(tmp_path, rec, {"STEPS": "100000"})
    task = asyncio.create_task(job.run())
    await wait_for_line(rec, "step 1")
    job.cancel("lease closed")
    final = await task
    assert (final.state, final.exit_code, final.detail) == ("cancelled", -signal.SIGTERM, "lease closed")
    assert rec.states().count("running") == 1


async def test_cancel_kills_a_job_that_ignores_sigterm_after_the_grace_period(tmp_path) -> None:
    rec = Recorder()
    job = runner(tmp_path, rec, {"STEPS": "100000", "IGNORE_TERM": "1"}, grace=0.5)
    task = asyncio.create_task(job.run())
    await wait_for_line(rec, "step 1")
    job.cancel("lease closed")
    final = await task
    assert (final.state, final.exit_code) == ("cancelled", -signal.SIGKILL)
    assert "ignoring SIGTERM" in rec.lines()


async def test_an_image_without_docker_or_podman_is_refused(tmp_path) -> None:
    rec = Recorder()
    dispatch = Dispatch(lease=LEASE, gpus=1, job=JobSpec(image="pytorch/pytorch:2.4.0"))
    final = await JobRunner(
        dispatch, UUIDS[:1], JobDirs.of(tmp_path, dispatch), simulated=True, send=rec.send, sandbox=host_jobs()
    ).run()
    assert final.state == "refused" and "no working container engine (podman or docker)" in final.detail
    assert "running" not in rec.states() and not (tmp_path / "jobs").exists()


async def test_a_container_job_gets_the_same_contract(tmp_path) -> None:
    """The argv handed to the engine (the engine itself is not run here: no daemon in CI)."""
    dispatch = Dispatch(
        lease=LEASE,
        gpus=2,
        job=JobSpec(image="pytorch/pytorch:2.4.0", command=["python", "train.py"], env={"MODE": "train"}),
    )
    job = JobRunner(
        dispatch,
        UUIDS,
        JobDirs.of(tmp_path, dispatch),
        simulated=False,
        send=print,
        sandbox=Sandbox(engine=("/usr/bin/docker",)),
    )
    argv = job._argv()
    assert argv[:3] == ["/usr/bin/docker", "run", "--rm"]
    assert ["--gpus", '"device=GPU-sim-a,GPU-sim-b"'] == argv[argv.index("--gpus") : argv.index("--gpus") + 2]
    assert f"{tmp_path}/jobs/{LEASE}/checkpoints:/checkpoint:rw" in argv
    assert "GPUNET_CHECKPOINT_DIR=/checkpoint" in argv and "MODE=train" in argv
    assert argv[-3:] == ["pytorch/pytorch:2.4.0", "python", "train.py"]


async def test_a_command_that_cannot_start_fails_clearly(tmp_path) -> None:
    rec = Recorder()
    dispatch = Dispatch(lease=LEASE, gpus=1, job=JobSpec(command=["/nonexistent/train"], restart_policy="never"))
    final = await JobRunner(
        dispatch, UUIDS[:1], JobDirs.of(tmp_path, dispatch), simulated=True, send=rec.send, sandbox=host_jobs()
    ).run()
    assert final.state == "failed" and "cannot start '/nonexistent/train'" in final.detail


async def test_a_container_job_s_secrets_pass_by_name_never_in_the_engine_s_argv(tmp_path) -> None:
    """A secret (opened by the agent into the job's env) reaches the engine through its environment:
    argv is readable by every user of the machine."""
    spec = JobSpec(image="pytorch/pytorch:2.4.0", env={"MODE": "train"}, secrets=["TOKEN"])
    sealed = Dispatch(lease=LEASE, gpus=1, job=spec)
    dispatch = sealed.model_copy(update={"job": spec.model_copy(update={"env": {"MODE": "train", "TOKEN": "hunter2"}})})
    job = JobRunner(
        dispatch,
        UUIDS[:1],
        JobDirs.of(tmp_path, dispatch),
        simulated=True,
        send=print,
        sandbox=Sandbox(engine=("/usr/bin/podman",)),
    )
    argv = job._argv()
    assert "TOKEN" in argv and not any("hunter2" in arg for arg in argv)
    assert "MODE=train" in argv  # control: a plain value goes as before
    assert job._env()["TOKEN"] == "hunter2" and "MODE" not in job._env()


def _ray_runner(tmp_path: Path, rec: Recorder, ports: str) -> JobRunner:
    dispatch = Dispatch(lease=LEASE, gpus=2, job=JobSpec(ray=True, secrets=[RAY_AUTH_TOKEN]))
    return JobRunner(
        dispatch,
        UUIDS,
        JobDirs.of(tmp_path / "state", dispatch),
        simulated=True,
        send=rec.send,
        sandbox=host_jobs(tmp_path / "state"),
        reach=ClusterPeer(host="127.0.0.2", ports=PortRange.parse(ports)),
    )


async def test_a_worker_without_ray_refuses_a_ray_job_saying_how_to_install_it(tmp_path, monkeypatch) -> None:
    rec = Recorder()
    monkeypatch.setattr(runner_module, "ray_installed", lambda: False)  # the package's presence, at its boundary
    final = await _ray_runner(tmp_path, rec, "31000-31039").run()
    assert final.state == "refused" and "pip install 'gpunet[ray]'" in final.detail, final
    assert rec.states() == ["refused"]


async def test_a_ray_job_on_too_few_cluster_ports_is_refused(tmp_path) -> None:
    rec = Recorder()
    final = await _ray_runner(tmp_path, rec, "31000-31009").run()
    assert final.state == "refused"
    assert "a Ray node needs at least 20 cluster ports, this node opens 31000-31009" in final.detail, final


async def test_a_ray_job_where_the_network_policy_gives_none_is_refused(tmp_path) -> None:
    rec = Recorder()
    job = _ray_runner(tmp_path, rec, "31000-31039")
    job.sandbox = host_jobs(tmp_path / "state", network="none")
    final = await job.run()
    assert final.state == "refused" and "network policy (none) gives this job no network" in final.detail, final
