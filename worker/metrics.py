"""The worker's own operator port (GPUNET_WORKER_METRICS_PORT): `/metrics` in the Prometheus text
format, each GPU's telemetry sampled at the scrape (the same sample a heartbeat sends), its jobs by
state, its usage journal and its session; `/healthz` (the process answers) and `/readyz` (connected
to the coordinator with every GPU healthy; 503 with the checks that failed). A few lines of
HTTP/1.1 on asyncio: the worker has no web framework and needs none for three GET routes."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gpunet.protocol import JobState

if TYPE_CHECKING:
    from worker.agent import Agent

__all__ = ["MetricsServer"]

_JOB_STATES: tuple[JobState, ...] = JobState.__args__  # type: ignore[attr-defined]

_GPU_FIELDS = (  # (metric, GpuTelemetry field, help)
    ("gpunet_worker_gpu_utilization_percent", "utilization_pct", "GPU utilisation, percent"),
    ("gpunet_worker_gpu_memory_used_mib", "memory_used_mib", "GPU memory used, MiB"),
    ("gpunet_worker_gpu_temperature_celsius", "temperature_c", "GPU temperature, degrees Celsius"),
    ("gpunet_worker_gpu_power_watts", "power_w", "GPU power draw, watts"),
    ("gpunet_worker_gpu_last_xid", "last_xid", "the code of the last Xid critical error NVML reported"),
)

_ECC_COUNTS = (  # (GpuTelemetry field, error label, counter label)
    ("ecc_corrected", "corrected", "volatile"),
    ("ecc_uncorrected", "uncorrected", "volatile"),
    ("ecc_corrected_aggregate", "corrected", "aggregate"),
    ("ecc_uncorrected_aggregate", "uncorrected", "aggregate"),
)


class _AgentCollector(Collector):
    """Reads the agent at each scrape: nothing is cached, so a scrape is the state now."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent

    def collect(self) -> Iterator[Metric]:
        agent = self.agent
        samples = agent.gpus.sample()
        index = {g.uuid: str(g.index) for g in agent.inventory.gpus}
        healthy = GaugeMetricFamily(
            "gpunet_worker_gpu_healthy", "1 when NVML reads the GPU without problems", labels=["gpu", "uuid"]
        )
        for s in samples:
            healthy.add_metric([index.get(s.uuid, ""), s.uuid], int(s.healthy))
        yield healthy
        for name, field, help_text in _GPU_FIELDS:
            family = GaugeMetricFamily(name, help_text, labels=["gpu", "uuid"])
            for s in samples:
                value = getattr(s, field)
                if value is not None:  # not supported by this GPU: no sample rather than a made-up one
                    family.add_metric([index.get(s.uuid, ""), s.uuid], float(value))
            yield family
        # NVML's own counts: volatile ones restart at zero when the driver reloads, so a gauge.
        ecc = GaugeMetricFamily(
            "gpunet_worker_gpu_ecc_errors",
            "ECC errors as NVML counts them: error corrected or uncorrected; counter volatile (since the driver "
            "loaded) or aggregate (the GPU's life)",
            labels=["gpu", "uuid", "error", "counter"],
        )
        xid = CounterMetricFamily(
            "gpunet_worker_gpu_xid_errors",
            "Xid critical errors NVML reported since the agent started (absent: the GPU's events cannot be watched)",
            labels=["gpu", "uuid"],
        )
        for s in samples:
            gpu = [index.get(s.uuid, ""), s.uuid]
            for field, error, counter in _ECC_COUNTS:
                if (count := getattr(s, field)) is not None:
                    ecc.add_metric([*gpu, error, counter], count)
            if s.xid_errors is not None:
                xid.add_metric(gpu, s.xid_errors)
        yield ecc
        yield xid
        jobs = GaugeMetricFamily("gpunet_worker_jobs", "jobs of the shares this node holds, by state", labels=["state"])
        states = [s.runner.state for s in agent.shares.values() if not s.released and s.runner is not None]
        for state in _JOB_STATES:
            jobs.add_metric([state], states.count(state))
        yield jobs
        yield GaugeMetricFamily(
            "gpunet_worker_shares_held",
            "lease shares this node holds (billed)",
            value=sum(1 for s in agent.shares.values() if not s.released),
        )
        yield GaugeMetricFamily(
            "gpunet_worker_journal_unacked_receipts",
            "usage receipts the coordinator has not acknowledged yet",
            value=len(agent.journal.unacked()),
        )
        size = agent.journal.path.stat().st_size if agent.journal.path.exists() else 0
        yield GaugeMetricFamily("gpunet_worker_journal_bytes", "size of the usage journal file", value=size)
        yield GaugeMetricFamily(
            "gpunet_worker_session_connected",
            "1 while the session with the coordinator is up",
            value=int(agent.session.connected.is_set()),
        )


class MetricsServer:
    def __init__(self, agent: Agent, host: str, port: int) -> None:
        self.agent, self.host, self.port = agent, host, port
        self.registry = CollectorRegistry()
        self.registry.register(_AgentCollector(agent))
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def answer(self, path: str) -> tuple[int, str, bytes]:
        """(status, content type, body) for a GET of `path`."""
        if path == "/metrics":
            return 200, "text/plain; version=0.0.4; charset=utf-8", generate_latest(self.registry)
        if path == "/healthz":
            return 200, "application/json", b'{"status": "ok"}'
        if path == "/readyz":
            session = self.agent.session
            checks = {
                "session": "ok" if session.connected.is_set() else _not_connected(session.refusal),
                "gpus": "ok",
            }
            sick = [s.uuid for s in self.agent.gpus.sample() if not s.healthy]
            if sick:
                checks["gpus"] = f"unhealthy: {', '.join(sick)}"
            ready = all(v == "ok" for v in checks.values())
            body = json.dumps({"status": "ready" if ready else "not_ready", "checks": checks}).encode()
            return (200 if ready else 503), "application/json", body
        return 404, "application/json", json.dumps({"error": f"no route {path} (/metrics, /healthz, /readyz)"}).encode()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, TimeoutError, asyncio.IncompleteReadError, ValueError):
            async with asyncio.timeout(10):
                request = await reader.readuntil(b"\r\n\r\n")
            method, target, _ = request.split(b"\r\n", 1)[0].decode("latin-1").split(" ", 2)
            if method != "GET":
                status, kind, body = 405, "application/json", b'{"error": "GET only"}'
            else:
                status, kind, body = self.answer(target.split("?", 1)[0])
            reason = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 503: "Service Unavailable"}[status]
            head = f"HTTP/1.1 {status} {reason}\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\n"
            writer.write(head.encode() + b"Connection: close\r\n\r\n" + body)
            await writer.drain()
        writer.close()


def _not_connected(refusal: str | None) -> str:
    """/readyz's session check while there is no session: with the coordinator's reason when it
    refused one (a node not registered on chain, say), which the supplier has to act on."""
    return "not connected to the coordinator" + (f": refused ({refusal})" if refusal else "")
