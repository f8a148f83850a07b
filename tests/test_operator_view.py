"""The operator's view (ops/): the Grafana dashboard and the Prometheus alert rules use only metric
names the code exports, collected from the real registries after a scrape (the coordinator's
metrics and /metrics gauges, the indexer's figures, a worker's operator port with NVML faked at its
boundary), so a renamed metric fails here; the name checker itself catches a misspelt name (its
control); promtool (Debian's `prometheus` package) checks the rules and runs their unit tests
(ops/prometheus/alerts.test.yml: each alert fires on its series, the healthy series beside it do not)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from coordinator.api.metrics import coordinator_metrics, render_metrics, render_readiness
from coordinator.metrics import Metrics
from gpunet.localnet import cache_dir
from tests.worker.fake_pynvml import FakeGpu, FakeNvml
from tests.worker.test_metrics_port import stand_in_agent
from worker.metrics import MetricsServer

OPS = Path(__file__).resolve().parents[1] / "ops"
DASHBOARD = OPS / "grafana" / "gpunet.json"
RULES = OPS / "prometheus" / "alerts.yml"

# Series Prometheus makes itself for every scrape target.
PROMETHEUS_OWN = {"up"}

_KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left", "group_right"}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads: its identifiers that are not functions, keywords,
    label names (in by/without/on/ignoring lists and {...} matchers), strings, durations or numbers."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # label values and strings
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # range and subquery durations
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)  # label lists
    names = set()
    for m in re.finditer(r"(?<![\w.])([A-Za-z_:][\w:]*)(\s*\()?", text):
        name, call = m.group(1), m.group(2)
        if call or name in _KEYWORDS or name.lower() in ("inf", "nan"):
            continue
        names.add(name)
    return names


def _dashboard_exprs() -> list[tuple[str, str]]:
    board = json.loads(DASHBOARD.read_text())
    return [(f"panel {p['title']!r}", t["expr"]) for p in board["panels"] if p["type"] != "row" for t in p["targets"]]


def _rule_exprs() -> list[tuple[str, str]]:
    rules = yaml.safe_load(RULES.read_text())
    return [(f"alert {r['alert']}", r["expr"]) for g in rules["groups"] for r in g["rules"]]


def _sample_names(text: str) -> set[str]:
    """The series names a scrape gives, and each gauge's name even with no sample yet (the last Xid
    code has none until a GPU reports one)."""
    families = list(text_string_to_metric_families(text))
    return {s.name for f in families for s in f.samples} | {f.name for f in families if f.type == "gauge"}


async def _worker_scrape(tmp_path: Path) -> str:
    """A worker's /metrics as its operator port serves it (MetricsServer), NVML faked at its boundary."""
    agent = stand_in_agent(tmp_path, FakeNvml(gpus=[FakeGpu()]))
    server = MetricsServer(agent, "127.0.0.1", 0)  # type: ignore[arg-type]
    try:
        status, _, body = server.answer("/metrics")
        assert status == 200
        return body.decode()
    finally:
        agent.journal.close()
        agent.gpus.close()


def _coordinator_scrape() -> str:
    """The coordinator's /metrics as its API renders it: the indexer's figures, the gauges of its
    state (a stand-in coordinator: only what coordinator_metrics reads) and its loops' registry."""
    metrics = Metrics()
    metrics.slashes.labels("MissedHeartbeats").inc()  # a labelled family shows its samples once used
    metrics.verifications.labels("passed").inc()
    metrics.placement_seconds.observe(1.0)
    coordinator = SimpleNamespace(
        fleet=SimpleNamespace(nodes={}, online=lambda key: True),
        outages=SimpleNamespace(slashing_paused=False, paused_regions={}, database_up=True),
        gateway=SimpleNamespace(sessions={}),
        settings=SimpleNamespace(attester_min_lamports=50_000_000),
        metrics=metrics,
    )
    state = {
        "events_indexed": 1,
        "transactions_indexed": 1,
        "failed_transactions_skipped": 0,
        "lines_skipped": 0,
        "backfill_runs": 1,
        "reconnects": 0,
        "synced_slot": 10,
        "synced_age": 0.5,
        "cursor_slot": 10,
    }
    readiness = render_readiness({"database": "ok", "rpc": "does not answer", "attester_balance": "ok"})
    return render_metrics(state, 12) + coordinator_metrics(coordinator) + readiness  # type: ignore[arg-type]


@pytest.fixture
def exported(tmp_path) -> set[str]:
    return _sample_names(_coordinator_scrape()) | _sample_names(asyncio.run(_worker_scrape(tmp_path)))


def test_every_metric_the_dashboard_and_the_alerts_use_is_exported(exported: set[str]) -> None:
    assert "gpunet_coordinator_placements_total" in exported and "gpunet_worker_gpu_xid_errors_total" in exported
    assert "gpunet_indexer_lag_seconds" in exported  # the three sources were scraped
    known = exported | PROMETHEUS_OWN
    used = {(where, name) for where, expr in _dashboard_exprs() + _rule_exprs() for name in metric_names(expr)}
    assert len({name for _, name in used}) >= 30, "the checker found the names (not an empty pass)"
    unknown = sorted((where, name) for where, name in used if name not in known)
    assert unknown == [], f"not exported by the coordinator, the indexer or the worker: {unknown}"
    # The alerts the operator must have, by what they read.
    rule_names = {name for _, expr in _rule_exprs() for name in metric_names(expr)}
    for needed in (
        "gpunet_coordinator_leader",
        "gpunet_coordinator_ready",
        "up",
        "gpunet_coordinator_slashing_paused",
        "gpunet_coordinator_attester_lamports",
        "gpunet_coordinator_settlement_lag_seconds",
        "gpunet_coordinator_database_up",
        "gpunet_coordinator_rpc_errors_total",
        "gpunet_worker_gpu_xid_errors_total",
        "gpunet_worker_gpu_ecc_errors",
    ):
        assert needed in rule_names, needed


def test_the_name_checker_catches_a_misspelt_metric_and_reads_promql_s_parts(exported: set[str]) -> None:
    typo = 'sum by (instance) (rate(gpunet_coordinator_placement_total{job="x"}[5m])) > 0'  # placements
    assert metric_names(typo) == {"gpunet_coordinator_placement_total"}
    assert not metric_names(typo) <= exported  # the control: a renamed metric is not exported
    assert metric_names(
        "histogram_quantile(0.99, sum by (le) (rate(gpunet_coordinator_placement_seconds_bucket[15m]))) "
        'or on (instance) absent(up{job="gpunet-coordinator"}) unless count(x:y == 0) or vector(0)'
    ) == {"gpunet_coordinator_placement_seconds_bucket", "up", "x:y"}


def test_the_dashboard_is_a_grafana_dashboard_of_prometheus_panels() -> None:
    board = json.loads(DASHBOARD.read_text())
    panels = board["panels"]
    assert board["uid"] == "gpunet-operator" and board["title"] == "gpunet"
    assert len({p["id"] for p in panels}) == len(panels), "panel ids are unique"
    assert [v["name"] for v in board["templating"]["list"]] == ["datasource"]
    for p in panels:
        if p["type"] == "row":
            continue
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert p["targets"] and all(t["expr"].strip() for t in p["targets"]), p["title"]
        assert len({t["refId"] for t in p["targets"]}) == len(p["targets"]), p["title"]


def _promtool() -> str | None:
    """promtool on PATH, else where scripts/promtool-setup puts it."""
    cached = cache_dir() / "promtool" / "promtool"
    return shutil.which("promtool") or (str(cached) if os.access(cached, os.X_OK) else None)


PROMTOOL = _promtool()


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not found: run scripts/promtool-setup (Debian's prometheus)")
def test_promtool_checks_the_rules_and_runs_their_unit_tests() -> None:
    assert PROMTOOL is not None
    check = subprocess.run([PROMTOOL, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    assert f"SUCCESS: {len(_rule_exprs())} rules found" in check.stdout
    tests = subprocess.run(
        [PROMTOOL, "test", "rules", "alerts.test.yml"],
        cwd=RULES.parent,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert tests.returncode == 0 and "SUCCESS" in tests.stdout, tests.stdout + tests.stderr
