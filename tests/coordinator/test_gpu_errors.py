"""A GPU's Xid and ECC errors, end to end with real parts (gpunet-localnet, embedded PostgreSQL, the
coordinator and its API in this process, `gpunet worker run` processes with simulated GPUs): a fault
injected into one simulated GPU (GPUNET_SIMULATED_GPU_FAULTS, read at the worker's next sample)
moves that GPU's counters on the worker's metrics port (parsed with prometheus_client's text
parser), reaches the coordinator in the heartbeat telemetry its API serves, and `gpunet worker
status --api` shows it; the other GPU of that worker and the worker without a fault (the controls)
stay at zero everywhere."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpunet.localnet import free_ports
from worker.simulate import FAULTS_ENV

from .conftest import eventually
from .world import World, live_settings, running, start_worker


def _gpu_errors(text: str) -> dict[tuple[str, str], float]:
    """The GPU error samples of a worker's /metrics, by (sample name + its labels but uuid, GPU index)."""
    found = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name in ("gpunet_worker_gpu_xid_errors_total", "gpunet_worker_gpu_last_xid"):
                found[(s.name, s.labels["gpu"])] = s.value
            elif s.name == "gpunet_worker_gpu_ecc_errors":
                found[(f"ecc_{s.labels['error']}_{s.labels['counter']}", s.labels["gpu"])] = s.value
    return found


async def _telemetry(api: str, key: str) -> dict | None:
    """The coordinator's last telemetry of the node (None: the API not up yet, or no heartbeat yet)."""
    try:
        async with httpx.AsyncClient(timeout=10) as http:
            answer = await http.get(f"{api}/nodes/{key}/telemetry")
    except httpx.TransportError:
        return None
    return answer.json() if answer.status_code == 200 else None


@pytest.mark.timeout(300)
async def test_an_injected_xid_and_ecc_errors_reach_the_metrics_the_coordinator_and_worker_status(
    node, chain, pool, database_url, tmp_path, spawned
) -> None:
    world = await World().build(chain, tmp_path)
    settings = live_settings(node, database_url)
    api = f"http://127.0.0.1:{settings.api_port}"
    keys = world.node_keys()[:2]
    faults = [tmp_path / f"faults{i}.jsonl" for i in range(2)]  # the second worker's stays empty: the control
    ports = free_ports(2)
    metrics = [f"http://127.0.0.1:{port}" for port in ports]
    async with running(settings, pool, world.admin) as coordinator:
        spawned.extend(
            start_worker(
                world,
                i,
                coordinator.gateway.url,
                tmp_path / f"worker{i}.log",
                env={"GPUNET_WORKER_METRICS_PORT": str(ports[i]), FAULTS_ENV: str(faults[i])},
            )
            for i in range(2)
        )
        # Both workers heard, their GPUs clean: every count 0 (watched, none yet), no last Xid.
        for key in keys:
            before = await eventually(lambda key=key: _telemetry(api, key), what="a heartbeat's telemetry")
            assert isinstance(before, dict)
            clean = [(g["xid_errors"], g["last_xid"], g["ecc_corrected"], g["ecc_uncorrected"]) for g in before["gpus"]]
            assert clean == [(0, None, 0, 0)] * 2
        for url in metrics:
            text = await eventually(lambda url=url: _scrape(url), what="a worker's /metrics")
            assert isinstance(text, str)
            assert set(_gpu_errors(text).values()) == {0}, "no Xid or ECC error yet (and no last Xid)"

        # An Xid 79 (fallen off the bus) and ECC errors on the first worker's GPU 1.
        faults[0].write_text(json.dumps({"gpu": 1, "xid": 79, "ecc_corrected": 3, "ecc_uncorrected": 1}) + "\n")

        async def heard() -> dict | None:
            t = await _telemetry(api, keys[0])
            return t if t is not None and t["gpus"][1]["xid_errors"] == 1 else None

        after = await eventually(heard, what="the Xid in the coordinator's telemetry")
        assert isinstance(after, dict)
        gpu0, gpu1 = after["gpus"]
        assert (gpu1["last_xid"], gpu1["ecc_corrected"], gpu1["ecc_uncorrected"]) == (79, 3, 1)
        assert (gpu1["ecc_corrected_aggregate"], gpu1["ecc_uncorrected_aggregate"]) == (3, 1)
        assert not gpu1["healthy"] and not after["healthy"]  # uncorrected errors: as NVML would say
        assert (gpu0["xid_errors"], gpu0["ecc_corrected"], gpu0["healthy"]) == (0, 0, True)  # its other GPU
        moved = _gpu_errors(await _scrape(metrics[0]) or "")
        assert moved[("gpunet_worker_gpu_xid_errors_total", "1")] == 1
        assert moved[("gpunet_worker_gpu_last_xid", "1")] == 79
        assert moved[("ecc_corrected_volatile", "1")] == 3 and moved[("ecc_uncorrected_aggregate", "1")] == 1
        assert {k: v for k, v in moved.items() if k[1] == "0"} == {
            ("gpunet_worker_gpu_xid_errors_total", "0"): 0,
            **{(f"ecc_{e}_{c}", "0"): 0 for e in ("corrected", "uncorrected") for c in ("volatile", "aggregate")},
        }
        # The control worker: nothing moved, on its port or in the coordinator's telemetry.
        assert set(_gpu_errors(await _scrape(metrics[1]) or "").values()) == {0}
        untouched = await _telemetry(api, keys[1])
        assert untouched is not None
        assert all((g["xid_errors"], g["ecc_corrected"], g["ecc_uncorrected"]) == (0, 0, 0) for g in untouched["gpus"])

        # `gpunet worker status --api`: the coordinator's telemetry with the agent's Xid count.
        # (in a thread: the coordinator answering it runs on this event loop)
        report = json.loads(await asyncio.to_thread(_status, world.home, 0, node.url, api, faults[0], "--json"))
        assert "gpus" in report["coordinator_telemetry"], report["coordinator_telemetry"]
        heard_gpus = report["coordinator_telemetry"]["gpus"]
        assert [(g["xid_errors"], g["last_xid"]) for g in heard_gpus] == [(0, None), (1, 79)]
        assert all(g["xid_errors"] is not None for g in report["telemetry"])  # simulated: read from the same faults
        text = await asyncio.to_thread(_status, world.home, 0, node.url, api, faults[0])
        assert "GPU 1 as the coordinator heard it: " in text and "1 Xid errors (last: Xid 79)" in text, text
        assert "3 corrected" in text and "lifetime 1 uncorrected, 3 corrected" in text

        # `--watch`: the live table, stopped (SIGTERM, as Ctrl-C) while it waits for its next reading.
        watching = subprocess.Popen(
            _status_command(world.home, 0, api, "--watch", "30"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_status_env(faults[0]),
        )
        spawned.append(watching)
        started = await asyncio.to_thread(watching.stderr.readline)  # type: ignore[union-attr]
        assert "watching node" in started
        watching.send_signal(signal.SIGTERM)
        table, rest = await asyncio.to_thread(watching.communicate, timeout=60)
        assert watching.returncode == 0, rest
        rows = [line for line in table.splitlines() if line.startswith("│")]
        cells = [[c.strip() for c in row.strip("│").split("│")] for row in rows]
        # GPU, health, busy, memory, temp, power, ECC uncorrected and corrected (now / lifetime), Xid, last Xid
        assert [(c[0], c[6], c[7], c[8], c[9]) for c in cells] == [
            ("0", "0 / 0", "0 / 0", "0", "-"),
            ("1", "1 / 1", "3 / 3", "1", "79"),
        ], table


async def _scrape(url: str) -> str | None:
    try:
        async with httpx.AsyncClient(timeout=10) as http:
            answer = await http.get(f"{url}/metrics")
    except httpx.TransportError:
        return None
    return answer.text if answer.status_code == 200 else None


def _status_command(home: Path, i: int, api: str, *args: str) -> list[str]:
    gpunet = Path(sys.executable).with_name("gpunet")
    return [str(gpunet), "worker", "status", "--keypair", str(home / f"node{i}.json"), "--simulate-gpus",
            "H100:2:80", "--state-dir", str(home / f"worker{i}"), "--api", api, *args]  # fmt: skip


def _status_env(faults: Path) -> dict[str, str]:
    return {**os.environ, "COLUMNS": "250", FAULTS_ENV: str(faults)}


def _status(home: Path, i: int, rpc: str, api: str, faults: Path, *args: str) -> str:
    out = subprocess.run(
        [*_status_command(home, i, api, "--url", rpc, *args)],
        capture_output=True,
        text=True,
        timeout=60,
        env=_status_env(faults),
    )
    assert out.returncode == 0, out.stderr
    return out.stdout
