"""The worker agent against the coordinator's real gateway (coordinator.gateway): both sides of
gpunet.protocol agree — admission by node key and challenge, heartbeats, a dispatched job's
statuses and logs, usage receipts checked, recorded and acked; an unregistered node refused, told
why, and stopped (exit 13) if it stays so; a follower replica's gateway sends the worker to the leader's."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import subprocess
import sys
from pathlib import Path

from solders.keypair import Keypair
from solders.pubkey import Pubkey

from coordinator.gateway import Gateway
from gpunet.exits import Exit
from gpunet.keys import create_keypair_file
from gpunet.protocol import Ack, Checkpoint, Dispatch, Heartbeat, Hello, JobLog, JobSpec, JobStatus, UsageReceiptMessage
from tests.worker.recording_coordinator import Coordinator, until
from tests.worker.sandboxes import HOST_JOBS_ENV, HOST_JOBS_SETTINGS
from worker.agent import Agent, WorkerSettings
from worker.simulate import SimulatedGpus

JOB = str(Path(__file__).parent / "jobs" / "steps.py")


@contextlib.asynccontextmanager
async def agent_on(gateway: Gateway | str, node: Keypair, state_dir: Path):
    settings = WorkerSettings(
        gateway_url=gateway if isinstance(gateway, str) else gateway.url,
        state_dir=state_dir,
        meter_tick_seconds=0.2,
        reconnect_base_seconds=0.1,
        reconnect_cap_seconds=0.5,
        **HOST_JOBS_SETTINGS,
    )
    agent = Agent(settings, node, SimulatedGpus.parse("H100:2:80", str(node.pubkey())))
    task = asyncio.create_task(agent.run())
    try:
        yield agent
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        agent.close()


async def test_the_worker_and_the_coordinators_gateway_speak_the_same_protocol(tmp_path) -> None:
    node, lease = Keypair(), str(Pubkey.new_unique())
    coordinator = Coordinator({node.pubkey()})
    gateway = await Gateway(coordinator, heartbeat_seconds=0.3, usage_period_seconds=1).start()
    try:
        async with agent_on(gateway, node, tmp_path) as agent:
            await until(lambda: coordinator.of(Heartbeat), "a heartbeat")
            assert gateway.online(node.pubkey()) and coordinator.of(Hello)[0].simulated
            job = JobSpec(command=[sys.executable, JOB], env={"STEPS": "25", "STEP_SECONDS": "0.1"})
            await gateway.send(node.pubkey(), Dispatch(lease=lease, gpus=2, job=job))
            await until(lambda: any(s.state == "succeeded" for s in coordinator.of(JobStatus)), "the job's end")
            await until(
                lambda: coordinator.of(UsageReceiptMessage) and not agent.journal.unacked(), "every receipt acked"
            )
            usage = coordinator.of(UsageReceiptMessage)
            assert all(
                b.gpu_seconds > a.gpu_seconds and b.through > a.through for a, b in itertools.pairwise(usage)
            ) and all(r.verify(node.pubkey()) for r in usage)
            assert [line.line for line in coordinator.of(JobLog)][-1] == "done"
            # the job's last checkpoint reaches the coordinator, so another node could resume it
            await until(
                lambda: any(f.content() == b"25" for c in coordinator.of(Checkpoint) for f in c.files),
                "the last checkpoint",
            )
            assert [a.of for a in coordinator.of(Ack)] == ["dispatch"]
            assert gateway.refused == {}
    finally:
        await gateway.stop()


async def test_an_unregistered_node_is_refused_and_keeps_trying(tmp_path) -> None:
    node = Keypair()
    coordinator = Coordinator(set())
    gateway = await Gateway(coordinator).start()
    try:
        async with agent_on(gateway, node, tmp_path) as agent:
            await until(lambda: sum(gateway.refused.values()) >= 2, "two refused sessions")
            assert set(gateway.refused) == {4404} and not gateway.online(node.pubkey())
            assert agent.session.refusal == f"node {node.pubkey()} has no Node account"  # /readyz says it
            coordinator.registered.add(node.pubkey())  # registered on chain meanwhile, within the grace
            await until(lambda: gateway.online(node.pubkey()), "admission")
            assert agent.session.refusal is None
    finally:
        await gateway.stop()


async def test_a_node_that_stays_unregistered_stops_its_worker_saying_why(tmp_path) -> None:
    # A deregistered node's worker knocked forever, logging only "unauthorised": now it logs the
    # coordinator's reason and what to do, and after GPUNET_WORKER_NOT_REGISTERED_EXIT_SECONDS of
    # refusals exits 13, saying the same. The control: a registered node's worker beside it runs on.
    gone, kept = tmp_path / "gone.json", tmp_path / "kept.json"
    gone_key, kept_key = create_keypair_file(gone), create_keypair_file(kept)
    gateway = await Gateway(Coordinator({kept_key.pubkey()})).start()
    env = {
        **os.environ,
        **HOST_JOBS_ENV,
        "GPUNET_WORKER_RECONNECT_BASE_SECONDS": "0.1",
        "GPUNET_WORKER_RECONNECT_CAP_SECONDS": "0.3",
        "GPUNET_WORKER_NOT_REGISTERED_EXIT_SECONDS": "2",
        "GPUNET_LOG_FORMAT": "json",
    }

    def worker(key: Path, name: str) -> subprocess.Popen[str]:
        argv = [str(Path(sys.executable).with_name("gpunet")), "worker", "run", "-k", str(key)]
        argv += ["--gateway", gateway.url, "--simulate-gpus", "H100:1:80", "--state-dir", str(tmp_path / name)]
        return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    procs = [worker(gone, "gone"), worker(kept, "kept")]
    try:
        await until(lambda: procs[0].poll() is not None, "the unregistered worker's exit")
        out = procs[0].communicate()[0]
        assert procs[0].returncode == Exit.NOT_REGISTERED, out
        said = f"refuses node {gone_key.pubkey()}: node {gone_key.pubkey()} has no Node account"
        assert '"event": "session.not_registered"' in out and said in out, out
        flat = " ".join(out.split())  # the error's last line is wrapped to the terminal's width
        assert "gpunet node register" in out and "stopped after 2 s of refusals" in flat, out
        assert '"unauthorised"' not in out, out
        assert set(gateway.refused) == {4404} and gateway.online(kept_key.pubkey())
        await asyncio.sleep(1.0)
        assert procs[1].poll() is None and gateway.online(kept_key.pubkey())  # past the grace, still on
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
            proc.communicate(timeout=30)
        await gateway.stop()


async def test_a_follower_sends_the_worker_to_the_leaders_gateway_and_a_leader_that_steps_down_too(tmp_path) -> None:
    node = Keypair()
    coordinator = Coordinator({node.pubkey()})
    first, second = await Gateway(coordinator).start(), await Gateway(coordinator).start()
    leader = second

    async def leader_url() -> str:
        return leader.url

    for gateway in (first, second):
        gateway.leading = lambda gateway=gateway: gateway is leader
        gateway.leader_url = leader_url
    try:
        async with agent_on(f"{first.url},{second.url}", node, tmp_path):  # the follower first
            await until(lambda: second.online(node.pubkey()), "the worker on the leader's gateway")
            assert set(first.refused) == {4421} and not first.online(node.pubkey())  # told where to go
            assert second.refused == {}  # the control: the leader admits it
            leader = first  # the lead changes hands: the old leader sends its sessions to the new one
            await second.redirect_all(first.url)
            await until(lambda: first.online(node.pubkey()), "the worker on the new leader's gateway")
            assert not second.online(node.pubkey())
    finally:
        await first.stop()
        await second.stop()
