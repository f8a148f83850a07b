"""`python -m coordinator run` as a user runs it: embedded PostgreSQL under the state dir,
indexer, gateway and API in one process, and a clean stop on SIGTERM that stops PostgreSQL too."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx

from gpunet.keys import create_keypair_file

from .conftest import chain_events, eventually
from .market import Market

REPO = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_run_with_embedded_postgres_indexes_serves_and_stops_cleanly(node, market: Market):
    # Not under pytest's tmp_path: see the pg_server fixture on directory permissions.
    state = Path(tempfile.mkdtemp(prefix="gpunet-coordinator-run-"))
    port = _free_port()
    attester = state / "attester.json"
    create_keypair_file(attester)
    env = {**os.environ, "GPUNET_RPC_URL": node.url, "GPUNET_WS_URL": node.ws_url, "GPUNET_STATE_DIR": str(state),
           "GPUNET_API_PORT": str(port), "GPUNET_GATEWAY_PORT": str(_free_port()),
           "GPUNET_ATTESTER_KEYPAIR": str(attester)}
    env.pop("GPUNET_DATABASE_URL", None)
    log = state / "coordinator.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "coordinator", "run"], cwd=REPO, env=env,
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        await market.supplier()
        expected = await chain_events(node, market.signatures)
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
    finally:
        shutil.rmtree(state, ignore_errors=True)
