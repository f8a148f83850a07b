"""The coordinator's Prometheus metrics, on a registry of its own (not the process's default one:
tests run several coordinators in one process). The loops count at the point where a thing
happens; /metrics (coordinator.api.metrics) serves them after the indexer's figures. Counters
count since this process started; docs/coordinator/index.md lists every metric."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

__all__ = ["WAITING_REASONS", "Metrics", "waiting_reason"]

# Why an open lease is not placed yet, as a label: the scheduler's reasons are sentences, these are classes.
WAITING_REASONS = ("no_job", "no_capacity", "chain_refused", "retrying")


def waiting_reason(placement_reason: str) -> str:
    """The class of a waiting lease's placement reason (coordinator.loops.placement writes both)."""
    if placement_reason.startswith("waiting for the client's job"):
        return "no_job"
    if placement_reason.startswith("the chain refused"):
        return "chain_refused"
    if placement_reason.startswith("assign_lease did not complete"):
        return "retrying"
    return "no_capacity"


class Metrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.placements = Counter(
            "gpunet_coordinator_placements", "leases placed on nodes (assign_lease landed)", registry=r
        )
        self.placement_seconds = Histogram(
            "gpunet_coordinator_placement_seconds",
            "seconds from this process first seeing a lease open and waiting to its assign_lease landing",
            buckets=(0.5, 1, 2, 5, 10, 30, 60, 300, 900, 3600),
            registry=r,
        )
        self.leases_waiting = Gauge(
            "gpunet_coordinator_leases_waiting",
            "open leases not placed yet, by why: no_job (the client's job not given), no_capacity (no "
            "qualifying nodes free), chain_refused (assign_lease refused), retrying (assign_lease did not complete)",
            ["reason"],
            registry=r,
        )
        for reason in WAITING_REASONS:
            self.leases_waiting.labels(reason).set(0)
        self.heartbeats = Counter("gpunet_coordinator_heartbeats", "worker heartbeats received", registry=r)
        self.failovers = Counter("gpunet_coordinator_failovers", "shares moved off a lost node", registry=r)
        self.slashes = Counter("gpunet_coordinator_slashes", "slashes sent, by fault", ["fault"], registry=r)
        self.settlement_queue = Gauge(
            "gpunet_coordinator_settlement_queue", "usage receipts pending settlement", registry=r
        )
        self.settlement_lag_seconds = Gauge(
            "gpunet_coordinator_settlement_lag_seconds",
            "age of the oldest unpaid usage behind a pending receipt (now minus its share's settled_until; 0: none)",
            registry=r,
        )
        self.transactions_in_flight = Gauge(
            "gpunet_coordinator_transactions_in_flight",
            "transactions sent and not yet confirmed or failed (settlements, placements, moves, closes)",
            registry=r,
        )
        self.transaction_window = Gauge(
            "gpunet_coordinator_transaction_window",
            "how many transactions may be in flight now (GPUNET_TX_WINDOW, halved on 429s and slow confirmations)",
            registry=r,
        )
        self.verifications = Counter(
            "gpunet_coordinator_verifications",
            "GPU verification outcomes recorded, by verdict",
            ["verdict"],
            registry=r,
        )
        self.attester_lamports = Gauge(
            "gpunet_coordinator_attester_lamports",
            "the attester's SOL balance in lamports, as last read (NaN: not read yet)",
            registry=r,
        )
        self.attester_lamports.set(float("nan"))
        self.stalls = Counter(
            "gpunet_coordinator_stalls", "stalls of this process noticed (its event loop blocked)", registry=r
        )
        self.rpc_errors = Counter("gpunet_coordinator_rpc_errors", "chain RPC calls that failed", registry=r)
        self.database_errors = Counter("gpunet_coordinator_database_errors", "database calls that failed", registry=r)
        self.leader = Gauge(
            "gpunet_coordinator_leader",
            "1 while this replica leads (places, fails over, settles, slashes); the sum over replicas is 0 when "
            "none leads",
            registry=r,
        )
        self.leader_term = Gauge(
            "gpunet_coordinator_leader_term", "the term this replica last led (0: never led)", registry=r
        )
        self.fenced_decisions = Counter(
            "gpunet_coordinator_fenced_decisions",
            "decisions this replica tried after its term ended, refused by the fencing check",
            registry=r,
        )
        # Served endpoints (coordinator.endpoints). Never labelled by lease or name: their number is
        # unbounded, and every value of a label is a series Prometheus keeps; the access log has them.
        self.endpoint_requests = Counter(
            "gpunet_endpoint_requests",
            "requests to served endpoints, by the status answered (the job's, or the relay's own refusal)",
            ["code"],
            registry=r,
        )
        self.endpoint_bytes = Counter(
            "gpunet_endpoint_bytes",
            "body bytes through served endpoints: in (requests, to the jobs), out (responses, to the callers)",
            ["direction"],
            registry=r,
        )
        for direction in ("in", "out"):
            self.endpoint_bytes.labels(direction)
        self.endpoint_latency_seconds = Histogram(
            "gpunet_endpoint_latency_seconds",
            "seconds from a request's arrival to its response's head from the job's node (the relay's time and "
            "the job's; a streamed body's length is not in it)",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
            registry=r,
        )
        self.endpoint_retries = Counter(
            "gpunet_endpoint_retries",
            "requests sent again to another node of the lease (the first failed before answering)",
            registry=r,
        )
        self.endpoint_streams = Gauge(
            "gpunet_endpoint_streams", "requests to served endpoints in flight now", registry=r
        )
        self.endpoint_log_dropped = Counter(
            "gpunet_endpoint_log_dropped",
            "access log entries not recorded (the ledger did not take them in time)",
            registry=r,
        )
        # The attester's balance as last read (None: not yet); /readyz compares it with the minimum.
        self.attester_balance: int | None = None

    def set_attester_balance(self, lamports: int) -> None:
        self.attester_balance = lamports
        self.attester_lamports.set(lamports)

    def render(self) -> str:
        return generate_latest(self.registry).decode()
