"""The worker's operator port (worker/metrics.py) over real HTTP, with NVML faked at its module
boundary (tests/worker/fake_pynvml.py) and the agent's parts it reads: each GPU's figures as NVML
gives them (none made up for what a GPU does not report), a GPU with uncorrected ECC errors makes
the worker not ready (the control: the same worker with a clean GPU is ready), an Xid event and
ECC errors move the counters of the GPU that had them and not the other's, and anything but a GET
of its three routes is refused."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.worker.fake_pynvml import FakeGpu, FakeNvml
from worker.journal import Journal
from worker.metrics import MetricsServer
from worker.nvml import NvmlGpus

CLEAN = FakeGpu(uuid="GPU-aaaaaaaa-0000-0000-0000-000000000000", ecc=None)  # no ECC: a consumer card
SECOND = "GPU-bbbbbbbb-0000-0000-0000-000000000000"
THIRD = "GPU-cccccccc-0000-0000-0000-000000000000"


def stand_in_agent(tmp_path: Path, nvml: FakeNvml) -> SimpleNamespace:
    """What the metrics server reads of an agent (its GPUs through NVML faked at the boundary, its
    shares, journal and session), connected and holding no share."""
    gpus = NvmlGpus(nvml.module())
    connected = asyncio.Event()
    connected.set()
    return SimpleNamespace(
        gpus=gpus,
        inventory=gpus.inventory(),
        shares={},
        journal=Journal(tmp_path / "usage.jsonl"),
        session=SimpleNamespace(connected=connected, refusal=None),
    )


async def _serve(tmp_path: Path, nvml: FakeNvml) -> tuple[MetricsServer, SimpleNamespace]:
    agent = stand_in_agent(tmp_path, nvml)
    server = MetricsServer(agent, "127.0.0.1", 0)  # type: ignore[arg-type]
    await server.start()
    return server, agent


def _ecc(text: str) -> dict[tuple[str, str, str], float]:
    """gpunet_worker_gpu_ecc_errors by (uuid, error, counter)."""
    return {
        (s.labels["uuid"], s.labels["error"], s.labels["counter"]): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "gpunet_worker_gpu_ecc_errors"
    }


def _xids(text: str) -> dict[tuple[str, str], float]:
    """(sample name, uuid) -> value of the Xid counter and the last Xid gauge."""
    return {
        (s.name, s.labels["uuid"]): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name in ("gpunet_worker_gpu_xid_errors_total", "gpunet_worker_gpu_last_xid")
    }


async def test_xid_and_ecc_errors_move_on_the_gpu_that_had_them(tmp_path: Path) -> None:
    nvml = FakeNvml(gpus=[FakeGpu(uuid=SECOND), FakeGpu(uuid=THIRD)])
    server, agent = await _serve(tmp_path, nvml)
    url = f"http://127.0.0.1:{server.port}"
    try:
        async with httpx.AsyncClient(base_url=url, timeout=10) as http:
            before = (await http.get("/metrics")).text
            assert _xids(before) == {
                ("gpunet_worker_gpu_xid_errors_total", SECOND): 0,
                ("gpunet_worker_gpu_xid_errors_total", THIRD): 0,
            }  # no Xid yet: counted from 0, no last code
            nvml.xid(0, 79)  # the driver reports an Xid on the first GPU, and ECC errors on it
            nvml.gpus[0].ecc_corrected, nvml.gpus[0].ecc_aggregate = 4, (9, 0)

            async def counted() -> str:
                for _ in range(1000):
                    text = (await http.get("/metrics")).text
                    if _xids(text)[("gpunet_worker_gpu_xid_errors_total", SECOND)] == 1:
                        return text
                    await asyncio.sleep(0.01)
                raise AssertionError("the Xid was not counted")

            after = await counted()
            assert _xids(after) == {
                ("gpunet_worker_gpu_xid_errors_total", SECOND): 1,
                ("gpunet_worker_gpu_last_xid", SECOND): 79,
                ("gpunet_worker_gpu_xid_errors_total", THIRD): 0,  # the control: the other GPU stays clean
            }
            ecc = _ecc(after)
            assert ecc[(SECOND, "corrected", "volatile")] == 4 and ecc[(SECOND, "corrected", "aggregate")] == 9
            assert {k: v for k, v in ecc.items() if k[0] == THIRD} == {
                (THIRD, error, counter): 0
                for error in ("corrected", "uncorrected")
                for counter in ("volatile", "aggregate")
            }
    finally:
        await server.stop()
        agent.journal.close()
        agent.gpus.close()


async def test_gpu_figures_readiness_and_refusals(tmp_path: Path) -> None:
    nvml = FakeNvml(gpus=[CLEAN, FakeGpu(uuid=SECOND, ecc=2, temp=83, util=100, power_mw=650_000)])
    server, agent = await _serve(tmp_path, nvml)
    url = f"http://127.0.0.1:{server.port}"
    try:
        async with httpx.AsyncClient(base_url=url, timeout=10) as http:
            text = (await http.get("/metrics")).text
            samples = {
                (s.name, s.labels.get("uuid")): s.value
                for f in text_string_to_metric_families(text)
                for s in f.samples
                if s.name.startswith("gpunet_worker_gpu_")
            }
            assert samples[("gpunet_worker_gpu_temperature_celsius", SECOND)] == 83
            assert samples[("gpunet_worker_gpu_utilization_percent", SECOND)] == 100
            assert samples[("gpunet_worker_gpu_power_watts", SECOND)] == 650
            ecc = _ecc(text)
            assert ecc[(SECOND, "uncorrected", "volatile")] == 2
            assert ecc[(SECOND, "corrected", "volatile")] == 0
            assert samples[("gpunet_worker_gpu_healthy", SECOND)] == 0
            assert samples[("gpunet_worker_gpu_healthy", CLEAN.uuid)] == 1
            assert not any(uuid == CLEAN.uuid for uuid, _, _ in ecc)  # not reported: absent
            assert samples[("gpunet_worker_gpu_memory_used_mib", CLEAN.uuid)] == 1024

            sick = await http.get("/readyz")
            assert sick.status_code == 503
            assert sick.json() == {"status": "not_ready", "checks": {"session": "ok", "gpus": f"unhealthy: {SECOND}"}}
            nvml.gpus[1].ecc = 0  # the control: the same worker, its GPUs clean
            ready = await http.get("/readyz")
            assert ready.status_code == 200 and ready.json()["checks"] == {"session": "ok", "gpus": "ok"}
            agent.session.connected.clear()
            assert (await http.get("/readyz")).json()["checks"]["session"] == "not connected to the coordinator"
            agent.session.refusal = "node X is not registered on chain (never, or deregistered)"
            assert (await http.get("/readyz")).json()["checks"]["session"] == (
                "not connected to the coordinator: refused (node X is not registered on chain (never, or deregistered))"
            )
            assert (await http.get("/healthz")).json() == {"status": "ok"}

            missing = await http.get("/jobs")
            assert missing.status_code == 404 and "/metrics" in missing.json()["error"]
            posted = await http.post("/metrics", content=b"x")
            assert posted.status_code == 405
    finally:
        await server.stop()
        agent.journal.close()
        agent.gpus.close()
