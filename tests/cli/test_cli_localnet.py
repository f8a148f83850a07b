"""`gpunet localnet` runs the local node in the foreground until it is stopped, found where
scripts/setup built it; `admin init` by a wallet the node did not make the upgrade authority says
how to fix it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from solders.keypair import Keypair
from typer.testing import CliRunner

from gpunet.localnet import free_ports, localnet_deployer
from tests.cli.conftest import Gpunet


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


def _fake_node(path: Path, says: str) -> None:
    """A stand-in node binary that prints `says` and its arguments (`gpunet localnet` execs it)."""
    path.parent.mkdir(parents=True)
    path.write_text(f'#!/bin/sh\necho "{says} $*"\n')
    path.chmod(0o755)


def test_gpunet_localnet_finds_the_node_under_xdg_cache_home(tmp_path) -> None:
    # scripts/env.sh builds into ${XDG_CACHE_HOME:-$HOME/.cache}/gpunet/target: the CLI looks there too.
    home, xdg = tmp_path / "home", tmp_path / "xdg"
    _fake_node(home / ".cache" / "gpunet" / "target" / "debug" / "gpunet-localnet", "home node")
    _fake_node(xdg / "gpunet" / "target" / "debug" / "gpunet-localnet", "xdg node")
    gpunet = str(Path(sys.executable).with_name("gpunet"))
    unset = ("GPUNET_LOCALNET_BIN", "CARGO_TARGET_DIR", "XDG_CACHE_HOME")
    env = {k: v for k, v in os.environ.items() if k not in unset}
    env |= {"HOME": str(home), "GPUNET_KEYPAIR": str(home / "id.json")}

    def started(extra: dict[str, str]) -> str:
        run = subprocess.run([gpunet, "localnet"], env=env | extra, capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stderr
        return run.stdout

    assert started({"XDG_CACHE_HOME": str(xdg)}).startswith("xdg node --rpc-port 8899")
    assert started({}).startswith("home node --rpc-port 8899")  # the control: unset, ~/.cache
    assert started({"XDG_CACHE_HOME": ""}).startswith("home node")  # empty is unset, as in the scripts


def test_admin_init_by_a_wallet_started_after_the_node_says_how_to_fix_it(gpunet) -> None:
    # The README's old order: the node came up before the wallet existed, so it made its own
    # deployer key the upgrade authority. Refused before anything is sent (not even the IO mint).
    me = gpunet.wallet("me")
    sent = gpunet.signatures_of("me")
    out = gpunet("admin", "init", wallet="me", expect=2).output
    assert f"your wallet {me}" in out and f"({localnet_deployer().pubkey()} is)" in out, out
    assert "the local node was started before this wallet existed" in out, out
    assert "stop `gpunet localnet` and start it again" in out, out
    assert gpunet.signatures_of("me") == sent
    gpunet("admin", "show", expect=6)  # not initialised
    gpunet.wallet("admin", keypair=localnet_deployer())  # the control: the authority initialises it
    gpunet("admin", "init", wallet="admin")
    gpunet("admin", "show")


def test_admin_init_by_another_wallet_than_the_nodes_authority_names_it(start_node, tmp_path) -> None:
    authority = Keypair()
    cli = Gpunet(start_node(upgrade_authority=authority.pubkey()), tmp_path, CliRunner())
    cli.wallet("me")
    sent = cli.signatures_of("me")
    out = cli("admin", "init", wallet="me", expect=2).output
    assert f"({authority.pubkey()} is)" in out and "`gpunet localnet --keypair PATH`" in out, out
    assert cli.signatures_of("me") == sent
    cli.wallet("authority", keypair=authority)  # the control
    cli("admin", "init", wallet="authority")
