"""Runs one lease's job on this node, sandboxed (worker/sandbox.py): in an OCI container through
podman or docker (the job's image, else the supplier's default image), or, only where the supplier
opted in, as a host process inside bubblewrap. With its GPUs, env, working directory and a checkpoint
directory that outlives the process and the agent; stdout/stderr streamed line by line; restart
policy; time limit; graceful stop.

Contract seen by the job: CUDA_VISIBLE_DEVICES (GPU UUIDs), GPUNET_LEASE, GPUNET_CHECKPOINT_DIR,
GPUNET_WORKDIR, RANK / WORLD_SIZE / LOCAL_RANK / LOCAL_WORLD_SIZE / NODE_RANK, and for clusters
MASTER_ADDR / MASTER_PORT (rank 0's advertised address and first cluster port), their PET_* forms
for torchrun, GPUNET_PEERS and GPUNET_CLUSTER_PORTS (the ports this node opens to its peers).
Stopping: SIGTERM to the job's process group, SIGKILL after the grace period.
"""

from __future__ import annotations

import asyncio
import ctypes
import importlib.metadata
import json
import os
import resource
import shutil
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

from gpunet.protocol import ClusterPeer, Dispatch, JobLog, JobState, JobStatus
from gpunet.raycluster import RAY_INSTALL, RAY_VERSION, RayPorts, ray_endpoints
from worker.checkpoints import restore
from worker.egress import EgressFilterUnavailable
from worker.inputs import InputRefused, fetch_inputs, registry_refusal
from worker.sandbox import ENGINE_ENV, Sandbox, host_job_env, host_job_uid

__all__ = ["JobDirs", "JobRunner"]

MAX_LINE = 4096  # longer lines are cut (the protocol's limit)
RAY_LAUNCHER = (Path(__file__).parent / "ray_launcher.py").read_text()  # run as `python -c` in the sandbox
_PR_SET_PDEATHSIG = 1


def die_with_agent() -> None:
    # In the child before exec: if the agent dies (even SIGKILL), the kernel kills the job, so a
    # restarted agent never finds an orphan still using the GPUs (Linux; elsewhere a no-op).
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def _in_bubblewrap(pids: int | None, file_bytes: int) -> Callable[[], None]:
    """What the child does before it becomes bubblewrap: it dies with the agent; SIGTERM to the job's
    process group must reach the job, not end bubblewrap (which would take the job with it at once;
    the job gets SIGTERM's default back: worker/job_launcher.py); and the job's limits, inherited down
    to it: the largest file it may write, and (where it runs as a uid of its own: `pids`) how many
    processes that uid may have (root, bubblewrap itself, is exempt; the job is not)."""

    def prepare() -> None:
        die_with_agent()
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        host_job_limits(pids, file_bytes)

    return prepare


def host_job_limits(pids: int | None, file_bytes: int) -> None:
    """Lowers this process's limits to a host job's (in a child before exec; what runs in the job's
    sandbox inherits them): the largest file it may write, and how many processes its uid may have."""

    def lower(limit: int, to: int) -> None:  # never above the agent's own hard limit (a non-root agent's)
        hard = resource.getrlimit(limit)[1]
        to = to if hard == resource.RLIM_INFINITY else min(to, hard)
        resource.setrlimit(limit, (to, to))

    lower(resource.RLIMIT_FSIZE, file_bytes)
    if pids is not None:
        lower(resource.RLIMIT_NPROC, pids)


def _give(directory: Path, uid: int) -> None:
    """The job's directory and all in it to the job's uid (what the agent put there: inputs, a
    restored checkpoint), following no link (one the job left points anywhere on the machine)."""
    os.chown(directory, uid, uid, follow_symlinks=False)
    for root, dirs, files in os.walk(directory):  # os.walk enters no linked directory
        for name in dirs + files:
            os.chown(os.path.join(root, name), uid, uid, follow_symlinks=False)


def ray_installed() -> bool:
    """Whether the worker's own Python has Ray, at the version gpunet pins (host jobs run that one)."""
    try:
        version = importlib.metadata.version("ray")
    except importlib.metadata.PackageNotFoundError:
        return False
    return version == RAY_VERSION and Path(sys.executable).with_name("ray").exists()


def url_host(host: str) -> str:
    """An address as the host part of a URL or "HOST:PORT" (IPv6 in brackets)."""
    return f"[{host}]" if ":" in host else host


@dataclass(frozen=True)
class JobDirs:
    """Where a lease's job lives under the worker's state directory; both survive restarts."""

    workdir: Path
    checkpoint: Path

    @classmethod
    def of(cls, state_dir: Path, dispatch: Dispatch) -> JobDirs:
        base = state_dir / "jobs" / dispatch.lease
        return cls(base / "work", base / dispatch.job.checkpoint_dir)


class JobRunner:
    """One job of a lease (its number is the dispatch's). `send` gets JobStatus/JobLog messages.
    Billing is the share's, not the job's: nothing here meters."""

    def __init__(
        self,
        dispatch: Dispatch,
        gpu_uuids: list[str],
        dirs: JobDirs,
        *,
        simulated: bool,
        send: Callable[[BaseModel], None],
        grace_seconds: float = 10.0,
        restart_delay: float = 1.0,
        sandbox: Sandbox,
        reach: ClusterPeer | None = None,
        ray_cpus: int = 1,
    ) -> None:
        self.dispatch, self.spec, self.gpu_uuids, self.dirs = dispatch, dispatch.job, gpu_uuids, dirs
        # how peers reach this node (its advertised address and cluster ports) when the dispatch does
        # not say (a single-node lease): a Ray head listens there; and the CPUs its Ray node offers
        self.reach, self.ray_cpus = reach, ray_cpus
        self._rejoin = asyncio.Event()
        self.simulated, self._send = simulated, send
        self.grace_seconds, self.restart_delay, self.sandbox = grace_seconds, restart_delay, sandbox
        # the image it runs in; None: a host process in bubblewrap (only where the supplier allows it)
        self.image = self.spec.image or sandbox.default_image
        self.restarts = 0
        self.process_pid: int | None = None  # bubblewrap's or the engine's `run`, while the job runs
        self.state: JobState = "starting"
        self._cancelled = asyncio.Event()
        self._cancel_reason = ""
        self._container = f"gpunet-{dispatch.lease[:16]}"
        # a root worker's host job runs as a uid of its own, never as root
        self.uid = host_job_uid(dispatch.lease) if self.image is None and sandbox.drop_root else None

    def cancel(self, reason: str = "") -> None:
        self._cancel_reason = reason
        self._cancelled.set()

    def rejoin(self, dispatch: Dispatch) -> None:
        """The cluster's rank 0 moved (a failover): a Ray node stops and starts again, joining (or
        being) the new head; not a restart of the job's own (it counts none)."""
        # only where the nodes are (the runner's copy holds the job's opened secrets)
        self.dispatch = self.dispatch.model_copy(update={"peers": dispatch.peers, "cluster": dispatch.cluster})
        self._rejoin.set()

    def _status(self, state: JobState, exit_code: int | None = None, detail: str = "") -> JobStatus:
        self.state = state
        status = JobStatus(
            simulated=self.simulated,
            lease=self.dispatch.lease,
            job_number=self.dispatch.job_number,
            state=state,
            exit_code=exit_code,
            restarts=self.restarts,
            detail=detail[:MAX_LINE],
            epoch=self.dispatch.epoch,
        )
        self._send(status)
        return status

    async def run(self) -> JobStatus:
        """Runs the job to its end (success, failure, time limit or cancel); returns the final status."""
        refusal = self.sandbox.refusal(self.spec.image, self.spec.secrets) or (
            self._ray_refusal() if self.spec.ray else None
        )
        if refusal:
            return self._status("refused", detail=refusal)
        if self.image is None and not self.spec.ray:  # what bubblewrap would only say as its exit status 127
            program = self.spec.command[0] if self.spec.command else ""
            if not program or shutil.which(program, path=self._env().get("PATH")) is None:
                return self._status("failed", detail=f"cannot start {program!r}: no such program on this node")
        for d in (self.dirs.workdir, self.dirs.checkpoint):
            d.mkdir(parents=True, exist_ok=True)
        try:
            restored = restore(self.dirs.checkpoint, self.dispatch.restore)
        except (OSError, ValueError) as e:
            return self._status("failed", detail=f"restoring the checkpoint: {e}")
        if restored:
            self._log("stderr", f"[gpunet: checkpoint restored, {restored} files]")
        try:
            await asyncio.to_thread(fetch_inputs, str(self.dirs.workdir), self.spec.inputs, self.sandbox.inputs)
        except InputRefused as e:
            return self._status("failed", detail=f"inputs: {e}")
        if self.uid is not None:
            for d in (self.dirs.workdir, self.dirs.checkpoint):
                _give(d, self.uid)
                # bubblewrap enters the workdir (--chdir) as a root without capabilities, before
                # setpriv drops to the job's uid: searchable by others whatever the agent's umask (the
                # service's is 0077); the state directory above is the agent's alone
                d.chmod(0o755)
        if self.image is not None and (failed := await self._pull(self.image)) is not None:
            return failed
        loop = asyncio.get_running_loop()  # the job's time limit runs from here: a pull is not its time
        deadline = None if self.spec.time_limit_seconds is None else loop.time() + self.spec.time_limit_seconds
        while True:
            self._status("starting" if self.restarts == 0 else "restarting")
            argv = self._argv()
            if self.image is not None and self._network() and not self._host_network():
                try:
                    await asyncio.to_thread(self.sandbox.keep_egress_filter)
                except EgressFilterUnavailable as e:
                    return self._status("failed", detail=f"the job's network cannot be filtered: {e}")
            if self.image is not None:  # one left by an agent that died (its `run` died with it)
                await self._engine("rm", "--force", self._container)
            try:
                process = await asyncio.create_subprocess_exec(
                    *argv,
                    cwd=self.dirs.workdir,
                    # a host job's environment goes past bubblewrap prefixed: never acted on as root
                    env=self._env() if self.image is not None else host_job_env(self._env()),
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE,
                    start_new_session=True,
                    preexec_fn=die_with_agent
                    if self.image is not None
                    else _in_bubblewrap(
                        self.sandbox.pids_limit if self.uid is not None else None, self.sandbox.file_bytes
                    ),
                    limit=2 * MAX_LINE,
                )
            except OSError as e:
                return self._status("failed", detail=f"cannot start {argv[0]!r}: {e.strerror or e}")
            self.process_pid = process.pid  # how a shell or a forward finds the job's sandbox (worker/job_access.py)
            self._status("running")
            try:
                outcome, code = await self._supervise(process, deadline)
            finally:
                self.process_pid = None
            if code > 128:  # bubblewrap and the container engines report a job killed by signal N as 128 + N
                code = 128 - code
            if outcome == "rejoin":
                self._rejoin.clear()
                self._log("stderr", f"[gpunet: ray] the head moved to {self._ray_head()}: this node starts again")
                continue
            if outcome == "cancelled":
                return self._status("cancelled", code, self._cancel_reason)
            if outcome == "timed_out":
                return self._status("timed_out", code, f"time limit of {self.spec.time_limit_seconds} s reached")
            if code == 0:
                return self._status("succeeded", 0)
            if self.spec.restart_policy == "never" or self.restarts >= self.spec.max_restarts:
                return self._status("failed", code, f"exited with {code}")
            self.restarts += 1
            try:  # a cancel during the pause ends the job without another start
                await asyncio.wait_for(self._cancelled.wait(), self.restart_delay)
                return self._status("cancelled", code, self._cancel_reason)
            except TimeoutError:
                pass

    async def _supervise(self, process: asyncio.subprocess.Process, deadline: float | None) -> tuple[str, int]:
        readers = [
            asyncio.create_task(self._stream(process.stdout, "stdout")),
            asyncio.create_task(self._stream(process.stderr, "stderr")),
        ]
        exited = asyncio.create_task(process.wait())
        cancelled = asyncio.create_task(self._cancelled.wait())
        rejoin = asyncio.create_task(self._rejoin.wait())
        timeout = None if deadline is None else max(0.0, deadline - asyncio.get_running_loop().time())
        done, _ = await asyncio.wait({exited, cancelled, rejoin}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        outcome = (
            "exited"
            if exited in done
            else "cancelled"
            if cancelled in done
            else "rejoin"
            if rejoin in done
            else "timed_out"
        )
        cancelled.cancel()
        rejoin.cancel()
        if outcome != "exited":
            await self._stop(process, exited)
        # a grandchild may still hold the pipes open: do not wait for it forever
        await asyncio.wait(readers, timeout=5)
        for reader in readers:
            reader.cancel()
        return outcome, await exited

    async def _stop(self, process: asyncio.subprocess.Process, exited: asyncio.Task[int]) -> None:
        self._signal(process, signal.SIGTERM)
        done, _ = await asyncio.wait({exited}, timeout=self.grace_seconds)
        if not done:
            if self.image is not None:
                # the container is the engine's (conmon's), not a child of ours: the engine kills it,
                # and `run --rm` removes it before exiting
                await self._engine("kill", self._container)
                await asyncio.wait({exited}, timeout=10)
            self._signal(process, signal.SIGKILL)
            await exited
        if self.image is not None:
            await self._engine("rm", "--force", self._container)  # gone even if `run` was killed

    async def _pull(self, image: str) -> JobStatus | None:
        """The job's image, pulled first when this node lacks it: the job shows "pulling", with the
        engine's progress as its log lines (stderr, "[gpunet: pull] ..."). A failed pull fails the job
        with the engine's last word; a cancel stops the pull. None when the image is here."""
        if await self._engine("image", "inspect", image) == 0:
            return None
        # the engine pulls on the host's network: the job's image by the inputs' rules (the supplier's
        # own default image is the supplier's choice)
        if self.spec.image is not None and (why := registry_refusal(image, self.sandbox.inputs)) is not None:
            return self._status("failed", detail=f"pulling image {image!r}: {why}")
        assert self.sandbox.engine is not None
        self._status("pulling", detail=f"pulling image {image}")
        pull = await asyncio.create_subprocess_exec(
            *self.sandbox.engine, "pull", image,
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            start_new_session=True, limit=2 * MAX_LINE,
        )  # fmt: skip
        assert pull.stdout is not None
        last = ""

        async def progress(stream: asyncio.StreamReader) -> None:
            nonlocal last
            async for raw in stream:
                if line := raw.decode(errors="replace").rstrip():
                    last = line
                    self._log("stderr", f"[gpunet: pull] {line}")

        reader = asyncio.create_task(progress(pull.stdout))
        exited = asyncio.create_task(pull.wait())
        cancelled = asyncio.create_task(self._cancelled.wait())
        await asyncio.wait({exited, cancelled}, return_when=asyncio.FIRST_COMPLETED)
        cancelled.cancel()
        if not exited.done():
            self._signal(pull, signal.SIGTERM)
            await exited
            reader.cancel()
            return self._status("cancelled", None, self._cancel_reason)
        await asyncio.wait({reader}, timeout=5)
        reader.cancel()
        if exited.result() != 0:
            return self._status("failed", exited.result(), f"pulling image {image!r} failed: {last or 'no output'}")
        return None

    async def _engine(self, *args: str) -> int:
        assert self.sandbox.engine is not None
        command = await asyncio.create_subprocess_exec(
            *self.sandbox.engine, *args, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
        )
        return await command.wait()

    @staticmethod
    def _signal(process: asyncio.subprocess.Process, sig: signal.Signals) -> None:
        try:
            os.killpg(process.pid, sig)  # the whole group: the job's own children too
        except ProcessLookupError:
            pass

    async def _stream(self, reader: asyncio.StreamReader | None, stream: str) -> None:
        assert reader is not None
        while True:
            try:
                raw = await reader.readline()
            except ValueError:  # over the limit: the line is dropped from the buffer
                self._log(stream, "[gpunet: line over the limit, cut]")
                continue
            if not raw:
                return
            self._log(stream, raw.decode("utf-8", "replace").rstrip("\r\n")[:MAX_LINE])

    def _log(self, stream: str, line: str) -> None:
        self._send(
            JobLog(
                simulated=self.simulated,
                lease=self.dispatch.lease,
                job_number=self.dispatch.job_number,
                stream=stream,
                line=line,
                epoch=self.dispatch.epoch,
            )
        )  # type: ignore[arg-type]

    def _contract_env(self, checkpoint: str, workdir: str) -> dict[str, str]:
        d = self.dispatch
        env = {
            # the lease's GPUs, in a container as on the host (simulated ones too: a job sees its GPUs
            # the same way whatever runs it)
            "CUDA_VISIBLE_DEVICES": ",".join(self.gpu_uuids),
            "GPUNET_LEASE": d.lease,
            "GPUNET_CHECKPOINT_DIR": checkpoint,
            "GPUNET_WORKDIR": workdir,
            # torch.distributed's variables: one process per node (torchrun sets its own for its children)
            "RANK": str(d.rank),
            "WORLD_SIZE": str(d.world_size),
            "LOCAL_RANK": "0",
            "LOCAL_WORLD_SIZE": "1",
            "NODE_RANK": str(d.rank),
        }
        if self.spec.ray:
            env["RAY_ADDRESS"] = self._ray_head()
            env["RAY_USAGE_STATS_ENABLED"] = "0"  # nothing sent to Ray's makers from a supplier's machine
            env["RAY_AUTH_MODE"] = "token"  # the head and every node admit only holders of the job's RAY_AUTH_TOKEN
        if d.peers:
            host, _, port = d.peers[0].rpartition(":")
            master = host.strip("[]")
            env |= {
                "MASTER_ADDR": master,
                "MASTER_PORT": port,
                # torchrun's own options from the environment: `torchrun --nproc-per-node=N job.py` is enough
                "PET_MASTER_ADDR": master,
                "PET_MASTER_PORT": port,
                "PET_NNODES": str(d.world_size),
                "PET_NODE_RANK": str(d.rank),
                "GPUNET_PEERS": ",".join(d.peers),
            }
            if d.cluster and (ports := d.cluster[d.rank].ports) is not None:
                env["GPUNET_CLUSTER_PORTS"] = str(ports)  # what this node opens to its peers
        return env

    def _env(self) -> dict[str, str]:
        # A clean environment: the agent's own variables (and any secrets in them) stay out of the job.
        base = {k: os.environ[k] for k in ("PATH", "LANG", "LC_ALL", "TZ") if k in os.environ}
        if self.image is not None:
            # the container gets its env through -e flags; the engine keeps its own configuration, and a
            # secret's value goes by name from here, never in argv (which anyone on the machine can read)
            secrets = {name: self.spec.env[name] for name in self.spec.secrets if name in self.spec.env}
            return base | {k: os.environ[k] for k in ENGINE_ENV if k in os.environ} | secrets
        return (
            base
            | {"HOME": str(self.dirs.workdir)}
            # a uid of its own has no name in /etc/passwd: tools that ask for the user's (getpass) ask this
            | ({"USER": "gpunet-job", "LOGNAME": "gpunet-job"} if self.uid is not None else {})
            | self.spec.env
            | self._contract_env(str(self.dirs.checkpoint), str(self.dirs.workdir))
        )

    def _reach(self, rank: int) -> ClusterPeer:
        """How peers reach the lease's node `rank` (this one's own when the dispatch names none)."""
        if self.dispatch.cluster:
            return self.dispatch.cluster[rank]
        assert self.reach is not None, "a Ray job needs this node's advertised address and ports"
        return self.reach

    def _ray_head(self) -> str:
        head = self._reach(0)
        assert head.ports is not None  # _ray_refusal checked it
        return ray_endpoints(url_host(head.host), head.ports)["address"]

    def _ray_refusal(self) -> str | None:
        """Why this node cannot run the lease's Ray node, or None."""
        if self.image is None and not ray_installed():
            return (
                f"this node cannot run Ray jobs: Ray {RAY_VERSION} is not installed with its worker "
                f"(its supplier installs it with {RAY_INSTALL})"
            )
        if not self._network():
            policy = self.sandbox.network
            return f"this node's network policy ({policy}) gives this job no network: a Ray node needs one"
        for rank in {0, self.dispatch.rank}:
            peer = self.dispatch.cluster[rank] if self.dispatch.cluster else self.reach
            try:
                if peer is None or peer.ports is None:
                    raise ValueError(f"node {rank} of the lease advertises no cluster ports (an older worker)")
                RayPorts.of(peer.ports)
            except ValueError as e:
                return f"a Ray cluster cannot run on this lease: {e}"
        return None

    def _command(self) -> list[str]:
        """The job's argv: its command, or for a Ray job this node's Ray node (worker/ray_launcher.py)."""
        if not self.spec.ray:
            return list(self.spec.command)
        d, own = self.dispatch, self._reach(self.dispatch.rank)
        assert own.ports is not None
        head_reach = self._reach(0)
        assert head_reach.ports is not None  # _ray_refusal checked it
        head = ray_endpoints(url_host(head_reach.host), head_reach.ports)
        config = {
            # a host job runs the worker's own Ray; a container the image's (the same version)
            "ray": str(Path(sys.executable).with_name("ray")) if self.image is None else "ray",
            "start": [
                *RayPorts.of(own.ports).start_args(host=own.host, head=None if d.rank == 0 else head["address"]),
                f"--num-gpus={len(self.gpu_uuids)}",  # the lease's GPUs on this node only (CUDA_VISIBLE_DEVICES)
                f"--num-cpus={self.ray_cpus}",
                "--disable-usage-stats",
            ],
            "head": head["address"],
            "is_head": d.rank == 0,
            "dashboard": head["dashboard"],
            "nodes": d.world_size,
            "command": list(self.spec.command) if d.rank == 0 else [],
        }
        python = sys.executable if self.image is None else "python3"
        return [python, "-c", RAY_LAUNCHER, json.dumps(config)]

    def _argv(self) -> list[str]:
        if self.image is None:
            return self.sandbox.host_argv(
                self._command(),
                self.dirs,
                network=self._network(),
                gpu_uuids=[] if self.simulated else self.gpu_uuids,
                private_tmp=self.spec.ray,
                uid=self.uid,
            )
        return self.sandbox.container_argv(
            self.image,
            self._command(),
            self.dirs,
            name=self._container,
            env=self.spec.env | self._contract_env("/checkpoint", "/work"),
            secrets=set(self.spec.secrets),
            gpu_uuids=[] if self.simulated else self.gpu_uuids,
            network=self._network(),
            host_network=self._host_network(),
            private_tmp=self.spec.ray,
        )

    def _host_network(self) -> bool:
        """Whether a container job with a network gets the host's (a cluster's or a Ray node: their
        peers reach them at the node's advertised address), not the egress network."""
        return bool(self.dispatch.peers) or self.spec.ray

    def _network(self) -> bool:
        """Whether the job gets a network: the supplier's policy ("cluster": only a cluster's jobs,
        a Ray cluster's on one node too: its client reaches the head)."""
        policy = self.sandbox.network
        return policy == "egress" or (policy == "cluster" and (bool(self.dispatch.peers) or self.spec.ray))
