"""The worker as a systemd service: the unit `gpunet worker install` writes passes `systemd-analyze
verify` (a unit whose program is missing is the failing control), install and uninstall round-trip
on a scratch root (the node key stays), and bad input writes nothing. test_service_systemd.py starts
the service under a real systemd, in a container."""

from __future__ import annotations

import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from solders.keypair import Keypair
from typer.testing import CliRunner

from gpunet.cli import app
from gpunet.exits import Exit
from gpunet.keys import create_keypair_file
from worker.service import ENV_FILE, UNIT, Service, ServiceError

GATEWAY = "wss://coordinator.example/worker"
PROGRAM = Path(sys.executable).with_name("gpunet")  # the command the installer's environment has


def _gpunet(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})
    return result.exit_code, result.output


def _verify(unit: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60)


@pytest.fixture
def node_key(tmp_path: Path) -> Path:
    path = tmp_path / "keys" / "node.json"
    path.parent.mkdir()
    create_keypair_file(path, Keypair())
    return path


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze (Debian's systemd) not here")
def test_the_unit_passes_systemd_analyze_verify_and_one_without_its_program_does_not(tmp_path, node_key) -> None:
    good = Service(node_key, {"GPUNET_WORKER_GATEWAY_URL": GATEWAY}, "H100:2:80", program=PROGRAM)
    unit = tmp_path / "gpunet-worker.service"
    unit.write_text(good.unit())
    verified = _verify(unit)
    assert (verified.returncode, verified.stdout + verified.stderr) == (0, ""), verified.stderr
    missing = Service(node_key, {}, program=tmp_path / "no-such" / "gpunet")
    unit.write_text(missing.unit())
    refused = _verify(unit)
    assert refused.returncode != 0 and "no-such/gpunet" in refused.stderr


def test_install_and_uninstall_round_trip_on_a_scratch_root_and_keep_the_key(tmp_path, node_key) -> None:
    root = tmp_path / "root"
    code, out = _gpunet(
        *("worker", "install", "--keypair", str(node_key), "--gateway", GATEWAY, "--url", "http://127.0.0.1:8899"),
        *("--simulate-gpus", "H100:2:80", "--set", "GPUNET_WORKER_API_URL=https://coordinator.example"),
        *("--set", 'GPUNET_WORKER_EGRESS_ALLOW=["10.0.0.5/32"]', "--root", str(root)),
    )
    assert code == 0, out
    assert "not started" in out
    unit, env = root / UNIT, root / ENV_FILE
    text = unit.read_text()
    assert f"ExecStart={PROGRAM} worker run --keypair {node_key} --simulate-gpus H100:2:80" in text
    assert "Restart=on-failure" in text and "RestartPreventExitStatus=2 3 10 11 12 13" in text
    assert "EnvironmentFile=/etc/gpunet/worker.env" in text and "StateDirectory=gpunet-worker" in text
    assert stat.S_IMODE(env.stat().st_mode) == 0o600, "it may hold a token: root's only"
    assert env.read_text().splitlines()[1:] == [
        "GPUNET_RPC_URL=http://127.0.0.1:8899",
        "GPUNET_WORKER_API_URL=https://coordinator.example",
        'GPUNET_WORKER_EGRESS_ALLOW="[\\"10.0.0.5/32\\"]"',
        f"GPUNET_WORKER_GATEWAY_URL={GATEWAY}",
        "GPUNET_WORKER_STATE_DIR=/var/lib/gpunet-worker",
    ]

    code, out = _gpunet("worker", "uninstall", "--root", str(root))
    assert code == 0, out
    assert not unit.exists() and not env.exists()
    assert node_key.exists(), "the node key stays"
    assert "kept: the node key" in out
    code, out = _gpunet("worker", "uninstall", "--root", str(root))  # again: nothing there, nothing to do
    assert code == 0 and "nothing removed" in out


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (["--set", "GPUNET_WORKER_API_URL"], Exit.BAD_INPUT, "expected GPUNET_WORKER_NAME=VALUE"),
        (["--set", "PATH=/tmp"], Exit.BAD_INPUT, "not a gpunet setting"),
        (["--set", "GPUNET_WORKER_NETWORK=none\nExecStartPre=/bin/sh"], Exit.BAD_INPUT, "line break"),
    ],
)
def test_bad_input_writes_nothing(tmp_path, node_key, args, code, says) -> None:
    root = tmp_path / "root"
    got, out = _gpunet(
        "worker", "install", "--keypair", str(node_key), "--gateway", GATEWAY, "--root", str(root), *args
    )
    assert (got, says in out) == (code, True), out
    assert not root.exists()


def test_a_bad_node_key_writes_nothing(tmp_path) -> None:
    bad = tmp_path / "node.json"
    bad.write_text("[1, 2, 3]")
    root = tmp_path / "root"
    code, out = _gpunet("worker", "install", "--keypair", str(bad), "--gateway", GATEWAY, "--root", str(root))
    assert code == Exit.KEYPAIR, out
    assert not root.exists()


def test_a_relative_key_path_is_refused_by_the_service() -> None:
    with pytest.raises(ServiceError, match="absolute"):
        Service(Path("node.json"))


def test_a_node_key_named_as_worker_run_takes_it_is_the_unit_s_key_file(tmp_path, monkeypatch) -> None:
    """`-k node1` names ~/.config/gpunet/nodes/node1.json, for install as for `worker run`."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    named = tmp_path / "config" / "gpunet" / "nodes" / "node1.json"
    named.parent.mkdir(parents=True)
    create_keypair_file(named, Keypair())
    root = tmp_path / "root"
    code, out = _gpunet("worker", "install", "-k", "node1", "--gateway", GATEWAY, "--root", str(root))
    assert code == 0, out
    assert f"ExecStart={PROGRAM} worker run --keypair {named}\n" in (root / UNIT).read_text()
