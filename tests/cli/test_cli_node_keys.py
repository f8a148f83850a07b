"""Node keys live under the user's config directory, never in the working directory: `gpunet keys
new-node [NAME]` writes ~/.config/gpunet/nodes/NAME.json (or under $XDG_CONFIG_HOME), prints the path,
and `node register NAME` finds it. `.gitignore` covers what the README's first minutes write."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpunet.cli import app
from gpunet.cli.common import Exit
from gpunet.keys import create_keypair_file
from tests.worker.sandboxes import HOST_JOBS_ENV

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


def test_every_node_command_takes_the_nodes_name_path_or_key(market, config_home) -> None:
    # register took the name from `keys new-node`; drain, undrain, update, unjail, deregister took
    # only the public key. Now all of them resolve it the same way (gpunet.cli.common.node_key_arg).
    key = json.loads(market.runner.invoke(app, ["keys", "new-node", "rack7", "--json"]).stdout)["pubkey"]
    register = ("node", "register", "rack7", "--gpu", "A100", "--count", "1", "--region", "eu-west", "--price", "1")
    market(*register, wallet="supplier")

    def state() -> dict:
        return next(n for n in market.json("node", "list") if n["node_key"] == key)

    assert key in market("node", "drain", "rack7", wallet="supplier").output and state()["draining"]
    market("node", "undrain", str(config_home / "gpunet" / "nodes" / "rack7.json"), wallet="supplier")
    market("node", "update", "rack7", "--price", "3", wallet="supplier")
    assert not state()["draining"] and state()["price_per_gpu_hour"] == 3_000_000
    assert f"node {key} is not jailed" in market("node", "unjail", "rack7", wallet="supplier", expect=2).output
    market("node", "drain", key, wallet="supplier")  # the control: the public key, as before
    market("node", "undrain", key, wallet="supplier")
    assert key in market("node", "deregister", "rack7", wallet="supplier").output
    assert state()["deregistered_at"]  # kept, bonded, until `node release` (after the unbonding period)


def test_an_unknown_or_ambiguous_node_name_is_refused_saying_so(market, config_home) -> None:
    sent = market.signatures_of("supplier")
    for command in (("drain",), ("undrain",), ("deregister",), ("unjail",), ("update", "--price", "3")):
        out = market("node", command[0], "rack8", *command[1:], wallet="supplier", expect=Exit.BAD_INPUT).output
        assert "'rack8' is neither a node's public key" in out and "the name of a node key" in out, out
    register = ("--gpu", "A100", "--count", "1", "--region", "eu-west", "--price", "1")
    out = market("node", "register", "rack8", *register, wallet="supplier", expect=Exit.BAD_INPUT).output
    assert "no node key named 'rack8'" in out and "`gpunet keys new-node rack8`" in out, out
    # a key file named like another node's public key: which node is meant cannot be told.
    # `keys new-node` refuses such a name; a file put there by hand is refused where it is used.
    node1 = market.pubkey("node1")
    out = market.runner.invoke(app, ["keys", "new-node", node1]).output
    assert f"{node1!r} is a public key, not a name" in out, out
    create_keypair_file(config_home / "gpunet" / "nodes" / f"{node1}.json")
    out = market("node", "drain", node1, wallet="supplier", expect=Exit.BAD_INPUT).output
    assert f"'{node1}' is ambiguous" in out, out
    assert market.signatures_of("supplier") == sent
    (config_home / "gpunet" / "nodes" / f"{node1}.json").unlink()
    market("node", "drain", node1, wallet="supplier")  # the control: unambiguous now


def test_worker_run_refuses_an_unknown_node_name_and_an_unusable_state_dir_in_a_line(config_home, tmp_path) -> None:
    # `worker -k NAME` reads the same names as `node register`: a name with no key file is the
    # keypair error (exit 3), saying how to create it, before anything starts.
    gpunet = str(Path(sys.executable).with_name("gpunet"))
    argv = [gpunet, "worker", "run", "-k", "rack9", "--simulate-gpus", "H100:1:80", "--state-dir", str(tmp_path / "s")]
    # (host jobs only: the worker's start would otherwise check the container engine before its state)
    env = {**os.environ, **HOST_JOBS_ENV, "XDG_CONFIG_HOME": str(config_home), "COLUMNS": "400"}
    run = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == Exit.KEYPAIR, run.stderr
    assert "no node key named 'rack9'" in run.stderr and "`gpunet keys new-node rack9`" in run.stderr, run.stderr
    assert not (tmp_path / "s").exists()
    created = CliRunner().invoke(app, ["keys", "new-node", "rack9"])  # the control: with the key it goes on
    assert created.exit_code == 0
    argv[-1] = "/proc/gpunet-not-a-dir"  # ... as far as its state directory, which it cannot make
    again = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == Exit.WORKER_STATE and "rack9" not in again.stderr, again.stderr


@pytest.mark.skipif(shutil.which("git") is None or not (REPO / ".git").exists(), reason="not a git checkout")
def test_gitignore_covers_what_the_first_minutes_write() -> None:
    written = [".localnet/snapshot.bin", "node1.json", "client.json", "supplier.json"]
    ignored = subprocess.run(["git", "check-ignore", *written], cwd=REPO, capture_output=True, text=True).stdout.split()
    assert ignored == written
