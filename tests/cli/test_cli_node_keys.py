"""Node keys live under the user's config directory, never in the working directory: `gpunet keys
new-node [NAME]` writes ~/.config/gpunet/nodes/NAME.json (or under $XDG_CONFIG_HOME), prints the path,
and `node register NAME` finds it. `.gitignore` covers what the README's first minutes write."""

from __future__ import annotations

import json
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpunet.cli import app
from gpunet.cli.common import Exit

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def config_home(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    workdir = tmp_path / "work"
    workdir.mkdir()
    monkeypatch.chdir(workdir)
    return tmp_path / "config"


def test_new_node_keys_go_under_the_config_directory_with_their_path_printed(config_home) -> None:
    runner = CliRunner()
    first = json.loads(runner.invoke(app, ["keys", "new-node", "--json"]).stdout)
    second = runner.invoke(app, ["keys", "new-node"])
    named = json.loads(runner.invoke(app, ["keys", "new-node", "rack7", "--json"]).stdout)
    nodes = config_home / "gpunet" / "nodes"
    assert (first["path"], first["name"], named["path"]) == (
        str(nodes / "node1.json"),
        "node1",
        str(nodes / "rack7.json"),
    )
    assert str(nodes / "node2.json") in second.stdout and "gpunet node register node2" in second.stdout
    assert stat.S_IMODE((nodes / "node1.json").stat().st_mode) == 0o600
    assert list(Path.cwd().iterdir()) == [], "nothing written into the working directory"
    again = runner.invoke(app, ["keys", "new-node", "rack7"])
    assert again.exit_code == Exit.KEYPAIR and "refusing to overwrite" in again.stderr
    path = runner.invoke(app, ["keys", "new-node", "./here.json"])
    assert path.exit_code == Exit.BAD_INPUT and "is a path, not a name" in path.stderr


def test_node_register_finds_a_node_key_by_name(market, config_home) -> None:
    key = json.loads(market.runner.invoke(app, ["keys", "new-node", "rack7", "--json"]).stdout)["pubkey"]
    market(
        "node",
        "register",
        "rack7",
        "--gpu",
        "A100",
        "--count",
        "1",
        "--region",
        "eu-west",
        "--price",
        "1",
        wallet="supplier",
    )
    assert key in [n["node_key"] for n in market.json("node", "list")]


@pytest.mark.skipif(shutil.which("git") is None or not (REPO / ".git").exists(), reason="not a git checkout")
def test_gitignore_covers_what_the_first_minutes_write() -> None:
    written = [".localnet/snapshot.bin", "node1.json", "client.json", "supplier.json"]
    ignored = subprocess.run(["git", "check-ignore", *written], cwd=REPO, capture_output=True, text=True).stdout.split()
    assert ignored == written
