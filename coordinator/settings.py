"""The coordinator's settings: one typed object read from GPUNET_* environment variables."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict
from solders.pubkey import Pubkey

from gpunet.client import DEFAULT_WINDOW
from gpunet.cluster import pubsub_url
from gpunet.idl import PROGRAM_ID

__all__ = ["Settings", "settings_help"]


class Settings(BaseSettings):
    """Defaults run against gpunet-localnet on its default ports with an embedded PostgreSQL."""

    model_config = SettingsConfigDict(env_prefix="GPUNET_", extra="ignore")

    rpc_url: str = Field(default="http://127.0.0.1:8899", description="JSON-RPC of the cluster")
    ws_url: str = Field(
        default="",
        description="the cluster's PubSub WebSocket; unset: the RPC URL's (ws or wss, on its port + 1 when it "
        "names one: the Solana convention)",
    )
    database_url: str | None = Field(
        default=None,
        description="PostgreSQL, e.g. postgresql://gpunet:secret@db.example:5432/gpunet; "
        "unset: an embedded PostgreSQL with its data under the state dir's postgres/",
    )
    state_dir: Path = Field(
        default=Path(".state/coordinator"),
        description="the coordinator's own files: the embedded PostgreSQL's data in postgres/ here (and, unless set "
        "elsewhere, the fee-payer keys and the checkpoint store)",
    )
    program_id: str = Field(
        default=str(PROGRAM_ID),
        description="the gpunet program's address (default: the id in its IDL, Anchor.toml's); not a base58 "
        "public key: refused at start",
    )
    # `confirmed` is what the issue asks for; `finalized` trades latency for never seeing a rollback.
    commitment: Literal["confirmed", "finalized"] = Field(default="confirmed", description="confirmed or finalized")
    api_host: str = Field(default="127.0.0.1", description="the API's address")
    api_port: int = Field(default=8080, ge=0, le=65535, description="the API's port")
    api_cors_origins: str = Field(
        default="",
        description="web origins (scheme://host[:port], comma-separated, e.g. "
        "https://app.example,http://127.0.0.1:5173; * for any) whose pages may call the API from a browser: GET, "
        "and POST (and DELETE, an endpoint token's revocation) for the client routes, with the X-Gpunet-* "
        "signed-request headers; no credentials (requests are signed in headers, never by cookie). An origin "
        "with a path or a trailing slash is refused at start; unset: no CORS headers at all",
    )
    poll_seconds: float = Field(
        default=5.0,
        gt=0,
        description="backfill safety poll (the live subscription only wakes the indexer; this is the net "
        "when it is down)",
    )
    batch_size: int = Field(
        default=250, ge=1, le=1000, description="chain transactions per database transaction in a backfill"
    )

    # --- the coordinator's work (gateway, scheduler, failover, settlement)
    attester_keypair: Path = Field(
        default=Path("~/.config/solana/id.json"),
        description="the coordinator's key (`run` only): one of the config's attesters, to assign, settle and slash",
    )
    fee_payers: int = Field(
        default=8,
        ge=0,
        le=256,
        description="how many fee-payer keys the coordinator's transactions are spread over (round robin), so "
        "no single payer is a hot account; 0: the attester pays its own fees. The keys are fee-payer-N.json "
        "in the fee-payer dir, made when missing, and topped up from the attester (`gpunet coordinator "
        "fee-payers` lists them)",
    )
    tx_window: int = Field(
        default=DEFAULT_WINDOW,
        ge=1,
        le=1024,
        description="transactions the coordinator keeps in flight at once (settlements, placements, moves, "
        "closes, finalizations), sent without waiting for each other's confirmation; a share's receipts and a "
        "lease's steps stay in order. The window halves when the RPC answers 429 or a confirmation takes over "
        "twice the usual, and grows back by one per window of confirmations, up to this",
    )
    fee_payer_dir: Path | None = Field(
        default=None,
        description="where the fee-payer pool's keypair files fee-payer-0.json ... are kept (made when missing, "
        "mode 0600); unset: the state dir's fee-payers/",
    )
    fee_payer_min_lamports: int = Field(
        default=10_000_000,
        ge=0,
        description="a fee payer holding fewer lamports is topped up from the attester, or else skipped (with "
        "one warning) until it is funded again; when none holds enough, the attester pays",
    )
    fee_payer_top_up_lamports: int = Field(
        default=100_000_000,
        ge=0,
        description="the lamports a fee payer found under the minimum gets from the attester (one transfer the "
        "attester pays), as long as the attester keeps GPUNET_ATTESTER_MIN_LAMPORTS; 0: never (fund the payers "
        "yourself)",
    )
    attester_min_lamports: int = Field(
        default=50_000_000,
        ge=0,
        description="/readyz is not ready while the attester holds fewer lamports than this (it signs, and may "
        "pay for, every coordinator transaction); a warning is logged at each read",
    )
    attester_balance_seconds: float = Field(
        default=30.0, gt=0, description="how often the attester's balance is read (for /metrics and /readyz)"
    )
    gateway_host: str = Field(default="127.0.0.1", description="the worker gateway's address")
    gateway_port: int = Field(default=8910, ge=0, le=65535, description="the worker gateway's port")
    # --- replicas: any number share one database; one leads (coordinator.leader)
    leader_ttl_seconds: float = Field(
        default=3.0,
        gt=0,
        description="the leader's lease in the database: a replica takes the lead when the leader has not "
        "renewed it for this long (a SIGKILLed leader is replaced within about this plus "
        "GPUNET_LEADER_RENEW_SECONDS)",
    )
    leader_renew_seconds: float = Field(
        default=1.0,
        gt=0,
        description="how often the leader renews its lease (and a follower tries to take an expired one); "
        "more than half of GPUNET_LEADER_TTL_SECONDS is refused at start",
    )
    replica_id: str = Field(
        default="",
        description="this replica's name in the leader row and the logs, followed by a random suffix "
        "(so replicas given one name are still told apart); unset: host-pid",
    )
    advertise_gateway_url: str = Field(
        default="",
        description="the worker gateway's URL as the other replicas tell workers (ws://host:port/worker); "
        "unset: the address it listens on",
    )
    advertise_api_url: str = Field(
        default="",
        description="the API's URL as the other replicas point clients to; unset: "
        "http://GPUNET_API_HOST:GPUNET_API_PORT",
    )
    heartbeat_seconds: float = Field(default=2.0, gt=0, le=300, description="heartbeat interval asked of every worker")
    lost_after_seconds: float = Field(
        default=10.0, gt=0, description="a node silent this long is lost: its shares move to other nodes"
    )
    reconnect_grace_seconds: float = Field(
        default=30.0,
        ge=0,
        description="after a coordinator start, workers get this long to reconnect (they back off up to 30 s) "
        "before a node holding a share counts as lost; usage in that window is not held against them",
    )
    settle_seconds: float = Field(
        default=5.0, gt=0, description="how often the pending usage receipts are looked at (and the due ones settled)"
    )
    settle_interval_seconds: float = Field(
        default=3_600.0,
        ge=0,
        le=43_200,
        description="a share is settled once its newest receipt runs this long past its last settlement (and "
        "the amount is worth it: GPUNET_SETTLE_MIN_AMOUNT), at most 43200 (12 h); sooner when its lease's escrow "
        "needs it, before its share moves and at the lease's close",
    )
    settle_min_amount: int = Field(
        default=10_000,
        ge=0,
        description="the least unpaid amount (IO base units: 10000 is 0.01 IO) a regular settlement of a share "
        "is worth",
    )
    # The program moves only the shares of nodes found lost on chain (slashed, so jailed): without this,
    # lost nodes' shares stay put. To move shares without taking stake, set that fault's slash to 0 bps.
    slash_lost_nodes: bool = Field(
        default=True, description="slash a provider whose node is lost holding a lease share (MissedHeartbeats)"
    )
    accept_simulated: bool = Field(
        default=True, description="place leases on simulated GPUs (labelled so everywhere; false in production)"
    )
    stall_after_seconds: float = Field(
        default=1.0,
        gt=0,
        description="the coordinator's own loop late by more than this was a stall: nobody's silence",
    )
    max_lost_fraction: float = Field(
        default=0.5,
        gt=0,
        le=1,
        description="more of the fleet silent at once is a correlated outage: slashing pauses (1: never pause)",
    )
    fleet_window_seconds: float = Field(
        default=120.0, gt=0, description="the fleet, for that fraction: nodes heard within this long"
    )
    region_min_nodes: int = Field(
        default=3,
        ge=1,
        description="a region with at least this many nodes in the fleet is checked for a correlated outage on its own",
    )
    database_outage_exit_seconds: float = Field(
        default=60.0, gt=0, description="a database unreachable this long stops the coordinator (exit 5)"
    )
    close_grace_seconds: float = Field(
        default=8.0,
        ge=0,
        description="after a lease's end, before it is closed; after a close, before it is finalized "
        "(the workers' last reports)",
    )
    cluster_port: int = Field(
        default=29500,
        ge=1,
        le=65535,
        description="MASTER_PORT given to cluster jobs whose rank 0 runs an older worker that advertises no "
        "cluster ports (otherwise the first of rank 0's)",
    )
    checkpoint_dir: Path | None = Field(
        default=None,
        description="the checkpoint store (sealed chunks and signed manifests); unset: the state dir's checkpoints/",
    )
    checkpoint_s3_bucket: str | None = Field(
        default=None,
        description="keep the checkpoint store in this bucket of an S3-compatible object store instead "
        "(credentials: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or any boto3 source)",
    )
    checkpoint_s3_endpoint: str | None = Field(
        default=None, description="the object store's endpoint URL (MinIO, Ceph, ...); unset: AWS S3"
    )
    checkpoint_s3_prefix: str = Field(default="", description="a key prefix for the checkpoint store in the bucket")
    checkpoint_retention_seconds: float = Field(
        default=86_400.0, ge=0, description="a lease's stored checkpoints are deleted this long after it ended"
    )
    decisions_retention_seconds: float = Field(
        default=30 * 86_400.0,
        gt=0,
        description="the leaders' decisions log (each fenced decision, its term and subject) keeps this long "
        "(the chain keeps what was decided for good)",
    )
    log_lines_per_lease: int = Field(
        default=100_000,
        ge=1,
        description="the most log lines the ledger keeps of a lease: its jobs' newest (older ones are deleted as "
        "new ones come, every 1,000 lines); `lease logs --follow` goes on from the oldest kept",
    )
    checkpoint_quota_bytes: int = Field(
        default=64 * 2**30,
        ge=1,
        description="the most a lease's stored checkpoint chunks may take (older checkpoints' chunks are deleted "
        "as newer ones come)",
    )

    # --- served endpoints (coordinator/endpoints.py): a job's exposed HTTP ports at /endpoints/{lease}/{name}/
    endpoint_url: str = Field(
        default="",
        description="the base URL clients reach a lease's served endpoints at (/endpoints/{lease}/{name}/); "
        "unset: the API's URL. A hostname of its own keeps the jobs' pages out of the explorer's and the wallet "
        "app's origin",
    )
    endpoint_requests_per_second: float = Field(
        default=50.0,
        gt=0,
        description="the requests per second a lease's endpoints take in all (a token bucket, per replica); "
        "beyond it: 429 with Retry-After",
    )
    endpoint_burst: int = Field(
        default=100, ge=1, description="how many requests a lease's endpoints take at once above that rate"
    )
    endpoint_max_streams: int = Field(
        default=32,
        ge=1,
        description="requests in flight at once to a lease's endpoints (per replica); beyond it: 429 with Retry-After",
    )
    endpoint_max_body_bytes: int = Field(
        default=16 * 2**20,
        ge=0,
        description="the largest request body an endpoint takes (held whole, to be sent again to another node "
        "when one fails); larger: 413",
    )
    endpoint_timeout_seconds: float = Field(
        default=300.0,
        gt=0,
        description="how long a job may take to start its answer (and then to send each next piece of it)",
    )
    endpoint_health_seconds: float = Field(
        default=5.0,
        gt=0,
        description="how often each node of an endpoint requested in the last 10 minutes is checked (a stream "
        "to the job's port through the relay); a node failing a check or a request is skipped until one passes",
    )
    endpoint_log_per_lease: int = Field(
        default=10_000, ge=1, description="the most access log entries the ledger keeps of a lease (its newest)"
    )
    endpoint_sandbox: bool = Field(
        default=True,
        description="serve a job's pages under Content-Security-Policy: sandbox (an origin of their own in the "
        "browser: no reach into the coordinator's pages); off only where GPUNET_ENDPOINT_URL is a hostname of "
        "its own",
    )

    # --- rewards (coordinator/rewards.py; docs/program/costaking.md)
    reward_sample_seconds: int = Field(
        default=3_600,
        ge=1,
        le=86_400,
        description="uptime is sampled at every multiple of this (unix seconds): a node earns for each sample at "
        "which the coordinator saw it online by its heartbeats, verified and not jailed",
    )
    reward_establishment_epochs: int = Field(
        default=7,
        ge=0,
        le=365,
        description="a node registered fewer epochs than this before an epoch began earns "
        "GPUNET_REWARD_ESTABLISHMENT_BPS of the full reward in it",
    )
    reward_establishment_bps: int = Field(
        default=5_000, ge=0, le=10_000, description="the establishment rate, in basis points of the full reward"
    )
    rewards_every_seconds: float = Field(
        default=30.0,
        gt=0,
        le=3_600,
        description="how often the leader looks for ended epochs to post a root for and claims to crank",
    )

    # --- GPU verification (gpunet.verification; docs/supplier/verification.md)
    verify_every_seconds: float = Field(
        default=86_400.0,
        gt=0,
        description="a GPU verification holds this long (valid-until on chain, at most the config's maximum); nodes "
        "are verified again before it runs out (jittered), and after any inventory change",
    )
    verify_seconds: float = Field(
        default=8.0, gt=0, le=600, description="how long a challenge takes a real GPU at its registered model's speed"
    )
    verify_simulated_seconds: float = Field(
        default=1.5, gt=0, le=600, description="the same for simulated GPUs (at their model's simulated speed)"
    )
    verify_simulated_memory_seconds: float = Field(
        default=10.0,
        gt=0,
        le=600,
        description="how long a simulated GPU's memory check fill takes (gpunet.vram): a simulated GPU short of "
        "memory answers in a share of this, so it is caught only when that share is over the 1 s answer deadline "
        "(at 10 s: one holding half its model's VRAM or less every time, 60 % in about half its checks)",
    )
    verify_uncalibrated_wait: float = Field(
        default=4.0,
        ge=1,
        le=20,
        description="a real GPU whose model is not calibrated (gpunet coordinator calibrate) is waited for this "
        "many times its deadline: a right answer past the deadline is too_slow (no slash; the node stays "
        "unverified and is challenged again), its time recorded to calibrate the model from",
    )
    slash_failed_verification: bool = Field(
        default=True,
        description="slash (fault FailedVerification, which jails) a node that fails a challenge it took or "
        "refuses a share it could never take; a refused challenge or a differing inventory only leaves it "
        "unverified",
    )

    @field_validator("program_id")
    @classmethod
    def _program_id_is_a_pubkey(cls, value: str) -> str:
        try:
            Pubkey.from_string(value)
        except ValueError as e:
            raise ValueError(f"not a base58 public key: {value!r}") from e
        return value

    @field_validator("api_cors_origins")
    @classmethod
    def _origins_are_origins(cls, value: str) -> str:
        for origin in _origins(value):
            # a browser's Origin header is exactly scheme://host[:port]: a path or a trailing slash never matches
            if origin != "*" and not _ORIGIN.fullmatch(origin):
                raise ValueError(f"not a web origin (scheme://host[:port], no path): {origin!r}")
        return value

    @model_validator(mode="after")
    def _pubsub_follows_the_rpc_url(self) -> Settings:
        # before, an unset ws_url stayed the local node's while GPUNET_RPC_URL named another cluster:
        # the indexer then watched the wrong chain (or none)
        if not self.ws_url:
            self.ws_url = pubsub_url(self.rpc_url)
        return self

    @model_validator(mode="after")
    def _leader_renews_within_its_lease(self) -> Settings:
        if self.leader_renew_seconds * 2 > self.leader_ttl_seconds:
            raise ValueError(
                f"leader_renew_seconds ({self.leader_renew_seconds}) must be at most half of leader_ttl_seconds "
                f"({self.leader_ttl_seconds}): one late renewal must not cost the lead"
            )
        return self

    @property
    def program(self) -> Pubkey:
        return Pubkey.from_string(self.program_id)

    @property
    def api_url(self) -> str:
        """This coordinator's API as others reach it: the advertised URL, else the address it listens on."""
        return self.advertise_api_url or f"http://{self.api_host}:{self.api_port}"

    @property
    def endpoints_url(self) -> str:
        """Where clients reach the served endpoints: endpoint_url, else the API's URL (no trailing slash)."""
        return (self.endpoint_url or self.api_url).rstrip("/")

    @property
    def cors_origins(self) -> list[str]:
        """The origins GPUNET_API_CORS_ORIGINS names ([]: no CORS)."""
        return _origins(self.api_cors_origins)

    @property
    def fee_payer_path(self) -> Path:
        return (self.fee_payer_dir or self.state_dir / "fee-payers").expanduser()


_ORIGIN = re.compile(r"https?://[A-Za-z0-9.\-\[\]:]+")


def _origins(value: str) -> list[str]:
    return [o.strip() for o in value.split(",") if o.strip()]


def settings_help() -> str:
    """Every setting as its environment variable, default and meaning: what `--help` lists (generated
    here, so it never drifts from the settings themselves)."""
    prefix = Settings.model_config.get("env_prefix", "")
    lines = []
    for name, info in Settings.model_fields.items():
        default = "unset" if info.default in (None, "") else str(info.default)
        lines.append(f"{prefix}{name.upper()} (default {default}): {info.description}")
    return "\n\n".join(lines)
