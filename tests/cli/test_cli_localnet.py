"""`gpunet localnet` runs the local node in the foreground until it is stopped."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from gpunet.localnet import free_ports


def test_gpunet_localnet_serves_rpc_until_stopped(localnet_bin, tmp_path) -> None:
    rpc_port, ws_port = free_ports(2)
    gpunet = Path(sys.executable).with_name("gpunet")
    env = {**os.environ, "GPUNET_LOCALNET_BIN": str(localnet_bin)}
    proc = subprocess.Popen(
        [
            str(gpunet),
            "localnet",
            "--rpc-port",
            str(rpc_port),
            "--ws-port",
            str(ws_port),
            "--ledger",
            str(tmp_path / "ledger"),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "getHealth"}).encode()
        deadline = time.monotonic() + 60
        while True:
            try:
                req = urllib.request.Request(f"http://127.0.0.1:{rpc_port}", body, {"Content-Type": "application/json"})
                with urllib.request.urlopen(req, timeout=2) as resp:
                    assert json.loads(resp.read())["result"] == "ok"
                    break
            except OSError:
                assert proc.poll() is None, "gpunet localnet exited"
                assert time.monotonic() < deadline, "gpunet localnet never answered"
                time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) is not None
