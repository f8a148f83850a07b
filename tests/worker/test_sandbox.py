"""The job sandbox with the real tools (no mocks): container jobs through rootful podman (runc) in a
small Debian image with python3 (scripts/sandbox-setup builds it; these tests skip, saying why, where
it could not), and host jobs in bubblewrap. Each attack is paired with the honest control."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pydantic import BaseModel
from solders.pubkey import Pubkey

from gpunet.exits import Exit
from gpunet.keys import create_keypair_file
from gpunet.localnet import free_ports
from gpunet.protocol import Dispatch, JobLog, JobSpec, JobStatus
from tests.worker.outside import INPUT_SERVER, INTERNET, other_machine
from tests.worker.sandboxes import IMAGE, JOBS, agent_started
from worker.runner import JobDirs, JobRunner
from worker.sandbox import Sandbox, SandboxUnavailable, host_job_env, host_job_uid, nvidia_device_nodes

GPUNET = str(Path(sys.executable).parent / "gpunet")

# What the job tries, as one Python program (python3 in the image, the agent's Python on the host).
# It prints one JSON line: each attempt's outcome ("ok" or the error's errno name).
PROBE = r"""
import errno, json, os, socket, sys
args = json.loads(sys.argv[1])
out = {}
def attempt(name, f):
    try:
        f()
        out[name] = "ok"
    except OSError as e:
        out[name] = errno.errorcode.get(e.errno, type(e).__name__)
def write(path):
    with open(path, "w") as f:
        f.write("x")
attempt("write_work", lambda: write(os.path.join(os.environ["GPUNET_WORKDIR"], "from-job")))
attempt("write_checkpoint", lambda: write(os.path.join(os.environ["GPUNET_CHECKPOINT_DIR"], "ckpt")))
for i, path in enumerate(args["write"]):
    attempt(f"write_{i}", lambda: write(path))
for i, path in enumerate(args["read"]):
    attempt(f"read_{i}", lambda: open(path).read())
attempt("hostname", lambda: write("/proc/sys/kernel/hostname"))
status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines())
out["CapEff"] = status["CapEff"].strip()
out["CapBnd"] = status["CapBnd"].strip()
out["NoNewPrivs"] = status["NoNewPrivs"].strip()
out["pids"] = len([p for p in os.listdir("/proc") if p.isdigit()])
for name in ("pids/pids.max", "pids.max", "memory/memory.limit_in_bytes", "memory.max"):
    if os.path.exists("/sys/fs/cgroup/" + name):
        out[name.rsplit("/", 1)[-1].split(".")[0]] = open("/sys/fs/cgroup/" + name).read().strip()
if args.get("connect"):
    attempt("connect", lambda: socket.create_connection(tuple(args["connect"]), timeout=3).close())
out["uid"], out["gid"], out["groups"] = os.getuid(), os.getgid(), os.getgroups()
if args.get("forks"):  # how many children it may have at once (each sleeps until the probe ends)
    import signal, subprocess
    children = []
    try:
        for _ in range(args["forks"]):
            children.append(subprocess.Popen(["sleep", "30"]))
    except OSError as e:
        out["fork_error"] = errno.errorcode.get(e.errno, type(e).__name__)
    out["forks"] = len(children)
    for child in children:
        child.kill()
        child.wait()
if args.get("file_bytes"):  # one file of that many bytes (SIGXFSZ ignored: the write fails instead)
    import signal
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    def big():
        with open(os.path.join(os.environ["GPUNET_WORKDIR"], "big"), "wb") as f:
            f.write(b"x" * args["file_bytes"])
    attempt("big_file", big)
print(json.dumps(out), flush=True)
"""


class Recorder:
    def __init__(self) -> None:
        self.messages: list[BaseModel] = []

    def send(self, message: BaseModel) -> None:
        self.messages.append(message)

    def lines(self, stream: str = "stdout") -> list[str]:
        return [m.line for m in self.messages if isinstance(m, JobLog) and m.stream == stream]

    def states(self) -> list[str]:
        return [m.state for m in self.messages if isinstance(m, JobStatus)]


def _state(tmp_path: Path) -> Path:
    """A worker state directory with what a job must never see: the journal and a node key."""
    state = tmp_path / "state"
    state.mkdir()
    (state / "usage.jsonl").write_text('{"secret": "usage"}\n')
    create_keypair_file(state / "node.json")
    return state


async def _run(sandbox: Sandbox, state: Path, spec: JobSpec, *, peers: list[str] | None = None) -> tuple[dict, str]:
    dispatch = Dispatch(lease=str(Pubkey.new_unique()), gpus=1, job=spec, peers=peers or [])
    rec = Recorder()
    final = await JobRunner(
        dispatch, ["GPU-sim-a"], JobDirs.of(state, dispatch), simulated=True, send=rec.send, sandbox=sandbox
    ).run()
    assert final.state == "succeeded", (final, rec.lines("stderr"))
    return json.loads(rec.lines()[-1]), dispatch.lease


def _probe(python: str, **args: object) -> list[str]:
    return [python, "-c", PROBE, json.dumps(args)]


async def test_a_container_job_runs_with_every_restriction_in_force(tmp_path, podman) -> None:
    state = _state(tmp_path)
    # no image: the supplier's default image (the test image)
    spec = JobSpec(
        command=_probe(
            "python3",
            write=["/escape", "/etc/escape", str(state / "escape")],
            read=[str(state / "node.json"), str(state / "usage.jsonl"), "/work/from-job"],
        )
    )
    out, lease = await _run(podman, state, spec)
    # the honest part: its own two directories, on the host where the agent keeps them
    assert out["write_work"] == out["write_checkpoint"] == "ok" and out["read_2"] == "ok"
    assert (state / "jobs" / lease / "work" / "from-job").read_text() == "x"
    assert (state / "jobs" / lease / "checkpoints" / "ckpt").read_text() == "x"
    # the rest: a read-only root, nothing of the worker's state directory, no capabilities
    assert out["write_0"] == out["write_1"] == "EROFS" and out["write_2"] == "ENOENT"
    assert out["read_0"] == out["read_1"] == "ENOENT"
    assert not (state / "escape").exists()
    assert out["hostname"] in ("EROFS", "EACCES", "EPERM")
    assert int(out["CapEff"], 16) == 0 and int(out["CapBnd"], 16) == 0 and out["NoNewPrivs"] == "1"
    # the supplier's limits, seen from inside
    assert out["pids"] == "64" and out["memory"] in (str(256 * 2**20), "268435456")


async def test_an_image_the_node_lacks_is_pulled_first_and_a_failed_pull_fails_the_job(tmp_path, podman) -> None:
    state = _state(tmp_path)
    # No registry answers on the other machine (an HTTP server, no registry): the pull fails, and
    # says so in the job's status and log.
    with other_machine(INPUT_SERVER) as port:
        image = f"{INTERNET}:{port}/gpunet-absent:1"
        missing = Dispatch(lease=str(Pubkey.new_unique()), gpus=1, job=JobSpec(image=image, command=["true"]))
        rec = Recorder()
        final = await JobRunner(
            missing, ["GPU-sim-a"], JobDirs.of(state, missing), simulated=True, send=rec.send, sandbox=podman
        ).run()
    assert rec.states() == ["pulling", "failed"], rec.states()
    assert f"pulling image '{image}' failed" in final.detail
    assert any(line.startswith("[gpunet: pull] ") for line in rec.lines("stderr"))
    # The control: an image the node has runs at once, without a pull.
    here = Dispatch(lease=str(Pubkey.new_unique()), gpus=1, job=JobSpec(image=IMAGE, command=["true"]))
    rec = Recorder()
    final = await JobRunner(
        here, ["GPU-sim-a"], JobDirs.of(state, here), simulated=True, send=rec.send, sandbox=podman
    ).run()
    assert final.state == "succeeded"
    assert "pulling" not in rec.states()


async def test_a_job_s_image_is_not_pulled_from_the_machine_itself_or_the_lan(
    tmp_path, podman, counting_listener
) -> None:
    """The engine pulls on the host's network: a registry the job's image names must be public, and
    its refusal reads the same whether a port is open there or not."""
    open_port, accepted = counting_listener
    with socket.create_server(("127.0.0.1", 0)) as closed:
        closed_port = closed.getsockname()[1]
    details, state = [], _state(tmp_path)
    for registry in (f"127.0.0.1:{open_port}", f"127.0.0.1:{closed_port}", "localhost", "10.213.0.1:5000"):
        image = f"{registry}/x:1"
        dispatch = Dispatch(lease=str(Pubkey.new_unique()), gpus=1, job=JobSpec(image=image, command=["true"]))
        rec = Recorder()
        final = await JobRunner(
            dispatch, ["GPU-sim-a"], JobDirs.of(state, dispatch), simulated=True,
            send=rec.send, sandbox=podman,
        ).run()  # fmt: skip
        assert final.state == "failed" and "images come from public registries" in final.detail, final
        assert "pulling" not in rec.states()
        details.append(final.detail.replace(registry, "REGISTRY"))
    assert details[0] == details[1], details  # open or closed: the same words
    assert accepted == []  # and the machine's port was never connected to


@pytest.mark.parametrize(
    ("policy", "peers", "reaches"),
    [
        ("none", None, False),
        ("egress", None, False),  # not the machine itself (test_egress.py: it reaches the internet)
        ("cluster", None, False),  # a single-node lease gets no network under "cluster"
        ("cluster", ["10.0.0.1:29500", "10.0.0.2:29500"], True),  # the control: the host's network
    ],
)
async def test_a_container_job_gets_the_network_the_supplier_allows(
    tmp_path, podman, listener, policy, peers, reaches
) -> None:
    _, port = listener
    sandbox = dataclasses.replace(podman, network=policy)
    spec = JobSpec(
        image=IMAGE, command=_probe("python3", write=[], read=[], connect=["host.containers.internal", port])
    )
    out, _ = await _run(sandbox, _state(tmp_path), spec, peers=peers)
    assert (out["connect"] == "ok") is reaches, out


async def test_the_nodes_of_a_cluster_container_job_rendezvous_at_the_advertised_address(tmp_path, podman) -> None:
    """A cluster's containers run on the host's network: rank 0 listens on its node's advertised
    address and first cluster port (127.0.0.2 here, which no bridged container could be reached at),
    rank 1 connects there (tests/worker/jobs/rendezvous.py, given to the image's python3)."""
    state = _state(tmp_path)
    (port,) = free_ports(1)
    peers = [f"127.0.0.2:{port}", f"127.0.0.3:{port}"]
    spec = JobSpec(image=IMAGE, command=["python3", "-c", (JOBS / "rendezvous.py").read_text()])
    recorders = [Recorder(), Recorder()]
    finals = await asyncio.gather(
        *(
            JobRunner(
                # two leases: the container is named after its lease, and here both nodes are one host
                d := Dispatch(lease=str(Pubkey.new_unique()), gpus=1, job=spec, rank=rank, world_size=2, peers=peers),
                ["GPU-sim-a"],
                JobDirs.of(state / f"node{rank}", d),
                simulated=True,
                send=recorders[rank].send,
                sandbox=podman,
            ).run()
            for rank in (0, 1)
        )
    )
    assert [f.state for f in finals] == ["succeeded", "succeeded"], [r.lines("stderr") for r in recorders]
    assert [r.lines("stdout")[-1] for r in recorders] == [f"met ranks 0,1 at 127.0.0.2:{port}"] * 2


STUBBORN = """
import signal, sys, time
if sys.argv[1] == "ignore":
    signal.signal(signal.SIGTERM, lambda *_: print("ignoring SIGTERM", flush=True))
print("ready", flush=True)
time.sleep(1000)
"""


@pytest.mark.parametrize(("term", "exit_code"), [("default", -signal.SIGTERM), ("ignore", -signal.SIGKILL)])
async def test_a_cancelled_container_job_gets_sigterm_then_is_killed_after_the_grace(
    tmp_path, podman, term, exit_code
) -> None:
    dispatch = Dispatch(lease=str(Pubkey.new_unique()), gpus=1, job=JobSpec(command=["python3", "-c", STUBBORN, term]))
    rec = Recorder()
    job = JobRunner(
        dispatch,
        ["GPU-sim-a"],
        JobDirs.of(tmp_path, dispatch),
        simulated=True,
        send=rec.send,
        sandbox=podman,
        grace_seconds=1,
    )
    task = asyncio.create_task(job.run())
    for _ in range(600):
        if "ready" in rec.lines():
            break
        await asyncio.sleep(0.05)
    job.cancel("lease closed")
    final = await asyncio.wait_for(task, 60)
    assert (final.state, final.exit_code) == ("cancelled", exit_code), rec.lines("stderr")
    assert ("ignoring SIGTERM" in rec.lines()) is (term == "ignore")
    left = subprocess.run(
        ["podman", "ps", "-a", "--filter", f"name={job._container}", "--format", "{{.Names}}"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert left.stdout.strip() == "", "the container outlived its job"


def test_a_container_left_by_a_dead_agent_is_removed_when_the_worker_starts_again(tmp_path, podman) -> None:
    ours = dataclasses.replace(podman, label=str(tmp_path / "state"))
    other = dataclasses.replace(podman, label=str(tmp_path / "another-worker's"))
    dirs = JobDirs(tmp_path / "work", tmp_path / "checkpoints")
    for d in (dirs.workdir, dirs.checkpoint):
        d.mkdir()
    names = {sandbox.label: f"gpunet-test-{os.getpid()}-{i}" for i, sandbox in enumerate((ours, other))}
    for sandbox in (ours, other):
        argv = sandbox.container_argv(
            IMAGE, ["sleep", "300"], dirs, name=names[sandbox.label], env={}, gpu_uuids=[], network=False
        )
        run = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            running = ["podman", "container", "inspect", "--format", "{{.State.Running}}", names[sandbox.label]]
            deadline = time.monotonic() + 60
            while subprocess.run(running, capture_output=True, text=True).stdout.strip() != "true":
                assert time.monotonic() < deadline, "the container did not start"
                time.sleep(0.1)
        finally:
            run.kill()  # the agent died, and its `podman run` with it (PR_SET_PDEATHSIG)
            run.wait()
    try:
        alive = ["podman", "ps", "--format", "{{.Names}}"]
        running = subprocess.run(alive, capture_output=True, text=True).stdout.split()
        assert set(names.values()) <= set(running)  # both outlived their `run`
        assert ours.remove_leftovers() == 1
        left = subprocess.run(["podman", "ps", "--all", "--format", "{{.Names}}"], capture_output=True, text=True)
        assert names[ours.label] not in left.stdout.split()
        assert names[other.label] in left.stdout.split()  # the control: another worker's stays
    finally:
        for name in names.values():
            subprocess.run(["podman", "rm", "--force", "--ignore", "--time", "0", name], capture_output=True)


def test_an_engine_that_cannot_run_a_container_stops_the_worker(tmp_path, podman) -> None:
    """podman answers `info` with a runtime that cannot start anything (crun in some containers):
    every container job would exit 126 while its lease pays. The worker runs one at its start."""
    broken = tmp_path / "runc"
    broken.write_text("#!/bin/sh\necho 'runc: cannot start a container here' >&2\nexit 1\n")
    broken.chmod(0o755)
    with pytest.raises(SandboxUnavailable, match=r"cannot run a container .*cannot start a container here"):
        Sandbox.configure(engine="podman", runtime=str(broken), network="none")
    create_keypair_file(tmp_path / "node.json")
    env = {**os.environ, "GPUNET_WORKER_CONTAINER_ENGINE": "podman", "GPUNET_WORKER_NETWORK": "none"}
    argv = [GPUNET, "worker", "run", "-k", str(tmp_path / "node.json"), "--simulate-gpus", "H100:1:80"]
    argv += ["--state-dir", str(tmp_path / "state")]
    done = subprocess.run(
        argv, capture_output=True, text=True, env={**env, "GPUNET_WORKER_CONTAINER_RUNTIME": str(broken)}, check=False
    )
    assert done.returncode == Exit.NO_SANDBOX, done.stderr
    for advice in ("GPUNET_WORKER_CONTAINER_RUNTIME=runc", "GPUNET_WORKER_CONTAINER_ENGINE=none"):
        assert advice in " ".join(done.stderr.split()), done.stderr
    assert not (tmp_path / "state").exists()
    # the control: with a runtime that works it starts, and waits for its gateway
    with agent_started(argv, {**env, "GPUNET_WORKER_CONTAINER_RUNTIME": "runc"}, tmp_path / "agent.log"):
        pass


async def test_a_container_job_on_simulated_gpus_sees_them_as_a_host_job_does(tmp_path, podman) -> None:
    state = _state(tmp_path)
    tmp_path.chmod(0o755)
    show = ["import json, os", "print(json.dumps({'gpus': os.environ.get('CUDA_VISIBLE_DEVICES')}))"]
    for sandbox, python in ((podman, "python3"), (_host_jobs(tmp_path, state), sys.executable)):
        image = IMAGE if sandbox is podman else None
        out, _ = await _run(sandbox, state, JobSpec(image=image, command=[python, "-c", "; ".join(show)]))
        assert out == {"gpus": "GPU-sim-a"}, (sandbox.engine, out)


def _host_jobs(tmp_path: Path, state: Path, network: str = "egress") -> Sandbox:
    # tmp_path is readable by the job, the state directory inside it is not (hidden, as the agent does)
    return Sandbox.configure(
        engine="none",
        allow_host_jobs=True,
        host_paths=[tmp_path, JOBS],
        hidden=[state],
        network=network,  # type: ignore[arg-type]
    )


async def test_a_host_job_runs_in_bubblewrap_without_the_state_dir(tmp_path) -> None:
    state = _state(tmp_path)
    tmp_path.chmod(0o755)  # what the supplier lets host jobs read, readable by others (they are not root)
    (tmp_path / "readable").write_text("supplier's file")
    spec = JobSpec(
        command=_probe(
            sys.executable,
            write=[str(tmp_path / "escape"), "/etc/escape", str(state / "escape")],
            read=[str(state / "node.json"), str(state / "usage.jsonl"), str(tmp_path / "readable")],
        )
    )
    out, lease = await _run(_host_jobs(tmp_path, state), state, spec)
    # the control: its own directories, and what the supplier let it read
    assert out["write_work"] == out["write_checkpoint"] == "ok" and out["read_2"] == "ok"
    assert (state / "jobs" / lease / "work" / "from-job").read_text() == "x"
    # the state directory is hidden, everything else read-only; no capabilities; its own pids
    assert out["read_0"] == out["read_1"] == "ENOENT", out
    assert out["write_0"] == out["write_1"] == out["write_2"] == "EROFS", out
    assert out["hostname"] in ("EROFS", "EACCES", "EPERM")
    assert not (tmp_path / "escape").exists() and not (state / "escape").exists()
    assert int(out["CapEff"], 16) == 0 and out["NoNewPrivs"] == "1"
    assert out["pids"] <= 3  # bubblewrap's init and the job: not the machine's processes


async def test_a_root_workers_host_job_runs_as_a_uid_of_its_own_within_its_limits(tmp_path) -> None:
    """The worker runs as root (the egress filter needs it): its host jobs do not."""
    assert os.geteuid() == 0, "a root worker's test"
    state = _state(tmp_path)
    tmp_path.chmod(0o755)
    sandbox = dataclasses.replace(_host_jobs(tmp_path, state), pids_limit=16, file_bytes=1 << 20)
    dispatch = Dispatch(lease=str(Pubkey.new_unique()), gpus=1, job=JobSpec(command=["true"]))
    dirs = JobDirs.of(state, dispatch)
    (dirs.checkpoint / "sub").mkdir(parents=True)  # as a restore leaves it: the agent's (root's)
    (dirs.checkpoint / "sub" / "restored").write_text("step 7")
    spec = JobSpec(
        command=_probe(
            sys.executable,
            write=[os.path.join(dirs.checkpoint, "sub", "restored"), "/dev/shm/from-job"],
            read=["/etc/shadow", os.path.join(dirs.checkpoint, "sub", "restored")],
            forks=40,
            file_bytes=(1 << 20) + 1,
        )
    )
    rec = Recorder()
    final = await JobRunner(
        dispatch.model_copy(update={"job": spec}), ["GPU-sim-a"], dirs, simulated=True, send=rec.send, sandbox=sandbox
    ).run()
    assert final.state == "succeeded", (final, rec.lines("stderr"))
    out = json.loads(rec.lines()[-1])
    uid = host_job_uid(dispatch.lease)
    assert out["uid"] == out["gid"] == uid != 0 and out["groups"] in ([], [uid]), out
    assert out["read_0"] == "EACCES", out  # root's files are not its own
    # the control: its own directories, what the agent put there included, and the files it makes are its uid's
    assert out["write_work"] == out["write_checkpoint"] == out["write_0"] == out["read_1"] == "ok", out
    assert out["write_1"] == "ok", out  # its own /dev/shm (Ray's object store, NCCL, DataLoader workers)
    assert (dirs.workdir / "from-job").stat().st_uid == uid and (dirs.checkpoint / "ckpt").stat().st_uid == uid
    # its limits: processes (its uid's, bubblewrap's own not counted), and the size of a file
    assert out["fork_error"] == "EAGAIN" and 0 < out["forks"] < 16, out
    assert out["big_file"] == "EFBIG" and (dirs.workdir / "big").stat().st_size == 1 << 20, out


def test_a_ray_nodes_own_tmp_keeps_what_lies_under_tmp_in_sight(tmp_path) -> None:
    """A Ray node gets a /tmp of its own: a worker (its venv, the Ray it runs) or a state directory
    under the machine's /tmp stays where it was, and the job (not root) may write its /tmp."""
    tmp_path.chmod(0o755)
    tool = tmp_path / "venv" / "bin" / "ray"
    tool.parent.mkdir(parents=True)
    tool.write_text("#!/bin/sh\necho ray here > /tmp/ray.sock && cat /tmp/ray.sock && pwd\n")
    tool.chmod(0o755)
    state = _state(tmp_path)
    dispatch = Dispatch(lease=str(Pubkey.new_unique()), gpus=1, job=JobSpec(command=["x"]))
    dirs = JobDirs.of(state, dispatch)
    for d in (dirs.workdir, dirs.checkpoint):
        d.mkdir(parents=True)
        os.chown(d, host_job_uid(dispatch.lease), host_job_uid(dispatch.lease))
    sandbox = Sandbox.configure(engine="none", allow_host_jobs=True, host_paths=[tmp_path / "venv"], hidden=[state])
    argv = sandbox.host_argv(
        [str(tool)], dirs, network=False, gpu_uuids=[], private_tmp=True, uid=host_job_uid(dispatch.lease)
    )
    env = host_job_env({"PATH": os.environ["PATH"]})  # the job's environment, as the runner passes it
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False, env=env)
    assert (done.returncode, done.stdout.split("\n")[:2]) == (0, ["ray here", str(dirs.workdir)]), done.stderr
    assert not Path("/tmp/ray.sock").exists()  # its own /tmp, not the machine's


@pytest.mark.parametrize(("policy", "reaches"), [("none", False), ("egress", True)])
async def test_a_host_job_gets_the_network_the_supplier_allows(tmp_path, listener, policy, reaches) -> None:
    _, port = listener
    state = _state(tmp_path)
    spec = JobSpec(command=_probe(sys.executable, write=[], read=[], connect=["127.0.0.1", port]))
    out, _ = await _run(_host_jobs(tmp_path, state, policy), state, spec)
    assert (out["connect"] == "ok") is reaches, out


async def test_a_host_job_without_the_opt_in_is_refused(tmp_path) -> None:
    rec = Recorder()
    dispatch = Dispatch(lease=str(Pubkey.new_unique()), gpus=1, job=JobSpec(command=[sys.executable, "-V"]))
    # a node with a container engine (never called: the job is refused first), no default image, no opt-in
    containers_only = Sandbox(engine=("podman",))
    final = await JobRunner(
        dispatch, ["GPU-sim-a"], JobDirs.of(tmp_path, dispatch), simulated=True, send=rec.send, sandbox=containers_only
    ).run()
    assert final.state == "refused" and "runs jobs only in containers" in final.detail
    assert "running" not in rec.states() and not (tmp_path / "jobs").exists()


def test_without_a_container_engine_or_the_opt_in_nothing_starts(tmp_path) -> None:
    with pytest.raises(SandboxUnavailable, match="no working container engine"):
        Sandbox.configure(engine="none", allow_host_jobs=False)
    # the worker itself: exit code 12, what to do, and its state directory untouched
    create_keypair_file(tmp_path / "node.json")
    env = {**os.environ, "GPUNET_WORKER_CONTAINER_ENGINE": "none"}
    env.pop("GPUNET_WORKER_ALLOW_HOST_JOBS", None)
    argv = [GPUNET, "worker", "run", "-k", str(tmp_path / "node.json"), "--simulate-gpus", "H100:1:80"]
    done = subprocess.run(
        [*argv, "--state-dir", str(tmp_path / "state")], capture_output=True, text=True, env=env, check=False
    )
    assert done.returncode == Exit.NO_SANDBOX, done.stderr
    assert "install podman" in done.stderr and "--allow-host-jobs" in done.stderr
    assert not (tmp_path / "state").exists()
    # the control: with the opt-in (and bubblewrap) it starts, and waits for its gateway
    with agent_started([*argv, "--state-dir", str(tmp_path / "state"), "--allow-host-jobs"], env, tmp_path / "log"):
        pass
    assert (tmp_path / "state" / "agent.lock").exists()


def test_a_bubblewrap_too_old_for_the_host_jobs_sandbox_stops_the_worker(tmp_path, monkeypatch) -> None:
    """bubblewrap before 0.5 (Debian 11's 0.4) knows no --perms, which every host job's sandbox
    uses: found at the start, not as every host job failing while its lease pays."""
    old = tmp_path / "bin" / "bwrap"
    old.parent.mkdir()
    real = shutil.which("bwrap")
    old.write_text(
        f'#!/bin/sh\nfor a; do [ "$a" = --perms ] && {{ echo "bwrap: Unknown option --perms" >&2; exit 1; }}; done\n'
        f'exec {real} "$@"\n'
    )
    old.chmod(0o755)
    monkeypatch.setenv("PATH", f"{old.parent}:{os.environ['PATH']}")
    with pytest.raises(SandboxUnavailable, match=r"Unknown option --perms.*bubblewrap 0\.5 or newer"):
        Sandbox.configure(engine="none", allow_host_jobs=True)
    monkeypatch.setenv("PATH", os.environ["PATH"].split(":", 1)[1])
    assert Sandbox.configure(engine="none", allow_host_jobs=True).bwrap == real  # the control


def test_a_host_job_gets_the_device_nodes_of_its_own_gpus_only(tmp_path) -> None:
    """What the NVIDIA driver shows (its /proc files and /dev nodes, as plain files here: no GPU in CI)."""
    proc, dev = tmp_path / "gpus", tmp_path / "dev"
    dev.mkdir()
    for name in ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia0", "nvidia1", "nvidia2"):
        (dev / name).touch()
    for minor, (bus, uuid) in enumerate(
        [("0000:1b:00.0", "GPU-aaa"), ("0000:43:00.0", "GPU-bbb"), ("0000:52:00.0", "GPU-ccc")]
    ):
        (proc / bus).mkdir(parents=True)
        (proc / bus / "information").write_text(
            f"Model: \t\t NVIDIA H100 80GB HBM3\nGPU UUID: \t {uuid}\nBus Type: \t PCIe\nDevice Minor: \t {minor}\n"
        )
    shared = [str(dev / n) for n in ("nvidia-uvm", "nvidia-uvm-tools", "nvidiactl")]
    assert nvidia_device_nodes(["GPU-ccc", "GPU-aaa"], proc, dev) == [
        *shared,
        str(dev / "nvidia2"),
        str(dev / "nvidia0"),
    ]
    # the control: a GPU the driver does not list means every GPU's node (the README says so)
    assert nvidia_device_nodes(["GPU-zzz"], proc, dev) == [*shared, *(str(dev / f"nvidia{i}") for i in range(3))]


async def test_a_host_jobs_environment_never_reaches_the_root_programs_that_set_its_sandbox_up(tmp_path) -> None:
    """bubblewrap (and a root worker's setpriv) run as root: a job's LD_* variable given to them would
    load the client's code into root's process. The loader's own debug output shows which programs it
    acted in: the job's, never bubblewrap (seen there before the job's environment went prefixed)."""
    state = _state(tmp_path)
    rec = Recorder()
    spec = JobSpec(command=[sys.executable, "-c", "print('ran')"], env={"LD_DEBUG": "libs"})
    dispatch = Dispatch(lease=str(Pubkey.new_unique()), gpus=1, job=spec)
    final = await JobRunner(
        dispatch, ["GPU-sim-a"], JobDirs.of(state, dispatch), simulated=True, send=rec.send,
        sandbox=_host_jobs(tmp_path, state),
    ).run()  # fmt: skip
    loader = [line for line in rec.lines("stderr") if "calling init" in line or "find library" in line]
    assert final.state == "succeeded" and "ran" in rec.lines()
    assert loader  # the honest control: the job itself has its LD_DEBUG
    assert not [line for line in rec.lines("stderr") if "bwrap" in line or "setpriv" in line], loader[:3]


def test_a_container_jobs_secret_the_engine_itself_would_act_on_is_refused() -> None:
    """A container's secrets pass through the engine's environment (root's): LD_PRELOAD there loads a
    library into podman, CONTAINERS_CONF chooses its configuration. Refused, saying why; an ordinary
    name (the honest control) is not."""
    containers = Sandbox(engine=("podman",))
    for name in ("LD_PRELOAD", "CONTAINERS_CONF", "GODEBUG", "PATH"):
        assert name in (containers.refusal("img", [name, "HF_TOKEN"]) or "")
    assert containers.refusal("img", ["HF_TOKEN", "WANDB_API_KEY"]) is None
