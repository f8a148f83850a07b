"""The worker agent: GPUs, journal, jobs and meters, tied to one coordinator session."""

from __future__ import annotations

import asyncio
import fcntl
import os
import time
from collections.abc import Coroutine, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict
from solders.keypair import Keypair

from gpunet import logs
from gpunet.checkpoint import open_key
from gpunet.logs import get_logger
from gpunet.protocol import (
    JOB_ENDED,
    PROTOCOL_VERSION,
    Ack,
    Cancel,
    Checkpoint,
    ClusterPeer,
    Dispatch,
    Error,
    Heartbeat,
    Hello,
    JobStatus,
    LeaseEnd,
    PortRange,
    UsageAck,
    Verify,
    VerifyMemory,
    VerifyOpen,
    Welcome,
)
from gpunet.secrets import SecretError, open_sealed
from worker.checkpoints import CheckpointStoreClient, CheckpointTooLarge, StoreError, fingerprint, snapshot
from worker.egress import parse_cidrs
from worker.gpus import GpuBackend
from worker.journal import Journal
from worker.metering import LeaseMeter
from worker.metrics import MetricsServer
from worker.network import advertised_address
from worker.runner import JobDirs, JobRunner
from worker.sandbox import EngineChoice, NetworkPolicy, Sandbox, SandboxUnavailable
from worker.session import Backoff, Session
from worker.tunnel import DataPlane
from worker.verify import ChallengeRefused, Prover

__all__ = ["Agent", "SandboxUnavailable", "StateDirBusy", "StateDirUnusable", "WorkerSettings"]

log = get_logger("gpunet.worker")


class WorkerSettings(BaseSettings):
    """The agent's configuration; every field also reads GPUNET_WORKER_<NAME> from the environment."""

    model_config = SettingsConfigDict(env_prefix="GPUNET_WORKER_")

    gateway_url: str = Field(
        "ws://127.0.0.1:8910/worker",
        description="the coordinator's worker gateway (ws:// or wss://; anything else is refused at start); with "
        "replicas, each replica's, comma-separated",
    )
    state_dir: Path = Field(
        Path("~/.local/state/gpunet-worker").expanduser(),
        description="the usage journal usage.jsonl, and per lease jobs/<lease>/work and the checkpoint "
        "directory, which survive restarts; one agent per state directory (a second one, or one it cannot "
        "create or write, stops it: exit 11)",
    )
    usage_period_seconds: int = Field(
        60,
        description="seconds between the usage receipts sent for a share (and one when it is released), until "
        "the coordinator's welcome says otherwise",
    )
    meter_tick_seconds: float = Field(
        1.0,
        description="how often a held share's usage receipt is signed and journaled: the most usage a crash can lose",
    )
    usage_resend_seconds: float = Field(
        15.0,
        description="the newest usage receipts still unacknowledged this long after a pass are sent again (the "
        "coordinator may not have been able to record them: its database down, say); a repeat is harmless",
    )
    stop_grace_seconds: float = Field(10.0, description="a stopped job's time from SIGTERM to SIGKILL")
    reconnect_base_seconds: float = Field(
        0.5,
        description="the first delay before connecting to the gateway again; it doubles with each failed attempt "
        "(a random delay up to it: full jitter)",
    )
    reconnect_cap_seconds: float = Field(30.0, description="the longest delay between two connection attempts")
    not_registered_exit_seconds: float = Field(
        300.0,
        ge=0,
        description="how long the coordinator may keep refusing the node key as not registered on chain (never "
        "registered, or deregistered) before the agent stops (exit 13): long enough for a `gpunet node register` "
        "sent just after the start to land; each refusal is logged (session.not_registered) with the "
        "coordinator's reason",
    )
    simulate_slowdown: float = Field(
        1.0,
        description="simulated GPUs only: how many times slower than their model they answer GPU verification "
        "challenges (1: as fast as the model; more plays a GPU that is not what it claims, to see it caught)",
    )
    simulate_vram_share: float = Field(
        1.0,
        gt=0,
        le=1,
        description="simulated GPUs only: the share of their model's VRAM they hold (1: all of it; less plays a "
        "GPU with less memory than it claims, which keeps only what fits of the memory check's blocks)",
    )
    api_url: str | None = Field(
        None,
        description="the coordinator's API (http:// or https://): checkpoints of any size go to its checkpoint "
        "store, encrypted under the lease's key the client seals to this node (until it does, they stay here); "
        "unset: only checkpoints up to 512 KiB of leases whose client sealed no key move, through the gateway",
    )
    # The job sandbox (worker/sandbox.py; docs/supplier/guide.md). Jobs run in containers:
    container_engine: EngineChoice = Field(
        "auto",
        description="auto (podman, else docker whose daemon answers `docker info`), podman, docker or none; an "
        "engine that answers but cannot run a container stops the worker at its start (exit 12)",
    )
    container_runtime: str | None = Field(
        None, description="podman's --runtime, e.g. runc where crun cannot run; unset: podman's own"
    )
    default_image: str | None = Field(
        None,
        description="the container image of a job that names none; unset: such a job is a host job (refused "
        "without GPUNET_WORKER_ALLOW_HOST_JOBS)",
    )
    network: NetworkPolicy = Field(
        "egress",
        description="the jobs' network: none (loopback only); egress (outbound to the internet only: a container "
        "job on gpunet's network reaches no private or link-local address, the cloud metadata endpoint among "
        "them, nor this machine); cluster (only multi-node leases' jobs get a network). Multi-node leases' and "
        "Ray jobs' containers, and host jobs, use the host's network, which the filter does not cover",
    )
    egress_allow: list[str] = Field(
        [],
        description="private addresses or CIDRs egress container jobs may reach nevertheless (a dataset server "
        "on the LAN), never the machine itself; a JSON list in the environment",
    )
    egress_unfiltered: bool = Field(
        False,
        description="egress without the filter: jobs reach everything this machine reaches (the LAN, the machine, "
        "a cloud machine's metadata endpoint); only where the filter cannot be installed (it needs root, rootful "
        "podman and nftables: without them egress stops the worker at its start, exit 12)",
    )
    inputs_max_bytes: int = Field(
        16 * 2**30,
        ge=1,
        description="the most a job's inputs (fetched by the agent before the job starts, under the egress "
        "rules) may take on disk together; beyond: the job fails saying so",
    )
    inputs_seconds: float = Field(
        3600.0, gt=0, description="the most time a job's inputs may take to fetch together; beyond: the job fails"
    )
    pids_limit: int = Field(
        4096,
        ge=16,
        description="the most processes a container job (--pids-limit) or a root agent's host job (RLIMIT_NPROC) "
        "may have",
    )
    memory: str | None = Field(
        None,
        pattern=r"^[0-9]+[bkmg]?$",
        description="a container job's memory limit, the engine's --memory (a number, then b, k, m or g: 64g); "
        "unset: no limit. None applies to host jobs, nor to GPU memory",
    )
    allow_host_jobs: bool = Field(
        False,
        description="run a job without an image (and no default image) as a host process inside bubblewrap "
        "(0.5 or newer); without it such a job is refused, and a worker with no working container engine does "
        "not start (exit 12)",
    )
    host_job_paths: list[Path] = Field(
        [],
        description="paths host jobs may read besides the system directories and Python (a JSON list in the "
        "environment); keep keypairs out of them",
    )
    host_job_file_bytes: int = Field(
        64 * 2**30, ge=1, description="the largest file a host job may write (RLIMIT_FSIZE)"
    )
    advertise_addr: str | None = Field(
        None,
        description="the address this node's cluster peers reach it at (MASTER_ADDR, the Ray head's), sent in "
        "the hello; unset: that of the interface that routes to the gateway (set it behind NAT to the public "
        "address that forwards the cluster ports)",
    )
    cluster_ports: str = Field(
        "29500-29599",
        pattern=r"^\d{1,5}-\d{1,5}$",
        description="the ports this node opens to its cluster peers, FIRST-LAST: MASTER_PORT is the first, a Ray "
        "node takes all its ports from the range (at least 20); let the peers in on them in the firewall",
    )
    ray_cpus: int | None = Field(
        None,
        ge=1,
        description="the CPUs a Ray job's node offers Ray (--num-cpus); unset: the machine's in proportion to "
        "the lease's share of its GPUs",
    )
    rpc_url: str | None = Field(
        None,
        description="the chain's JSON-RPC: the node's registration is checked at start, and a lease's client is "
        "read there before anyone is let into the lease's job (shells, forwards); unset: nobody is let in. "
        "--url (or GPUNET_RPC_URL), an RPC URL or a cluster name, goes first",
    )
    tunnel_port: int | None = Field(
        None,
        ge=0,
        le=65535,
        description="the port at the advertised address where clients reach this node's jobs directly (shells, "
        "forwards; 0: any free port), before they try the coordinator's relay; unset: through the relay only",
    )
    metrics_host: str = Field("127.0.0.1", description="the operator port's address")
    metrics_port: int | None = Field(
        None,
        ge=0,
        le=65535,
        description="the operator port: GET /metrics (Prometheus), /healthz and /readyz; unset: none is opened",
    )

    @field_validator("cluster_ports")
    @classmethod
    def _port_range(cls, ports: str) -> str:
        PortRange.parse(ports)  # ValueError saying what is wrong
        return ports

    @field_validator("egress_allow")
    @classmethod
    def _cidrs(cls, cidrs: list[str]) -> list[str]:
        return [str(n) for n in parse_cidrs(cidrs)]  # ValueError naming the bad one

    @field_validator("advertise_addr")
    @classmethod
    def _advertised(cls, addr: str | None) -> str | None:
        return None if addr is None else ClusterPeer(host=addr).host

    @field_validator("gateway_url")
    @classmethod
    def _websocket_url(cls, url: str) -> str:
        for one in url.split(","):
            if not one.strip().startswith(("ws://", "wss://")):
                raise ValueError(f"a gateway URL must start with ws:// or wss://, got {one!r}")
        return url

    @property
    def gateway_urls(self) -> list[str]:
        """The coordinator replicas' gateways, in the order given (comma-separated)."""
        return [one.strip() for one in self.gateway_url.split(",")]


class StateDirUnusable(RuntimeError):
    """The state directory cannot be made or written (exit 11, saying why)."""


class StateDirBusy(StateDirUnusable):
    """Another agent holds this state directory: two writers would meter the same leases twice."""


def _lock_state_dir(state_dir: Path) -> int:
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(state_dir / "agent.lock", os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as e:  # a bad --state-dir: said in a line, not a traceback
        raise StateDirUnusable(f"{state_dir}: cannot use it as the state directory: {e.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released by the kernel when the agent dies
    except BlockingIOError:
        os.close(fd)
        raise StateDirBusy(f"{state_dir}: another worker agent is running with this state directory") from None
    return fd


@dataclass
class _Share:
    """A lease's share of this node: its GPUs, reserved for the lease and billed from the first
    dispatch until the coordinator releases them (or the lease ends), whether a job runs or not.
    The lease's jobs run on it one at a time."""

    dispatch: Dispatch  # the one that gave the current job
    gpu_uuids: list[str]
    meter: LeaseMeter
    runner: JobRunner | None = None  # the current job's; None when it did not run here
    task: asyncio.Task[Any] | None = field(default=None)
    released: bool = False  # cancelled: no longer billed; the GPUs are free once the job has stopped
    checkpoint_seen: tuple = ()  # fingerprint of the checkpoint last sent to the coordinator
    upload: asyncio.Task[None] | None = None  # a checkpoint on its way to the checkpoint store
    kept_local_warned: bool = False  # said once that a keyed lease's checkpoints stay on this node
    chunk_ids: dict[tuple[str, int, int], list[str]] = field(default_factory=dict)  # of files sealed before
    successor: Dispatch | None = None  # a newer assignment of the lease, taken once this share's job stopped
    uploads: int = 0  # checkpoints of the current job stored (each a debug line; their sum at info at its end)
    uploaded_chunks: int = 0  # chunks those uploads sent (the others were in the store already)
    ended: JobStatus | None = None  # the job's end, said once its last checkpoint has gone

    @property
    def job_running(self) -> bool:
        return self.task is not None and not self.task.done()


class Agent:
    def __init__(self, settings: WorkerSettings, node: Keypair, gpus: GpuBackend) -> None:
        self.settings, self.node, self.gpus = settings, node, gpus
        self.sandbox = Sandbox.configure(  # SandboxUnavailable before anything is touched
            engine=settings.container_engine,
            runtime=settings.container_runtime,
            default_image=settings.default_image,
            allow_host_jobs=settings.allow_host_jobs,
            network=settings.network,
            pids_limit=settings.pids_limit,
            memory=settings.memory,
            host_paths=settings.host_job_paths,
            hidden=[settings.state_dir, *(Path.home() / ".config" / d for d in ("gpunet", "solana"))],
            label=str(settings.state_dir.expanduser().resolve()),
            egress_allow=settings.egress_allow,
            egress_unfiltered=settings.egress_unfiltered,
            file_bytes=settings.host_job_file_bytes,
            inputs_max_bytes=settings.inputs_max_bytes,
            inputs_seconds=settings.inputs_seconds,
        )
        self.simulated = gpus.simulated
        self.inventory = gpus.inventory()
        self.prover = Prover(
            self.inventory, slowdown=settings.simulate_slowdown, vram_share=settings.simulate_vram_share
        )
        for gpu, backend in zip(self.inventory.gpus, self.prover.backends, strict=True):
            # Once at start: a supplier sees here why a real GPU's challenges would be refused.
            if backend.name is None:
                log.warning("verification.no_backend", node=node.pubkey(), gpu=gpu.index, reason=backend.refusal)
            else:
                log.info("verification.backend", node=node.pubkey(), gpu=gpu.index, backend=backend.name)
        self._verifications: set[asyncio.Task[None]] = set()
        self._lock = _lock_state_dir(settings.state_dir)
        try:
            if leftovers := self.sandbox.remove_leftovers():  # ours: we hold the state directory
                log.warning("jobs.leftover_containers_removed", node=node.pubkey(), count=leftovers)
            self.journal = Journal(settings.state_dir / "usage.jsonl")
        except BaseException:
            os.close(self._lock)
            raise
        self.shares: dict[str, _Share] = {}  # lease -> its share of this node
        # lease -> its first dispatch, waiting for GPUs that released shares still hold while their jobs
        # stop: taken once they have (a GPU never runs two leases' jobs at once)
        self.waiting: dict[str, Dispatch] = {}
        self.cluster_ports = PortRange.parse(settings.cluster_ports)
        self.advertise_addr = settings.advertise_addr or advertised_address(settings.gateway_url)
        if self.advertise_addr is None:
            log.warning(
                "worker.no_advertise_addr", node=node.pubkey(), gateway=settings.gateway_url, fix="set --advertise-addr"
            )
        ports = str(self.cluster_ports)
        log.info("worker.cluster", node=node.pubkey(), advertise_addr=self.advertise_addr, cluster_ports=ports)
        self.usage_period_seconds = settings.usage_period_seconds
        self.session = Session(
            settings.gateway_urls,
            node,
            simulated=self.simulated,
            hello=self.hello,
            heartbeat=self.heartbeat,
            on_welcome=self.on_welcome,
            handle=self.handle,
            backoff=Backoff(settings.reconnect_base_seconds, settings.reconnect_cap_seconds),
            not_registered_grace=settings.not_registered_exit_seconds,
        )
        self.data_plane = DataPlane(
            node,
            settings.gateway_urls,
            holds=lambda lease: (share := self.shares.get(lease)) is not None and not share.released,
            job_of=self._job_of,
            rpc_url=settings.rpc_url,
            state_dir=settings.state_dir,
            direct=None if settings.tunnel_port is None else (self.advertise_addr or "127.0.0.1", settings.tunnel_port),
        )
        if unacked := self.journal.unacked():
            log.info("usage.unacknowledged", node=node.pubkey(), receipts=len(unacked))  # sent once connected

    @logs.scoped
    async def run(self) -> None:
        """Until cancelled: the session (reconnecting, until the node stays unregistered past the grace:
        NodeNotRegistered) and the metering clock."""
        logs.bind(node=self.node.pubkey())  # every line of this agent's work (its tasks inherit it)
        metrics = None
        if self.settings.metrics_port is not None:
            metrics = MetricsServer(self, self.settings.metrics_host, self.settings.metrics_port)
            await metrics.start()
            log.info("worker.metrics", url=f"http://{metrics.host}:{metrics.port}/metrics")
        await self.data_plane.listen()  # its port goes into the hello
        meter = asyncio.create_task(self._meter_clock())
        data_plane = asyncio.create_task(self.data_plane.run())
        try:
            await self.session.run_forever()
        finally:
            meter.cancel()
            data_plane.cancel()
            if metrics is not None:
                await metrics.stop()
            await self.stop_jobs("agent stopping")
            self.close()

    def close(self) -> None:
        """Closes the journal and releases the state directory (idempotent)."""
        self.journal.close()
        if self._lock >= 0:
            os.close(self._lock)
            self._lock = -1

    async def stop_jobs(self, reason: str) -> None:
        """The agent stops: its shares are no longer held, so their billing ends now (journaled; the
        receipts are sent after the next start if not now). Not final: the coordinator may hand the
        same share back after a restart, and its count continues."""
        now = time.time()
        for share in self.shares.values():
            self._send_all(share.meter.release(now, final=False))
            share.released = True
            if share.runner is not None:
                share.runner.cancel(reason)
        tasks = [share.task for share in self.shares.values() if share.task]
        await asyncio.gather(*tasks, return_exceptions=True)

    # --- what the session asks for

    def hello(self) -> Hello:
        return Hello(
            simulated=self.simulated,
            version=PROTOCOL_VERSION,
            node_key=str(self.node.pubkey()),
            inventory=self.inventory,
            advertise_addr=self.advertise_addr,
            cluster_ports=self.cluster_ports,
            tunnel_port=self.data_plane.port,
        )

    def _job_of(self, lease: str) -> JobRunner | None:
        """The runner of the job running on this node's share of the lease (None: none runs)."""
        share = self.shares.get(lease)
        if share is None or share.released or not share.job_running or share.runner is None:
            return None
        return share.runner

    def heartbeat(self) -> Heartbeat:
        samples = self.gpus.sample()
        held = {lease: share for lease, share in self.shares.items() if not share.released}
        running = [
            lease for lease, share in held.items() if share.runner is not None and share.runner.state == "running"
        ]
        return Heartbeat(
            simulated=self.simulated,
            healthy=all(s.healthy for s in samples),
            gpus=samples,
            running=running,
            held=list(held),
        )

    def on_welcome(self, welcome: Welcome) -> list[BaseModel]:
        self.usage_period_seconds = welcome.usage_period_seconds
        return list(self.journal.unacked())

    async def handle(self, message: Any) -> None:
        if isinstance(message, Dispatch):
            self._dispatch(message)
        elif isinstance(message, Cancel):
            self._cancel(message)
        elif isinstance(message, LeaseEnd):
            self._lease_end(message)
        elif isinstance(message, UsageAck):
            ok = self.journal.record_ack(message.lease, message.epoch, message.gpu_seconds, message.through)
            if not ok:
                self._refuse(
                    "ack",
                    message.lease,
                    f"no usage receipt of {message.gpu_seconds} GPU-seconds through {message.through} "
                    f"(epoch {message.epoch}) was sent by this node",
                )
        elif isinstance(message, Error):
            log.warning("coordinator.error", code=message.code, message=message.message)
        elif isinstance(message, Verify | VerifyMemory):
            self._verification(self._verify(message))
        elif isinstance(message, VerifyOpen) and self.prover.holds_memory(message.id):
            self._verification(self._open_memory(message))  # it takes time when blocks were not kept
        elif isinstance(message, VerifyOpen):
            try:
                self.session.send(self.prover.open(message, self.simulated))
            except ChallengeRefused as e:
                self._refuse("verify_open", None, str(e), challenge=message.id)

    # --- GPU verification

    def _verification(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._verifications.add(task)  # kept referenced until done
        task.add_done_callback(self._verifications.discard)

    async def _verify(self, challenge: Verify | VerifyMemory) -> None:
        """A challenge (compute or memory) on a GPU no lease holds (one a lease took meanwhile is refused)."""
        try:
            gpu = self.inventory.gpus[challenge.gpu].uuid if challenge.gpu < len(self.inventory.gpus) else None
            if gpu is not None and any(gpu in share.gpu_uuids for share in self.shares.values()):
                raise ChallengeRefused(f"GPU {challenge.gpu} is leased: it is verified once it is free")
            if isinstance(challenge, VerifyMemory):
                self.session.send(await self.prover.commit_memory(challenge, self.simulated))
            else:
                self.session.send(await self.prover.commit(challenge, self.simulated))
        except ChallengeRefused as e:
            self._refuse(challenge.type, None, str(e), challenge=challenge.id)

    async def _open_memory(self, request: VerifyOpen) -> None:
        try:
            self.session.send(await self.prover.open_memory(request, self.simulated))
        except ChallengeRefused as e:
            self._refuse("verify_open", None, str(e), challenge=request.id)

    # --- jobs

    def _refuse(
        self, of: str, lease: str | None, error: str, *, unable: bool = False, challenge: str | None = None
    ) -> None:
        log.warning("coordinator.refused", of=of, lease=lease, error=error)
        self.session.send(
            Ack(simulated=self.simulated, of=of, lease=lease, error=error, unable=unable, challenge=challenge)
        )

    def _held(self, lease: str) -> _Share | None:
        share = self.shares.get(lease)
        return None if share is None or share.released else share

    def _send_all(self, messages: Iterable[BaseModel]) -> None:
        for message in messages:
            self.session.send(message)

    def _dispatch(self, d: Dispatch) -> None:
        share = self.shares.get(d.lease)
        if share is None:
            self._take(d)
            return
        if d.epoch is not None and share.dispatch.epoch not in (None, d.epoch):
            self._supersede(share, d)
            return
        current = share.dispatch.job_number
        if share.released:
            error = "this node is releasing its share of this lease (its job is stopping)"
        elif d.gpus != len(share.gpu_uuids):
            error = f"this node holds {len(share.gpu_uuids)} GPUs for this lease, not {d.gpus}"
        elif d.job_number < current:
            error = f"job {d.job_number} is older than job {current}, which this node has for this lease"
        elif d.job_number > current and share.job_running:
            error = (
                f"job {current} of this lease still runs on this node; job {d.job_number} may start once it has ended"
            )
        else:
            error = None
        if error is not None:
            self._refuse("dispatch", d.lease, error)
            return
        if d.ends_at is not None and d.ends_at != share.meter.ends_at:
            self._send_all(share.meter.extend(d.ends_at, time.time()))
        if d.job_number > current:  # the lease's next job, on the GPUs it holds (billing goes on)
            share.dispatch, share.runner, share.task = d, None, None
            if not d.job_ended:
                self._start_job(share)
        elif share.runner is None and share.task is None and not d.job_ended and (d.secrets or d.checkpoint_key):
            share.dispatch = d  # the job waited for its secrets or checkpoint key: this dispatch may bring them
            self._start_job(share)
        elif d.checkpoint_key is not None and d.checkpoint_key != share.dispatch.checkpoint_key:
            # the key came while the job runs: its checkpoints go to the store from now on
            share.dispatch = share.dispatch.model_copy(
                update={"checkpoint_key": d.checkpoint_key, "checkpoint_signers": d.checkpoint_signers}
            )
        elif share.job_running and d.job.ray and d.cluster[:1] != share.dispatch.cluster[:1]:
            # the Ray cluster's head moved (a failover): this node's Ray node joins the new one
            assert share.runner is not None
            share.dispatch = d
            share.runner.rejoin(d)
            log.info("ray.rejoin", lease=d.lease, head=d.peers[0] if d.peers else None)
        elif d.cluster != share.dispatch.cluster:
            share.dispatch = share.dispatch.model_copy(update={"peers": d.peers, "cluster": d.cluster})
        # else a repeated dispatch (e.g. after a reconnect): never a second copy of the job
        self.session.send(Ack(simulated=self.simulated, of="dispatch", lease=d.lease))

    def _take(self, d: Dispatch) -> None:
        """The first dispatch of a lease: the node takes its share (billed from now) and runs the job."""
        samples = {s.uuid: s for s in self.gpus.sample()}
        busy = {uuid for share in self.shares.values() for uuid in share.gpu_uuids}
        free = [
            g.uuid
            for g in self.inventory.gpus
            if g.uuid not in busy and samples.get(g.uuid, None) is not None and samples[g.uuid].healthy
        ]
        if d.gpus > len(free):
            stopping = {uuid for share in self.shares.values() if share.released for uuid in share.gpu_uuids}
            soon = [g.uuid for g in self.inventory.gpus if g.uuid in stopping and g.uuid in samples]
            if d.gpus <= len(free) + len(soon):
                # the GPUs of a lease that just ended, its job still stopping: taken once it has
                if d.lease not in self.waiting:
                    log.info("share.waiting", lease=d.lease, gpus=d.gpus, free=len(free), stopping=len(soon))
                self.waiting[d.lease] = d
                return
            self._refuse(
                "dispatch", d.lease, f"{d.gpus} GPUs asked for, {len(free)} free and healthy on this node", unable=True
            )
            return
        self.waiting.pop(d.lease, None)
        uuids = free[: d.gpus]
        meter = LeaseMeter(
            self.journal,
            self.node,
            d.lease,
            d.share_epoch,
            d.gpus,
            self.usage_period_seconds,
            self.simulated,
            ends_at=d.ends_at,
        )
        share = self.shares[d.lease] = _Share(d, uuids, meter)
        self._send_all(meter.hold(time.time()))
        if not d.job_ended:
            self._start_job(share)
        self.session.send(Ack(simulated=self.simulated, of="dispatch", lease=d.lease))
        log.info("share.taken", lease=d.lease, gpus=uuids, job=d.job_number, ended=d.job_ended)

    def _supersede(self, share: _Share, d: Dispatch) -> None:
        """One job, one place: this node still holds a share of the lease from an earlier assignment
        (its share moved away, and back, while it kept running). That one stops now (billing ends)
        and the new one is taken once its job has stopped, never both at once."""
        log.warning("share.superseded", lease=d.lease, old_epoch=share.dispatch.epoch, new_epoch=d.epoch)
        if not share.released:
            share.released = True
            self._send_all(share.meter.release(time.time()))
        share.successor = d
        if share.job_running:
            assert share.runner is not None
            share.runner.cancel("the node's share of this lease was assigned again: the old job stops")
        else:
            del self.shares[d.lease]
            self._take(d)

    def _secrets(self, d: Dispatch) -> dict[str, str] | None:
        """The job's secrets opened with the node key (they live only in memory and in the job's
        environment); None, after telling the coordinator the job waits, when some are missing."""
        missing = [name for name in d.job.secrets if name not in d.secrets]
        if missing:
            self.session.send(
                JobStatus(
                    simulated=self.simulated,
                    lease=d.lease,
                    job_number=d.job_number,
                    state="waiting_secrets",
                    detail=f"waiting for the client's secrets sealed to this node ({', '.join(missing)})",
                    epoch=d.epoch,
                )
            )
            log.info("job.waiting_secrets", lease=d.lease, job=d.job_number, missing=len(missing))
            return None
        opened: dict[str, str] = {}
        for name in d.job.secrets:
            try:
                opened[name] = open_sealed(self.node, d.secrets[name])
            except SecretError as e:
                self.session.send(
                    JobStatus(
                        simulated=self.simulated,
                        lease=d.lease,
                        job_number=d.job_number,
                        state="waiting_secrets",
                        detail=f"secret {name}: {e}: waiting for the client's secrets sealed to this node",
                        epoch=d.epoch,
                    )
                )
                log.warning("job.secret_refused", lease=d.lease, job=d.job_number, name=name)
                return None
        return opened

    def _start_job(self, share: _Share) -> None:
        d = share.dispatch
        secrets = self._secrets(d) if d.job.secrets else {}
        if secrets is None:
            return  # a dispatch with the secrets starts it
        if self._waits_for_checkpoint_key(d):
            return  # a dispatch with the key starts it
        if secrets:  # into the job's environment only (the share keeps the sealed dispatch)
            d = d.model_copy(update={"job": d.job.model_copy(update={"env": d.job.env | secrets})})
        runner = JobRunner(
            d,
            share.gpu_uuids,
            JobDirs.of(self.settings.state_dir, d),
            simulated=self.simulated,
            send=lambda message: self._send_from_job(share, message),
            grace_seconds=self.settings.stop_grace_seconds,
            sandbox=self.sandbox,
            reach=ClusterPeer(host=self.advertise_addr or "127.0.0.1", ports=self.cluster_ports),
            ray_cpus=self.settings.ray_cpus
            or max(1, (os.cpu_count() or 1) * len(share.gpu_uuids) // max(1, len(self.inventory.gpus))),
        )
        share.runner = runner
        share.uploads = share.uploaded_chunks = 0  # counted per job
        share.task = asyncio.create_task(self._run_job(d.lease, share, runner))
        log.info("job.started", lease=d.lease, job=d.job_number)

    def _uses_store(self, dispatch: Dispatch) -> bool:
        """Checkpoints go through the coordinator's checkpoint store (once the lease's key is sealed
        to this node; until then they stay here), not through the gateway."""
        return self.settings.api_url is not None

    def _checkpoint_key(self, dispatch: Dispatch) -> bytes | None:
        """The lease's checkpoint key the client sealed to this node, opened with the node key; None
        when none is sealed to it (yet), or what is does not open."""
        if dispatch.checkpoint_key is None:
            return None
        try:
            return open_key(self.node, dispatch.checkpoint_key)
        except SecretError as e:
            log.warning("checkpoint.key_refused", lease=dispatch.lease, error=str(e))
            return None

    def _waits_for_checkpoint_key(self, d: Dispatch) -> bool:
        """The store holds a checkpoint of the lease and this node has no key to open it: the job
        waits (telling the coordinator why) rather than start over; the key's dispatch starts it."""
        if not self._uses_store(d) or not d.checkpoint_stored or self._checkpoint_key(d) is not None:
            return False
        self.session.send(
            JobStatus(
                simulated=self.simulated,
                lease=d.lease,
                job_number=d.job_number,
                state="waiting_secrets",
                detail="waiting for the client's checkpoint key sealed to this node (to restore its checkpoint)",
                epoch=d.epoch,
            )
        )
        log.info("job.waiting_checkpoint_key", lease=d.lease, job=d.job_number)
        return True

    def _store(self, lease: str, dispatch: Dispatch) -> CheckpointStoreClient | None:
        """The lease's checkpoint store, when the coordinator's API is known and the lease's key is
        sealed to this node."""
        key = self._checkpoint_key(dispatch) if self.settings.api_url is not None else None
        if self.settings.api_url is None or key is None:
            return None
        share = self.shares.get(lease)
        return CheckpointStoreClient(
            self.settings.api_url,
            self.node,
            lease,
            key,
            signers=set(dispatch.checkpoint_signers),
            rank=dispatch.rank,
            known=share.chunk_ids if share is not None else None,
        )

    async def _restore_from_store(self, lease: str, share: _Share, runner: JobRunner) -> None:
        """Before the job starts: the newest checkpoint of the store that checks out, into an empty
        checkpoint directory (a refused one falls back to the one before; the store unreachable is
        retried, then the job starts from what the dispatch carried)."""
        store = self._store(lease, share.dispatch)
        if store is None:
            return
        with store:
            for attempt in range(5):
                try:
                    stats = await asyncio.to_thread(store.restore, runner.dirs.checkpoint)
                except StoreError as e:
                    log.warning("checkpoint.restore_failed", lease=lease, attempt=attempt + 1, error=str(e))
                    await asyncio.sleep(1.0 + attempt)
                    continue
                for refused in stats.refused:
                    log.warning("checkpoint.refused", lease=lease, reason=refused)
                if stats.seq:
                    log.info(
                        "checkpoint.restored",
                        lease=lease,
                        seq=stats.seq,
                        files=stats.files,
                        bytes=stats.bytes,
                        seconds=round(stats.seconds, 3),
                        open_seconds=round(stats.seconds_open, 3),
                        hash_seconds=round(stats.seconds_hash, 3),
                        transfer_seconds=round(stats.seconds_transfer, 3),
                    )
                    # what was restored is not sent back
                    share.checkpoint_seen = fingerprint(runner.dirs.checkpoint)
                return

    @logs.scoped
    async def _run_job(self, lease: str, share: _Share, runner: JobRunner) -> None:
        logs.bind(lease=lease)
        try:
            await self._restore_from_store(lease, share, runner)
            final = await runner.run()
            log.info(
                "job.ended", lease=lease, job=runner.dispatch.job_number, state=final.state, exit_code=final.exit_code
            )
        finally:
            try:  # the last one, written just before the job ended
                if self._uses_store(share.dispatch):
                    await self._upload_checkpoint(lease, share, final=True)
                    if share.uploads:
                        log.info(
                            "checkpoint.uploads", lease=lease, checkpoints=share.uploads, chunks=share.uploaded_chunks
                        )
                else:
                    self._send_checkpoint(lease, share)
            finally:
                if share.ended is not None:
                    self.session.send(share.ended)
                    share.ended = None
            if share.released and self.shares.get(lease) is share:
                del self.shares[lease]  # released while the job ran: its GPUs are free only now
                if share.successor is not None:
                    self._take(share.successor)
                for waiting in list(self.waiting.values()):  # those that waited for these GPUs
                    if waiting.lease not in self.shares:
                        self._take(waiting)

    def _send_from_job(self, share: _Share, message: BaseModel) -> None:
        """A job runner's status or log line, to the coordinator; the job's end waits until its last
        checkpoint has gone (_run_job): a client told the job ended fetches that checkpoint, not the
        one before."""
        if isinstance(message, JobStatus) and message.state in JOB_ENDED:
            share.ended = message
        else:
            self.session.send(message)

    def _cancel(self, c: Cancel) -> None:
        """The coordinator releases the share (the lease ended or was closed, or the share moved):
        billing stops now, the job is stopped, and the GPUs are free once it has."""
        share = self._held(c.lease)
        if share is None and self.waiting.pop(c.lease, None) is not None:  # it never started here
            self.session.send(Ack(simulated=self.simulated, of="cancel", lease=c.lease))
            log.info("share.released", lease=c.lease, reason=c.reason, waited=True)
            return
        if share is None:
            self._refuse("cancel", c.lease, "this node holds no share of this lease")
            return
        share.released = True
        self._send_all(share.meter.release(time.time(), c.ends_at))
        if share.job_running:
            assert share.runner is not None
            share.runner.cancel(c.reason)
        else:
            d = share.dispatch
            if share.runner is None and d.job.secrets and not d.job_ended:  # it waited for its secrets: it ends
                self.session.send(
                    JobStatus(
                        simulated=self.simulated,
                        lease=d.lease,
                        job_number=d.job_number,
                        state="cancelled",
                        detail=f"released before the client's secrets came: {c.reason}"[:4096],
                        epoch=d.epoch,
                    )
                )
            del self.shares[c.lease]
        self.session.send(Ack(simulated=self.simulated, of="cancel", lease=c.lease))
        log.info("share.released", lease=c.lease, reason=c.reason)

    def _lease_end(self, message: LeaseEnd) -> None:
        share = self._held(message.lease)
        if share is None:
            self._refuse("lease_end", message.lease, "this node holds no share of this lease")
            return
        self._send_all(share.meter.extend(message.ends_at, time.time()))
        self.session.send(Ack(simulated=self.simulated, of="lease_end", lease=message.lease))

    async def _meter_clock(self) -> None:
        unacked_at_last_pass: set[tuple[str, int, int, int]] = set()
        last_pass = time.monotonic()
        while True:
            await asyncio.sleep(self.settings.meter_tick_seconds)
            if time.monotonic() - last_pass >= self.settings.usage_resend_seconds:
                unacked_at_last_pass = self._resend_unacked(unacked_at_last_pass)
                last_pass = time.monotonic()
            now = time.time()
            for lease, share in list(self.shares.items()):
                if not share.released:
                    self._send_all(share.meter.tick(now))
                self._send_checkpoint(lease, share)

    def _resend_unacked(self, unacked_before: set[tuple[str, int, int, int]]) -> set[tuple[str, int, int, int]]:
        """Sends again the newest receipts that were unacknowledged at the previous pass too (one
        sent just now is not repeated before its ack had a chance); returns what is unacknowledged now."""
        unacked = self.journal.unacked()
        again = [r for r in unacked if (r.lease, r.epoch, r.gpu_seconds, r.through) in unacked_before]
        if again:
            log.info("usage.resent", receipts=len(again))  # not acknowledged yet
            self._send_all(again)
        return {(r.lease, r.epoch, r.gpu_seconds, r.through) for r in unacked}

    @logs.scoped
    async def _upload_checkpoint(self, lease: str, share: _Share, *, final: bool = False) -> None:
        logs.bind(lease=lease)
        """Sends the checkpoint directory to the store when it changed (only the chunks the store
        lacks); a failure is retried at the next tick, a final one a few times now."""
        if share.runner is None:
            return
        if final and share.upload is not None and not share.upload.done():  # the one under way first
            await asyncio.gather(share.upload, return_exceptions=True)
        directory = share.runner.dirs.checkpoint
        for attempt in range(3 if final else 1):
            seen = fingerprint(directory)
            if seen == share.checkpoint_seen or not seen:
                return
            store = self._store(lease, share.dispatch)
            if store is None:
                return
            try:
                with store:
                    stats = await asyncio.to_thread(store.upload, directory)
            except (StoreError, OSError, ValueError) as e:
                log.warning("checkpoint.upload_failed", lease=lease, attempt=attempt + 1, error=str(e))
                if final:
                    await asyncio.sleep(1.0)
                continue
            share.checkpoint_seen = seen
            share.uploads += 1
            share.uploaded_chunks += stats.sent_chunks
            log.debug(  # a job checkpointing every few seconds uploads hundreds: summed up at its end
                "checkpoint.uploaded",
                lease=lease,
                seq=stats.seq,
                files=stats.files,
                bytes=stats.bytes,
                chunks=stats.chunks,
                sent_chunks=stats.sent_chunks,
            )
            return

    def _send_checkpoint(self, lease: str, share: _Share) -> None:
        """Sends the job's checkpoint directory when it changed, so another node can resume it."""
        if share.runner is None:
            return
        if self._uses_store(share.dispatch):  # through the checkpoint store, in the background
            if share.upload is None or share.upload.done():
                share.upload = asyncio.create_task(self._upload_checkpoint(lease, share))
            return
        if share.dispatch.checkpoint_key is not None:
            # The client sealed a key: its checkpoints leave this node encrypted or not at all, and
            # without the store (no --api) the gateway would carry them in the clear.
            if not share.kept_local_warned:
                share.kept_local_warned = True
                log.warning(
                    "checkpoint.kept_local",
                    lease=lease,
                    reason="the client sealed a checkpoint key and this worker has no --api (the coordinator's "
                    "checkpoint store): its checkpoints stay on this node",
                )
            return
        seen = fingerprint(share.runner.dirs.checkpoint)
        if seen == share.checkpoint_seen:
            return
        share.checkpoint_seen = seen
        try:
            files = snapshot(share.runner.dirs.checkpoint)
        except CheckpointTooLarge as e:
            log.warning("checkpoint.kept_local", lease=lease, reason=str(e))
            return
        if files:
            self.session.send(
                Checkpoint(simulated=self.simulated, lease=lease, files=files, epoch=share.dispatch.epoch)
            )
