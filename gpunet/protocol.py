"""The worker <-> coordinator WebSocket protocol: versioned JSON messages, strictly validated.

One JSON object per WebSocket text frame, tagged by "type". Each direction has its own set
of types (`parse_worker_message` on the gateway, `parse_coordinator_message` on the worker);
anything else is a `ProtocolError` whose message says what is wrong.

Session (worker side first):

    worker  -> hello{version, node_key, inventory, simulated, advertise_addr?, cluster_ports?}
    gateway -> challenge{nonce}                      (fresh random 32 bytes per session)
    worker  -> challenge_answer{signature}           (node key over `challenge_message`)
    gateway -> welcome{heartbeat_seconds, usage_period_seconds}
    then    worker: heartbeat, job_status, job_log, usage_receipt, checkpoint, ack
            gateway: dispatch, cancel, lease_end, ack{lease, epoch, gpu_seconds, through} (receipt recorded),
                     recorded{upto} (numbered job_status/job_log/checkpoint recorded), error

Job status, log lines and checkpoints are numbered per agent process (`origin`, `n`): the worker
keeps each until the gateway says it was recorded, and sends again, in order, what the gateway
could not record (its database down) or what a dropped session left unconfirmed.

A dispatch hands a node its share of a lease (its GPUs, billed from then on) and the lease's
current job (numbered 1, 2, ...; one at a time); cancel releases the share; lease_end moves the
instant after which the share is no longer billed (a top-up). The share's assignment `epoch` (the
transaction that gave it) comes with the dispatch and goes back with every job status, log line and
checkpoint of it, so nothing of a share the node no longer holds is taken for the current one. Its
on-chain counterpart, `share_epoch` (the lease's assignment number), is what the node's usage
receipts name: cumulative GPU-seconds of the share, signed every metering tick, the newest sent
every usage period (and the final one when the share is released).

A gateway closes a bad session with one of the CLOSE_* codes. A worker refuses a bad
coordinator message with ack{of, error} and keeps the session. Simulated GPUs: every worker
message carries `simulated`, so a simulated node can never pass for a real one.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import ipaddress
import json
import re
import secrets
import time
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    model_validator,
)
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.signature import Signature

from gpunet.errors import GpunetError
from gpunet.json_input import NotJson, parse_json
from gpunet.limits import MAX_GPUS_PER_NODE, MAX_LEASE_NODES
from gpunet.usage import Receipt

__all__ = [
    "CLOSE_MALFORMED",
    "CLOSE_NOT_LEADER",
    "CLOSE_NOT_REGISTERED",
    "CLOSE_UNAUTHORISED",
    "CLOSE_VERSION_MISMATCH",
    "MAX_CHECKPOINT_BYTES",
    "MAX_MESSAGE_BYTES",
    "PROTOCOL_VERSION",
    "REQUEST_AT_HEADER",
    "REQUEST_CLOCK_SKEW_SECONDS",
    "REQUEST_NONCE_HEADER",
    "REQUEST_SIGNATURE_HEADER",
    "REQUEST_WALLET_HEADER",
    "Ack",
    "Cancel",
    "Challenge",
    "ChallengeAnswer",
    "Checkpoint",
    "CheckpointFile",
    "ClusterPeer",
    "CoordinatorMessage",
    "Dispatch",
    "Error",
    "Expose",
    "GpuInfo",
    "GpuTelemetry",
    "Heartbeat",
    "Hello",
    "InputFile",
    "Inventory",
    "JobLog",
    "JobNumber",
    "JobSpec",
    "JobStatus",
    "LeaseEnd",
    "MemoryBlock",
    "PortRange",
    "ProtocolError",
    "Recorded",
    "RowOpening",
    "UsageAck",
    "UsageReceiptMessage",
    "Verify",
    "VerifyCommit",
    "VerifyMemory",
    "VerifyMemoryOpenings",
    "VerifyOpen",
    "VerifyOpenings",
    "Welcome",
    "WorkerMessage",
    "challenge_message",
    "encode",
    "job_message",
    "operator_message",
    "parse_coordinator_message",
    "parse_worker_message",
    "request_message",
    "sign_request",
]

PROTOCOL_VERSION = 1
MAX_MESSAGE_BYTES = 1 << 20
VERIFY_CHUNK = 256  # row digests per Merkle leaf of a GPU verification (gpunet.verification.CHUNK)

# WebSocket close codes (4000-4999 are the application's).
CLOSE_MALFORMED = 4400  # not JSON, unknown type, or a field out of its schema
CLOSE_UNAUTHORISED = 4401  # bad challenge signature, or a session replaced by a newer one
# The node key has no Node account on chain (never registered, or deregistered): the worker says so
# and what to do, and stops if it stays so (an older worker reads it as any refusal, and retries).
CLOSE_NOT_REGISTERED = 4404
CLOSE_VERSION_MISMATCH = 4426  # hello.version != PROTOCOL_VERSION
# This coordinator replica does not lead: the close reason is the leader's gateway URL (empty when
# no leader is known yet); the worker connects there, or to the next gateway it was given.
CLOSE_NOT_LEADER = 4421

CHALLENGE_DOMAIN_TAG = b"gpunet-session-v1\x00"
NONCE_BYTES = 32


class ProtocolError(GpunetError, ValueError):
    """A message that is not valid protocol; `close_code` is what a gateway closes with."""

    def __init__(self, message: str, close_code: int = CLOSE_MALFORMED) -> None:
        super().__init__(message)
        self.close_code = close_code


# --- field types


def _pubkey(value: str) -> str:
    try:
        Pubkey.from_string(value)
    except ValueError:
        raise ValueError("not a base58 public key") from None
    return value


def _signature(value: str) -> str:
    try:
        Signature.from_string(value)
    except ValueError:
        raise ValueError("not a base58 Ed25519 signature") from None
    return value


def _nonce(value: str) -> str:
    if not re.fullmatch(f"[0-9a-f]{{{2 * NONCE_BYTES}}}", value):
        raise ValueError(f"nonce must be {NONCE_BYTES} bytes as lowercase hex")
    return value


def _path_component(value: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", value):
        raise ValueError("must be one file name: letters, digits, '.', '_', '-' (no '/', no leading '.')")
    return value


def _relative_path(value: str) -> str:
    parts = value.split("/")
    if not 0 < len(parts) <= 8:
        raise ValueError("must be a relative path of 1 to 8 names")
    for part in parts:
        _path_component(part)
    return value


def _host(value: str) -> str:
    try:
        ipaddress.ip_address(value)
        return value
    except ValueError:
        pass
    labels = value.rstrip(".").split(".")
    if len(value) > 253 or not all(re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?", x) for x in labels):
        raise ValueError("must be an IP address or a DNS name")
    return value


PubkeyStr = Annotated[str, AfterValidator(_pubkey)]
HostStr = Annotated[str, AfterValidator(_host)]
SignatureStr = Annotated[str, AfterValidator(_signature)]
NonceHex = Annotated[str, AfterValidator(_nonce)]
U64 = Annotated[int, Field(ge=0, lt=2**64)]
I64 = Annotated[int, Field(ge=-(2**63), lt=2**63)]
ShortText = Annotated[str, Field(max_length=4096)]
JobNumber = Annotated[int, Field(ge=1, lt=2**31)]  # a lease's jobs count 1, 2, ...


class _Model(BaseModel):
    # strict: no "1" for 1 or 1 for true; extra fields are errors, not silently dropped.
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


# --- hardware


class GpuInfo(_Model):
    """What NVML (or the simulator) says one GPU is; the part that is hashed."""

    index: Annotated[int, Field(ge=0, lt=64)]
    uuid: Annotated[str, Field(min_length=1, max_length=96)]
    name: Annotated[str, Field(min_length=1, max_length=96)]  # NVML device name
    model: Annotated[str, Field(max_length=32)]  # gpunet.catalog name, "" if not listed
    vram_mib: Annotated[int, Field(ge=0)]
    compute_capability: Annotated[str, Field(pattern=r"^\d+\.\d+$")]
    pcie_gen: Annotated[int, Field(ge=0, le=16)]
    pcie_width: Annotated[int, Field(ge=0, le=64)]
    power_limit_w: Annotated[int, Field(ge=0)]
    # The GPU's identity beyond its UUID, where NVML has it (None: not supported, or simulated): one
    # physical GPU counts once across the network (GPU verification checks it).
    serial: Annotated[str, Field(max_length=64)] | None = None
    pci_bus_id: Annotated[str, Field(max_length=32)] | None = None
    board_id: Annotated[int, Field(ge=0)] | None = None


class Inventory(_Model):
    """A node's GPUs and software stack."""

    driver_version: Annotated[str, Field(max_length=64)]
    cuda_version: Annotated[str, Field(max_length=16)]
    simulated: bool
    gpus: Annotated[list[GpuInfo], Field(max_length=64)]

    def canonical_json(self) -> bytes:
        """Sorted keys, no whitespace, no unknown identity fields (None): the bytes `hash` covers
        (stable across Python versions, and across the identity fields' addition)."""
        return json.dumps(
            self.model_dump(mode="json", exclude_none=True), sort_keys=True, separators=(",", ":")
        ).encode()

    def hash(self) -> bytes:
        """SHA-256 of the canonical JSON: what NodeSpec.inventory_hash records on chain."""
        return hashlib.sha256(self.canonical_json()).digest()

    def differences(self, other: Inventory) -> list[str]:
        """Human-readable differences from `other` (e.g. the registered inventory), one per line."""
        out = [
            f"{name}: {getattr(other, name)!r} -> {getattr(self, name)!r}"
            for name in ("driver_version", "cuda_version", "simulated")
            if getattr(self, name) != getattr(other, name)
        ]
        mine, theirs = {g.uuid: g for g in self.gpus}, {g.uuid: g for g in other.gpus}
        out += [f"GPU {uuid} missing" for uuid in theirs if uuid not in mine]
        out += [f"GPU {uuid} new ({mine[uuid].name})" for uuid in mine if uuid not in theirs]
        for uuid in mine.keys() & theirs.keys():
            a, b = theirs[uuid].model_dump(), mine[uuid].model_dump()
            out += [f"GPU {uuid} {k}: {a[k]!r} -> {b[k]!r}" for k in a if a[k] != b[k]]
        return out


class GpuTelemetry(_Model):
    """One health sample of one GPU. `healthy` is false when NVML calls fail or the GPU is gone."""

    uuid: Annotated[str, Field(max_length=96)]
    healthy: bool
    problems: Annotated[list[ShortText], Field(max_length=16)] = []
    utilization_pct: Annotated[int, Field(ge=0, le=100)] | None = None
    memory_used_mib: Annotated[int, Field(ge=0)] | None = None
    temperature_c: Annotated[int, Field(ge=-100, le=200)] | None = None
    power_w: Annotated[float, Field(ge=0)] | None = None
    ecc_uncorrected: Annotated[int, Field(ge=0)] | None = None  # None: not supported (consumer GPUs)
    throttle_reasons: Annotated[list[Annotated[str, Field(max_length=64)]], Field(max_length=16)] = []
    # Added after protocol version 1 went out, so optional (an older worker sends none of them):
    # ECC error counts as NVML keeps them, volatile (since the driver loaded) and aggregate (the
    # GPU's lifetime); None: not supported.
    ecc_corrected: Annotated[int, Field(ge=0)] | None = None
    ecc_uncorrected_aggregate: Annotated[int, Field(ge=0)] | None = None
    ecc_corrected_aggregate: Annotated[int, Field(ge=0)] | None = None
    # Xid critical errors NVML reported since the agent started, and the last one's code; None: the
    # GPU's Xid events cannot be watched (NVML refused to register them).
    xid_errors: Annotated[int, Field(ge=0)] | None = None
    last_xid: Annotated[int, Field(ge=0)] | None = None


# --- jobs


class InputFile(_Model):
    """A file fetched into the job's working directory before it starts."""

    path: Annotated[str, AfterValidator(_relative_path)]
    url: Annotated[str, Field(pattern=r"^https?://", max_length=2048)]
    sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


MAX_CHECKPOINT_BYTES = 512 * 1024  # all files of one checkpoint, before base64 (fits a message)


class CheckpointFile(_Model):
    """One file of a job's checkpoint directory, carried between nodes so that a job moved after a
    node loss resumes where it stopped."""

    path: Annotated[str, AfterValidator(_relative_path)]
    sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
    data_b64: Annotated[str, Field(max_length=4 * MAX_CHECKPOINT_BYTES // 3 + 4)]

    def content(self) -> bytes:
        """The file's bytes, checked against its sha256 (ValueError when they differ)."""
        try:
            data = base64.b64decode(self.data_b64, validate=True)
        except binascii.Error:
            raise ValueError(f"checkpoint file {self.path}: not base64") from None
        if hashlib.sha256(data).hexdigest() != self.sha256:
            raise ValueError(f"checkpoint file {self.path}: content does not match its sha256")
        return data

    @classmethod
    def of(cls, path: str, data: bytes) -> CheckpointFile:
        return cls(path=path, sha256=hashlib.sha256(data).hexdigest(), data_b64=base64.b64encode(data).decode())


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
# Set by the worker itself; a job spec may not override them.
RESERVED_ENV = (
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "NODE_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "PET_MASTER_ADDR",
    "PET_MASTER_PORT",
    "PET_NNODES",
    "PET_NODE_RANK",
    "RAY_ADDRESS",
    "RAY_AUTH_MODE",
)
# The secret a Ray job's cluster authenticates with (Ray's token authentication): every request to
# its head (Jobs API, dashboard, GCS) and every Ray node joining it must carry it.
RAY_AUTH_TOKEN = "RAY_AUTH_TOKEN"


class Expose(_Model):
    """A port of the job its client exposes by name: an `http` one is served by the coordinator's
    relay at a stable URL per lease and name (`/endpoints/{lease}/{name}/`), a `tcp` one is reached
    with `gpunet lease forward` by name. Only what the job exposes is ever served."""

    name: Annotated[str, Field(pattern=r"^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$")]
    port: Annotated[int, Field(ge=1, le=65535)]
    protocol: Literal["http", "tcp"] = "http"


class JobSpec(_Model):
    """What to run: `command` (argv) on the host, or `image` (with `command` as its argv, if any)
    in docker/podman. The job finds its checkpoint directory in $GPUNET_CHECKPOINT_DIR."""

    command: Annotated[list[Annotated[str, Field(min_length=1, max_length=4096)]], Field(max_length=256)] = []
    image: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._/:@-]{0,254}$")] | None = None
    env: Annotated[dict[str, Annotated[str, Field(max_length=32768)]], Field(max_length=256)] = {}
    inputs: Annotated[list[InputFile], Field(max_length=64)] = []
    checkpoint_dir: Annotated[str, AfterValidator(_path_component)] = "checkpoints"
    restart_policy: Literal["never", "on-failure"] = "on-failure"
    max_restarts: Annotated[int, Field(ge=0, le=100)] = 3
    time_limit_seconds: Annotated[int, Field(gt=0)] | None = None
    # The names of the job's secrets: environment variables whose values the client seals to each
    # of the lease's nodes (gpunet.secrets) and gives apart from the job (POST /leases/{key}/secrets);
    # the node runs the job only once it holds them all (job status "waiting_secrets" until then).
    secrets: Annotated[list[Annotated[str, Field(max_length=128)]], Field(max_length=64)] = []
    # The lease as one Ray cluster (gpunet.raycluster): each node runs a Ray node with its GPUs,
    # rank 0 the head; `command`, if any, runs on the head as the cluster's driver (RAY_ADDRESS set),
    # again on a new head after a failover. The client submits more through the head's Jobs API.
    ray: bool = False
    # The job's ports its client exposes by name (served by the relay, see Expose).
    expose: Annotated[list[Expose], Field(max_length=16)] = []

    @model_validator(mode="after")
    def _check(self) -> JobSpec:
        if not self.command and self.image is None and not self.ray:
            raise ValueError("a job needs a command or an image (or ray)")
        if self.ray and RAY_AUTH_TOKEN not in self.secrets:
            # Ray's head runs whatever its Jobs API is sent: without a token, anyone who reaches it
            # would run code in the client's cluster, its secrets in reach.
            raise ValueError(
                f"a Ray job names the secret {RAY_AUTH_TOKEN}: only its holders reach the cluster "
                "(`gpunet lease job --ray` derives it from the wallet and seals it to the nodes)"
            )
        if len({e.name for e in self.expose}) != len(self.expose) or len({e.port for e in self.expose}) != len(
            self.expose
        ):
            raise ValueError("an exposed port's name or port is given twice")
        if len(set(self.secrets)) != len(self.secrets):
            raise ValueError("a secret is named twice")
        for name in self.secrets:
            if name in self.env:
                raise ValueError(f"{name} is both a plain env value and a secret")
        for name in [*self.env, *self.secrets]:
            if not _ENV_NAME.fullmatch(name):
                raise ValueError(f"env name {name!r} is not a valid variable name")
            if name in RESERVED_ENV or name.startswith("GPUNET_"):
                raise ValueError(f"env {name} is set by the worker and cannot be given by a job")
        return self


# --- worker -> coordinator


class _FromWorker(_Model):
    simulated: bool


class PortRange(_Model):
    """The ports `first`..`last` (inclusive) a node opens to its cluster peers for cluster traffic."""

    first: Annotated[int, Field(ge=1, le=65535)]
    last: Annotated[int, Field(ge=1, le=65535)]

    @model_validator(mode="after")
    def _check(self) -> PortRange:
        if self.last < self.first:
            raise ValueError(f"the port range {self.first}-{self.last} is empty")
        return self

    def __str__(self) -> str:
        return f"{self.first}-{self.last}"

    @classmethod
    def parse(cls, text: str) -> PortRange:
        """ "29500-29599" (or one port); ValueError saying what is wrong."""
        first, _, last = text.strip().partition("-")
        try:
            return cls(first=int(first), last=int(last or first))
        except ValueError as e:
            raise ValueError(f"{text!r} is not a port range such as 29500-29599: {e}") from None


class Hello(_FromWorker):
    type: Literal["hello"] = "hello"
    version: int
    node_key: PubkeyStr
    inventory: Inventory
    agent: Annotated[str, Field(max_length=64)] = "gpunet-worker"
    # How the node's cluster peers reach it: the address it advertises (given by its supplier, or
    # that of its interface that routes to the coordinator) and the ports it opens for cluster
    # traffic. None: an older worker (the coordinator then uses the session's remote address).
    advertise_addr: HostStr | None = None
    cluster_ports: PortRange | None = None
    # The port at the advertised address where clients reach the node's data plane directly
    # (gpunet.tunnel; they try it before the coordinator's relay). None: the relay only.
    tunnel_port: Annotated[int, Field(ge=1, le=65535)] | None = None


class ChallengeAnswer(_FromWorker):
    type: Literal["challenge_answer"] = "challenge_answer"
    signature: SignatureStr


class Heartbeat(_FromWorker):
    type: Literal["heartbeat"] = "heartbeat"
    healthy: bool
    gpus: Annotated[list[GpuTelemetry], Field(max_length=64)]
    running: Annotated[list[PubkeyStr], Field(max_length=64)] = []  # leases with a job running now
    # leases whose share this node holds (billed), a job running on it or not
    held: Annotated[list[PubkeyStr], Field(max_length=64)] = []


class _Recorded(_FromWorker):
    """A message the coordinator records (job status, log line, checkpoint). `origin` (random, one per
    agent process) and `n` (1, 2, ... in the order sent) let the gateway record each exactly once and
    in order: it answers `recorded{upto: n}`, or, when it could not record it (its database down),
    `error{resend_from: n}` and records nothing later until `n` comes again. None: an older agent
    (recorded as it arrives, best effort)."""

    origin: Annotated[str, Field(pattern=r"^[0-9a-f]{16}$")] | None = None
    n: Annotated[int, Field(ge=1, lt=2**63)] | None = None
    # The dispatch's `epoch` of the share the job runs on: one from an earlier assignment of the
    # lease to this node is refused (the share moved away, and perhaps back).
    epoch: SignatureStr | None = None


# waiting_secrets: the job names secrets not (yet) sealed to this node; it starts once the client's arrive.
# pulling: the node is fetching the job's image (its progress in the job's log); the time limit starts after.
JobState = Literal[
    "waiting_secrets",
    "pulling",
    "starting",
    "running",
    "restarting",
    "succeeded",
    "failed",
    "cancelled",
    "timed_out",
    "refused",
]
# A job's last states: nothing follows them on that node but a new job (or the same one restarted by failover).
JOB_ENDED: frozenset[JobState] = frozenset({"succeeded", "failed", "cancelled", "timed_out", "refused"})


class JobStatus(_Recorded):
    type: Literal["job_status"] = "job_status"
    lease: PubkeyStr
    job_number: JobNumber = 1
    state: JobState
    exit_code: int | None = None
    restarts: Annotated[int, Field(ge=0)] = 0
    detail: ShortText = ""


class JobLog(_Recorded):
    type: Literal["job_log"] = "job_log"
    lease: PubkeyStr
    job_number: JobNumber = 1
    stream: Literal["stdout", "stderr"]
    line: ShortText


class UsageReceiptMessage(_FromWorker):
    """A signed usage receipt: the share's cumulative GPU-seconds since its assignment `epoch`,
    through `through`; `signature` is the node key's Ed25519 signature (base58) over gpunet.usage's
    canonical 136-byte message, so the coordinator can settle it as is. Each receipt supersedes the
    ones before; `final` marks the last one of the share (its billing ended, possibly earlier than
    receipts sent before this news: that one is the one to settle)."""

    type: Literal["usage_receipt"] = "usage_receipt"
    lease: PubkeyStr
    epoch: Annotated[int, Field(ge=1, lt=2**64)]
    gpu_seconds: U64
    through: I64
    final: bool = False
    signature: SignatureStr

    def receipt(self) -> Receipt:
        return Receipt(self.epoch, self.gpu_seconds, self.through)

    def signature_bytes(self) -> bytes:
        return bytes(Signature.from_string(self.signature))

    def verify(self, node_key: Pubkey) -> bool:
        return self.receipt().verify(Pubkey.from_string(self.lease), node_key, self.signature_bytes())


class Checkpoint(_Recorded):
    """The job's checkpoint directory after it changed: the coordinator keeps the latest per lease."""

    type: Literal["checkpoint"] = "checkpoint"
    lease: PubkeyStr
    files: Annotated[list[CheckpointFile], Field(max_length=64)]


ChallengeId = Annotated[str, Field(pattern=r"^[0-9a-f]{32}$")]


class Ack(_FromWorker):
    """The worker's answer to a coordinator message it acted on (`error` None) or refused."""

    type: Literal["ack"] = "ack"
    of: Annotated[str, Field(max_length=64)]  # the type of the message answered ("?" if unreadable)
    lease: PubkeyStr | None = None
    error: ShortText | None = None
    # A refused dispatch the node could never take (it lacks the GPUs): the coordinator moves the share.
    unable: bool = False
    # The verification challenge refused (None: an older worker's refusal, of every challenge at that step).
    challenge: ChallengeId | None = None


Hash32Hex = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


class VerifyCommit(_FromWorker):
    """The Merkle root over the row digests of GPU verification challenge `id` (gpunet.verification)."""

    type: Literal["verify_commit"] = "verify_commit"
    id: ChallengeId
    root: Hash32Hex


class RowOpening(_Model):
    product: Annotated[int, Field(ge=0, lt=2**31)]
    row: Annotated[int, Field(ge=0, lt=2**31)]
    chunk: Annotated[list[Annotated[int, Field(ge=0, lt=2**32)]], Field(max_length=VERIFY_CHUNK)]
    path: Annotated[list[Hash32Hex], Field(max_length=48)]


class VerifyOpenings(_FromWorker):
    """The rows the verifier asked for (`verify_open`), each with its chunk of digests and Merkle path."""

    type: Literal["verify_openings"] = "verify_openings"
    id: ChallengeId
    openings: Annotated[list[RowOpening], Field(max_length=64)]


class MemoryBlock(_Model):
    """One block of a memory check (gpunet.vram): its chunk of digest words and the chunk's Merkle
    path; with its content (base64) when it is an input of a named block."""

    lane: Annotated[int, Field(ge=0, lt=2**31)]
    block: Annotated[int, Field(ge=0, lt=2**31)]
    content: Annotated[str, Field(max_length=87384, pattern=r"^[A-Za-z0-9+/]*={0,2}$")] | None = None  # <= 64 KiB
    chunk: Annotated[list[Annotated[int, Field(ge=0, lt=2**32)]], Field(max_length=VERIFY_CHUNK)]
    path: Annotated[list[Hash32Hex], Field(max_length=48)]


class VerifyMemoryOpenings(_FromWorker):
    """The blocks the verifier named (`verify_open` of a memory check) and their inputs' contents."""

    type: Literal["verify_memory_openings"] = "verify_memory_openings"
    id: ChallengeId
    blocks: Annotated[list[MemoryBlock], Field(max_length=1024)]  # each named block and its inputs


WorkerMessage = Annotated[
    Hello
    | ChallengeAnswer
    | Heartbeat
    | JobStatus
    | JobLog
    | UsageReceiptMessage
    | Checkpoint
    | Ack
    | VerifyCommit
    | VerifyOpenings
    | VerifyMemoryOpenings,
    Field(discriminator="type"),
]


# --- coordinator -> worker


class Challenge(_Model):
    type: Literal["challenge"] = "challenge"
    nonce: NonceHex


class Welcome(_Model):
    type: Literal["welcome"] = "welcome"
    heartbeat_seconds: Annotated[float, Field(gt=0, le=300)] = 2.0
    usage_period_seconds: Annotated[int, Field(gt=0, le=86_400)] = 60


class ClusterPeer(_Model):
    """One node of a cluster lease as its peers reach it: its advertised address and cluster ports
    (None: an older worker that advertised none)."""

    host: HostStr
    ports: PortRange | None = None


class Dispatch(_Model):
    """Hold `gpus` of this node for `lease` (billed from the first dispatch until a cancel or
    `ends_at`, whether a job runs or not) and run the lease's job number `job_number` on them.
    Cluster leases: this node is `rank` of `world_size`, and `peers[0]` ("host:port") is the
    rendezvous (MASTER_ADDR/MASTER_PORT); `cluster` (by rank) says how to reach every node."""

    type: Literal["dispatch"] = "dispatch"
    lease: PubkeyStr
    gpus: Annotated[int, Field(ge=1, le=MAX_GPUS_PER_NODE)]
    job: JobSpec
    # The same number again is a repeat (never a second copy); a higher one is the lease's next
    # job, run on the same share once the previous one has ended.
    job_number: JobNumber = 1
    # The job is over on this lease already (it ended here before the agent restarted, or before
    # this node took the share over): hold the share, do not run the job again.
    job_ended: bool = False
    # The lease's end (unix seconds): nothing after it is billed. None: not given (an older coordinator).
    ends_at: I64 | None = None
    rank: Annotated[int, Field(ge=0)] = 0
    world_size: Annotated[int, Field(ge=1, le=MAX_LEASE_NODES)] = 1
    peers: Annotated[
        list[Annotated[str, Field(pattern=r"^[A-Za-z0-9.:\[\]-]{1,253}:\d{1,5}$")]], Field(max_length=MAX_LEASE_NODES)
    ] = []
    cluster: Annotated[list[ClusterPeer], Field(max_length=MAX_LEASE_NODES)] = []
    # The lease's latest checkpoint (from the node it ran on before), written into an empty
    # checkpoint directory before the job starts.
    restore: Annotated[list[CheckpointFile], Field(max_length=64)] = []
    # The share's assignment epoch: the transaction that gave this node its share. A node that still
    # holds a share of the lease from another epoch stops that one before it takes this one.
    epoch: SignatureStr | None = None
    # The same assignment as the chain numbers it (`Assignment.epoch`: 1 for the lease's first share,
    # one more for each assignment or move since): the node's usage receipts name it.
    share_epoch: Annotated[int, Field(ge=1, lt=2**64)] = 1
    # The lease's checkpoint key sealed by the client to this node's key (gpunet.checkpoint.seal_key),
    # for checkpoints through the coordinator's checkpoint store; None: not sealed to this node yet.
    checkpoint_key: Annotated[str, Field(max_length=1024)] | None = None
    # The checkpoint store holds a checkpoint of this node's rank of the lease: a node without the
    # key waits for it (job state "waiting_secrets") rather than start the job over.
    checkpoint_stored: bool = False
    # The node keys that hold or held this node's rank of the lease: a restore takes only a manifest
    # of that rank one of them signed.
    checkpoint_signers: Annotated[list[PubkeyStr], Field(max_length=4096)] = []
    # The job's secrets sealed to this node's key (name -> base64 sealed box, gpunet.secrets), as the
    # client gave them; absent or incomplete: the node waits for them (a dispatch again brings them).
    secrets: Annotated[dict[str, Annotated[str, Field(max_length=65536)]], Field(max_length=64)] = {}

    @model_validator(mode="after")
    def _check(self) -> Dispatch:
        if self.rank >= self.world_size:
            raise ValueError(f"rank {self.rank} is not below world_size {self.world_size}")
        if self.world_size > 1 and len(self.peers) != self.world_size:
            raise ValueError(f"a cluster of {self.world_size} needs {self.world_size} peers, got {len(self.peers)}")
        if self.cluster and len(self.cluster) != len(self.peers):
            raise ValueError(f"cluster names {len(self.cluster)} nodes, peers {len(self.peers)}")
        return self


class Cancel(_Model):
    type: Literal["cancel"] = "cancel"
    lease: PubkeyStr
    reason: ShortText = ""
    # When the lease's billing ended, if it has (its end, or its close: unix seconds): the node's
    # last period ends there, not when this message arrives (the program pays nothing after it).
    ends_at: I64 | None = None


class LeaseEnd(_Model):
    """The lease's end moved (a top-up): the node's share is billed until `ends_at` (unix seconds)."""

    type: Literal["lease_end"] = "lease_end"
    lease: PubkeyStr
    ends_at: I64


class UsageAck(_Model):
    """The coordinator has durably recorded the usage receipt of `lease`'s share `epoch` with these
    `gpu_seconds` through `through` (or a newer one): the worker stops re-sending it."""

    type: Literal["ack"] = "ack"
    lease: PubkeyStr
    epoch: Annotated[int, Field(ge=1, lt=2**64)]
    gpu_seconds: U64
    through: I64


class Recorded(_Model):
    """The coordinator has recorded every numbered message of this session up to `n` (inclusive):
    the worker stops keeping them."""

    type: Literal["recorded"] = "recorded"
    upto: Annotated[int, Field(ge=1, lt=2**63)]


class Error(_Model):
    type: Literal["error"] = "error"
    message: ShortText
    code: int | None = None
    # The coordinator could not record numbered message `resend_from` (nor will it record any later
    # one until it comes again): the worker holds them and sends them again, in order, a bit later.
    resend_from: Annotated[int, Field(ge=1, lt=2**63)] | None = None


class Verify(_Model):
    """Prove GPU `gpu` (its inventory index) can run this workload (gpunet.verification): answer with
    `verify_commit` before the deadline, then open the rows asked for. Sent only for a GPU no lease
    holds; a worker refuses (an `ack` with an error) when one does meanwhile."""

    type: Literal["verify"] = "verify"
    id: ChallengeId
    gpu: Annotated[int, Field(ge=0, lt=64)]
    seed: Annotated[str, Field(pattern=r"^[0-9a-f]{32}$")]
    n: Annotated[int, Field(ge=1, le=16384)]
    depth: Annotated[int, Field(ge=1, le=262144)]
    products: Annotated[int, Field(ge=1, le=1_000_000)]
    expected_seconds: Annotated[float, Field(gt=0, le=3600)]


class VerifyMemory(_Model):
    """Prove GPU `gpu` holds its claimed model's memory (gpunet.vram): fill `lanes` lanes of `blocks`
    blocks of `block_bytes` from the seed, answer with `verify_commit` before the deadline, then open
    the blocks `verify_open` names ([lane, block] pairs) at once. Sent only for a GPU no lease holds."""

    type: Literal["verify_memory"] = "verify_memory"
    id: ChallengeId
    gpu: Annotated[int, Field(ge=0, lt=64)]
    seed: Annotated[str, Field(pattern=r"^[0-9a-f]{32}$")]
    lanes: Annotated[int, Field(ge=1, le=1 << 20)]
    blocks: Annotated[int, Field(ge=2, le=1 << 24)]
    block_bytes: Annotated[int, Field(ge=64, le=65536)]
    expected_seconds: Annotated[float, Field(gt=0, le=3600)]


class VerifyOpen(_Model):
    """The (product, row) pairs of challenge `id` to open, chosen after its commitment (of a memory
    check: its (lane, block) pairs)."""

    type: Literal["verify_open"] = "verify_open"
    id: ChallengeId
    # [product, row] pairs
    rows: Annotated[
        list[Annotated[list[Annotated[int, Field(ge=0, lt=2**31)]], Field(min_length=2, max_length=2)]],
        Field(max_length=64),
    ]


CoordinatorMessage = Annotated[
    Challenge
    | Welcome
    | Dispatch
    | Cancel
    | LeaseEnd
    | UsageAck
    | Recorded
    | Error
    | Verify
    | VerifyMemory
    | VerifyOpen,
    Field(discriminator="type"),
]

_worker_messages: TypeAdapter[Any] = TypeAdapter(WorkerMessage)
_coordinator_messages: TypeAdapter[Any] = TypeAdapter(CoordinatorMessage)


def _parse(adapter: TypeAdapter[Any], raw: str | bytes, direction: str) -> Any:
    if len(raw) > MAX_MESSAGE_BYTES:
        raise ProtocolError(f"message of {len(raw)} bytes is over the {MAX_MESSAGE_BYTES}-byte limit")
    try:
        value = parse_json(raw)
    except NotJson as e:  # nested too deep included: a clear refusal, never an error of the gateway's own
        raise ProtocolError(f"not JSON: {e}") from None
    if not isinstance(value, dict):
        raise ProtocolError("a message must be a JSON object")
    if "type" not in value:
        raise ProtocolError("message has no 'type'")
    try:
        return adapter.validate_python(value)
    except ValidationError as e:
        first = e.errors()[0]
        if first["type"] == "union_tag_invalid":
            raise ProtocolError(f"unknown {direction} message type {str(value['type'])[:64]!r}") from None
        where = ".".join(str(p) for p in first["loc"][1:]) or "message"
        raise ProtocolError(f"bad {value['type']} message: {where}: {first['msg']}") from None


def parse_worker_message(raw: str | bytes) -> Any:
    """A worker's message, or ProtocolError (CLOSE_VERSION_MISMATCH for a hello of another version)."""
    message = _parse(_worker_messages, raw, "worker")
    if isinstance(message, Hello) and message.version != PROTOCOL_VERSION:
        raise ProtocolError(f"protocol version {message.version} is not {PROTOCOL_VERSION}", CLOSE_VERSION_MISMATCH)
    return message


def parse_coordinator_message(raw: str | bytes) -> Any:
    """A coordinator's message, or ProtocolError."""
    return _parse(_coordinator_messages, raw, "coordinator")


def encode(message: BaseModel) -> str:
    return message.model_dump_json()


JOB_DOMAIN_TAG = b"gpunet-job-v1\x00"


def job_message(lease: Pubkey, spec: JobSpec, gpus_per_node: int | None = None, job_number: int = 1) -> bytes:
    """The bytes a client signs with its wallet to make `spec` its lease's job number `job_number`
    (and, optionally, the cluster shape: equal shares of `gpus_per_node`): domain tag, lease,
    canonical JSON. Only the lease's client can give it a job; the number keeps a signature of an
    earlier job from being replayed as a later one."""
    job = spec.model_dump(mode="json")
    if not job["secrets"]:
        del job["secrets"]  # a job without secrets signs as it did before they existed
    if not job["ray"]:
        del job["ray"]  # so does one that is no Ray cluster
    if not job["expose"]:
        del job["expose"]  # and one that exposes no port
    body = {"job": job, "gpus_per_node": gpus_per_node, "job_number": job_number}
    return JOB_DOMAIN_TAG + bytes(lease) + json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


OPERATOR_DOMAIN_TAG = b"gpunet-operator-v1\x00"


def operator_message(action: str, region: str | None, at: int) -> bytes:
    """The bytes the coordinator's operator signs (with the coordinator's attester key) to make it
    do `action` (e.g. "resume-slashing", optionally for one `region`) at unix time `at`: domain tag,
    canonical JSON. The time bounds a replay; the coordinator also refuses a signature it has seen."""
    body = {"action": action, "region": region, "at": at}
    return OPERATOR_DOMAIN_TAG + json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


REQUEST_DOMAIN_TAG = b"gpunet-request-v1\x00"
REQUEST_AT_HEADER = "X-Gpunet-Time-Ms"  # unix time in milliseconds the request was signed at
REQUEST_WALLET_HEADER = "X-Gpunet-Wallet"  # the signing wallet (base58): the lease's client, or a node's supplier
REQUEST_SIGNATURE_HEADER = "X-Gpunet-Signature"  # base58, the wallet's over request_message
REQUEST_NONCE_HEADER = "X-Gpunet-Nonce"  # random hex, signed: no two requests sign alike
REQUEST_CLOCK_SKEW_SECONDS = 60  # a signed request older (or newer) than this is refused


def request_message(method: str, target: str, body: bytes, at_ms: int, wallet: Pubkey, nonce: str = "") -> bytes:
    """The bytes a wallet signs to make one request of the coordinator's private routes (a lease's
    job view and logs, its files, its secrets): domain tag, then lines of the method (upper case),
    the target (path and, if any, "?" and the query exactly as sent), the body's SHA-256 (hex), the
    time in unix milliseconds, the wallet and a random nonce (two requests alike in the same
    millisecond — two followers of one lease — must not sign alike). The time bounds a replay
    (±60 s); the coordinator also refuses a signature it has seen."""
    digest = hashlib.sha256(body).hexdigest()
    return REQUEST_DOMAIN_TAG + f"{method.upper()}\n{target}\n{digest}\n{at_ms}\n{wallet}\n{nonce}".encode()


def sign_request(
    wallet: Keypair, method: str, target: str, body: bytes = b"", at_ms: int | None = None
) -> dict[str, str]:
    """The headers that sign one request (`target`: path and query as sent) with `wallet`."""
    at = time.time_ns() // 1_000_000 if at_ms is None else at_ms
    nonce = secrets.token_hex(8)
    signature = wallet.sign_message(request_message(method, target, body, at, wallet.pubkey(), nonce))
    return {
        REQUEST_AT_HEADER: str(at),
        REQUEST_WALLET_HEADER: str(wallet.pubkey()),
        REQUEST_NONCE_HEADER: nonce,
        REQUEST_SIGNATURE_HEADER: str(signature),
    }


def challenge_message(nonce_hex: str, node_key: Pubkey) -> bytes:
    """The bytes a worker signs to prove it holds `node_key`: domain tag, node key, nonce.
    The domain tag keeps this signature from ever being a valid usage receipt or transaction."""
    return CHALLENGE_DOMAIN_TAG + bytes(node_key) + bytes.fromhex(_nonce(nonce_hex))


def answer_challenge(node: Keypair, challenge: Challenge, simulated: bool) -> ChallengeAnswer:
    return ChallengeAnswer(
        simulated=simulated, signature=str(node.sign_message(challenge_message(challenge.nonce, node.pubkey())))
    )


def verify_challenge_answer(node_key: Pubkey, nonce_hex: str, answer: ChallengeAnswer) -> bool:
    return Signature.from_string(answer.signature).verify(node_key, challenge_message(nonce_hex, node_key))
