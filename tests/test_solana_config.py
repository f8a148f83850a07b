"""The Solana CLI's config file (~/.config/solana/cli/config.yml): gpunet takes its RPC URL, keypair
and commitment when no flag or environment variable says otherwise, read with PyYAML or, without it,
the minimal reader; a malformed file is an error that names it."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest
from solana.rpc.commitment import Confirmed, Finalized, Processed
from typer.testing import CliRunner

from gpunet.cli import app
from gpunet.cli.common import Session
from gpunet.cluster import ClusterError, resolve_cluster
from gpunet.exits import Exit
from gpunet.solana_config import SolanaConfigError, load_solana_config

# As `solana config set` writes it (with a nested block the minimal reader skips).
SOLANA_CLI_CONFIG = """---
json_rpc_url: "http://127.0.0.1:7777"
websocket_url: ""
keypair_path: {keypair}
address_labels:
  "11111111111111111111111111111111": System Program
commitment: finalized
"""


@pytest.fixture(params=["pyyaml", "minimal"])
def reader(request, monkeypatch) -> str:
    if request.param == "minimal":
        monkeypatch.setitem(sys.modules, "yaml", None)  # `import yaml` raises ImportError
    return request.param


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """A home directory of its own, no gpunet environment variable set."""
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("GPUNET_RPC_URL", "GPUNET_WS_URL", "GPUNET_KEYPAIR"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def _write_config(home: Path, text: str) -> Path:
    path = home / ".config" / "solana" / "cli" / "config.yml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_the_solana_cli_config_is_read(reader, home) -> None:
    path = _write_config(home, SOLANA_CLI_CONFIG.format(keypair="/keys/me.json"))
    config = load_solana_config()
    assert config is not None and config.path == path
    assert (config.json_rpc_url, config.websocket_url, config.keypair_path, config.commitment) == (
        "http://127.0.0.1:7777",
        None,
        "/keys/me.json",
        "finalized",
    )
    _write_config(home, "json_rpc_url: https://api.devnet.solana.com  # devnet\ncommitment: 'max'\n")
    config = load_solana_config()
    assert config is not None and config.json_rpc_url == "https://api.devnet.solana.com"
    assert config.commitment == "finalized"  # the Solana CLI's older name


def test_no_config_file_is_no_config(home) -> None:
    assert load_solana_config() is None
    assert resolve_cluster(cwd=home).rpc_url == "http://127.0.0.1:8899"
    assert Session(None).wallet_path == home / ".config" / "solana" / "id.json"


@pytest.mark.parametrize(
    "text", ['json_rpc_url: "http://127.0.0.1:7777\nkeypair_path: x\n', "commitment: whenever\n", "json_rpc_url: [1]\n"]
)
def test_a_malformed_config_is_an_error_naming_the_file(reader, home, text) -> None:
    if reader == "minimal" and text.startswith("json_rpc_url: ["):
        text = "just some words\n"  # a list is text to the minimal reader; this is not 'key: value'
    path = _write_config(home, text)
    with pytest.raises(SolanaConfigError, match=str(path)):
        load_solana_config()
    with pytest.raises(ClusterError, match=str(path)):
        resolve_cluster(cwd=home)
    result = CliRunner().invoke(app, ["balance"], env={"COLUMNS": "300"})
    assert result.exit_code == Exit.BAD_INPUT and str(path) in result.output, result.output


def test_the_url_comes_from_flag_env_anchor_toml_then_the_config(home, monkeypatch) -> None:
    _write_config(
        home,
        SOLANA_CLI_CONFIG.format(keypair="/keys/me.json").replace('websocket_url: ""', 'websocket_url: "ws://h:1"'),
    )
    project = home / "project"
    project.mkdir()
    found = resolve_cluster(cwd=project)
    assert (found.rpc_url, found.ws_url) == ("http://127.0.0.1:7777", "ws://h:1") and "config.yml" in found.source
    assert resolve_cluster("devnet", cwd=project).rpc_url == "https://api.devnet.solana.com"
    (project / "Anchor.toml").write_text('[provider]\ncluster = "testnet"\n')
    assert resolve_cluster(cwd=project).source == "Anchor.toml"
    monkeypatch.setenv("GPUNET_RPC_URL", "http://10.0.0.5:7000")
    assert resolve_cluster(cwd=project).source == "GPUNET_RPC_URL"


def test_the_keypair_and_commitment_come_from_flags_then_the_config(home, monkeypatch) -> None:
    _write_config(home, SOLANA_CLI_CONFIG.format(keypair="~/keys/me.json"))
    assert Session(None).wallet_path == home / "keys" / "me.json"
    assert Session(None, Path("other.json")).wallet_path == Path("other.json")
    assert Session(None).commitment == Finalized
    assert Session(None, commitment_flag="processed").commitment == Processed
    assert Session(None, commitment_flag="processed").client().commitment == Processed
    (home / ".config" / "solana" / "cli" / "config.yml").unlink()
    assert Session(None).commitment == Confirmed


def test_commands_use_the_configured_url_and_keypair(home, monkeypatch) -> None:
    monkeypatch.chdir(home)  # no Anchor.toml here or above: it would come first
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    _write_config(home, SOLANA_CLI_CONFIG.format(keypair=home / "nowhere.json").replace("7777", str(port)))
    runner = CliRunner()
    result = runner.invoke(app, ["lease", "list"], env={"COLUMNS": "300"})
    assert result.exit_code == Exit.KEYPAIR and str(home / "nowhere.json") in result.output, result.output
    result = runner.invoke(app, ["node", "list"], env={"COLUMNS": "300"})
    assert result.exit_code == Exit.UNREACHABLE and f"http://127.0.0.1:{port}" in result.output, result.output
    assert "config.yml (json_rpc_url)" in result.output


@pytest.mark.parametrize(
    "command",
    [
        ["balance"],
        ["lease", "show"],
        ["lease", "list"],
        ["node", "list"],
        ["provider", "show"],
        ["admin", "show"],
        ["settlements", "list"],
        ["audit"],
    ],
)
def test_read_commands_take_a_commitment(command) -> None:
    result = CliRunner().invoke(app, [*command, "--commitment", "soon"])
    assert result.exit_code == Exit.BAD_INPUT and "processed" in result.output and "finalized" in result.output
