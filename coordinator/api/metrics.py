"""/metrics in the Prometheus text format, from the indexer's row in the ledger (so the API and
the indexer may run in different processes), and, where the API runs inside the coordinator, the
coordinator's own state (`coordinator_metrics`: the gauges below, then what its loops count,
`coordinator.metrics`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from coordinator.service import Coordinator

__all__ = ["coordinator_metrics", "render_metrics", "render_readiness"]

_COUNTERS = (
    ("gpunet_indexer_events_indexed_total", "events_indexed", "gpunet events written to the ledger"),
    ("gpunet_indexer_transactions_indexed_total", "transactions_indexed", "program transactions indexed"),
    (
        "gpunet_indexer_failed_transactions_skipped_total",
        "failed_transactions_skipped",
        "failed transactions skipped (they changed nothing)",
    ),
    (
        "gpunet_indexer_lines_skipped_total",
        "lines_skipped",
        "Program data lines skipped: another program's or malformed",
    ),
    ("gpunet_indexer_backfill_runs_total", "backfill_runs", "completed backfill passes"),
    ("gpunet_indexer_reconnects_total", "reconnects", "logsSubscribe reconnections"),
)


def _number(value: float | int | None) -> str:
    return "NaN" if value is None else repr(float(value)) if isinstance(value, float) else str(value)


def render_metrics(state: dict[str, Any], head_slot: int | None) -> str:
    lines = []
    for name, column, help_text in _COUNTERS:
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} counter", f"{name} {_number(state[column])}"]
    synced = state.get("synced_slot")
    lag_slots = max(0, head_slot - synced) if head_slot is not None and synced is not None else None
    age = state.get("synced_age")
    lines += [
        "# HELP gpunet_indexer_lag_slots chain head minus the slot up to which every program transaction is proven"
        " indexed"
        " (an upper bound on the lag: between passes it grows with the head even when nothing is missing)",
        "# TYPE gpunet_indexer_lag_slots gauge",
        f"gpunet_indexer_lag_slots {_number(lag_slots)}",
        "# HELP gpunet_indexer_lag_seconds seconds since the indexer last proved itself caught up with the chain head"
        " (an upper bound on the lag; a pass runs on every program transaction and every GPUNET_POLL_SECONDS)",
        "# TYPE gpunet_indexer_lag_seconds gauge",
        f"gpunet_indexer_lag_seconds {_number(float(age) if age is not None else None)}",
        "# HELP gpunet_indexer_cursor_slot slot of the last indexed transaction",
        "# TYPE gpunet_indexer_cursor_slot gauge",
        f"gpunet_indexer_cursor_slot {_number(state.get('cursor_slot'))}",
    ]
    return "\n".join(lines) + "\n"


def render_readiness(checks: dict[str, str]) -> str:
    """/readyz's checks as gauges, one sample per check, so an alert can say which one fails (a
    probe of /readyz itself needs an exporter Prometheus does not have by default)."""
    lines = [
        "# HELP gpunet_coordinator_ready 1 while this /readyz check passes (0: /readyz answers 503 with why)",
        "# TYPE gpunet_coordinator_ready gauge",
    ]
    lines += [f'gpunet_coordinator_ready{{check="{name}"}} {int(state == "ok")}' for name, state in checks.items()]
    return "\n".join(lines) + "\n"


def coordinator_metrics(coordinator: Coordinator) -> str:
    """What an operator alerts on: slashing paused by a correlated outage, the database lost, the
    fleet the gateway hears."""
    fleet, outages = coordinator.fleet, coordinator.outages
    gauges = (
        (
            "gpunet_coordinator_slashing_paused",
            int(outages.slashing_paused),
            "1 while a correlated outage pauses slashing and moving shares (GET /workers says why)",
        ),
        (
            "gpunet_coordinator_regions_paused",
            len(outages.paused_regions),
            "regions where a correlated outage pauses slashing (GET /workers lists them)",
        ),
        (
            "gpunet_coordinator_database_up",
            int(outages.database_up),
            "0 while the coordinator's database does not answer (decisions wait; it exits after "
            "GPUNET_DATABASE_OUTAGE_EXIT_SECONDS)",
        ),
        ("gpunet_coordinator_workers_connected", len(coordinator.gateway.sessions), "worker sessions on the gateway"),
        (
            "gpunet_coordinator_nodes_online",
            sum(1 for key in fleet.nodes if fleet.online(key)),
            "nodes heard within lost_after",
        ),
        (  # the alert on the attester's balance compares with it (ops/prometheus/alerts.yml)
            "gpunet_coordinator_attester_min_lamports",
            coordinator.settings.attester_min_lamports,
            "GPUNET_ATTESTER_MIN_LAMPORTS: /readyz is not ready while the attester holds less",
        ),
    )
    lines = []
    for name, value, help_text in gauges:
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge", f"{name} {value}"]
    return "\n".join(lines) + "\n" + coordinator.metrics.render()
