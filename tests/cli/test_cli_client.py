"""A client's commands: bad input is refused with exit code 2 before anything is asked or sent (the
coordinator named is unreachable, so a request would end in exit code 5); job inputs; reads at each
commitment; shell completion."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import pytest
from typer.testing import CliRunner

from gpunet.cli import app
from gpunet.cli.links import ExplorerError, explorer_for
from gpunet.exits import Exit
from gpunet.keys import create_keypair_file

GPUNET = str(Path(sys.executable).with_name("gpunet"))


def _closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def _run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "200", **(env or {})})
    return result.exit_code, result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--gpu", "H999", "--count", "2", "--duration", "1h"], "unknown GPU model 'H999'"),
        (["--region", "mars", "--count", "2", "--duration", "1h"], "unknown region 'mars'"),
        (["--count", "2", "--duration", "soon"], "not a duration"),
        (["--count", "2", "--duration", "1h", "--max-price", "0"], "more than zero"),
        (["--count", "3", "--duration", "1h", "--gpus-per-node", "2"], "does not divide --count 3"),
    ],
)
def test_quote_refuses_bad_terms_before_asking(args, message) -> None:
    code, out = _run("quote", *args, "--coordinator", _closed_port())
    assert code == Exit.BAD_INPUT and message in out, out


def test_quote_names_an_unreachable_coordinator() -> None:
    url = _closed_port()
    code, out = _run("quote", "--gpu", "h100", "--count", "2", "--duration", "1h", "--coordinator", url)
    assert code == Exit.UNREACHABLE and f"cannot reach the coordinator at {url}/quote" in out, out


DIGEST = "ab" * 32
LEASE = "11111111111111111111111111111112"


@pytest.mark.parametrize(
    ("text", "path", "url"),
    [
        (f"https://example.com/data/train.csv#{DIGEST}", "train.csv", "https://example.com/data/train.csv"),
        (f"cfg/a.yaml=http://h:8000/get?name=a#{DIGEST.upper()}", "cfg/a.yaml", "http://h:8000/get?name=a"),
        (f"https://h/v1/model_2.safetensors#{DIGEST}", "model_2.safetensors", "https://h/v1/model_2.safetensors"),
    ],
)
def test_job_inputs_parse(text, path, url) -> None:
    from gpunet.cli.lease import input_arg

    item = input_arg(text)
    assert (item.path, item.url, item.sha256) == (path, url, DIGEST)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("https://example.com/train.csv", "64-hex SHA-256"),
        (f"https://example.com/train.csv#{DIGEST[:-1]}", "64-hex SHA-256"),
        (f"https://example.com/train.csv#{'g' * 64}", "64-hex SHA-256"),
        (f"ftp://example.com/train.csv#{DIGEST}", "not an http:// or https:// URL"),
        (f"example.com/train.csv#{DIGEST}", "not an http:// or https:// URL"),
        (f"https:///train.csv#{DIGEST}", "not an http:// or https:// URL"),
        (f"https://example.com/#{DIGEST}", "the URL names no file"),
        (f"../up=https://example.com/x#{DIGEST}", "PATH '../up' must be"),
        (f"/etc/x=https://example.com/x#{DIGEST}", "PATH '/etc/x' must be"),
        (f"https://h/a%20b.bin#{DIGEST}", "PATH 'a b.bin' must be one file name"),
    ],
)
def test_bad_job_inputs_are_refused_with_nothing_sent(value, message) -> None:
    code, out = _run("lease", "job", LEASE, "--command", "true", "--input", value, "--coordinator", _closed_port())
    assert code == Exit.BAD_INPUT and message in out, out


def test_two_inputs_of_one_path_are_refused() -> None:
    a, b = f"https://a/x.bin#{DIGEST}", f"https://b/x.bin#{DIGEST}"
    code, out = _run("lease", "job", LEASE, "--command", "true", "--input", a, "--input", b)
    assert code == Exit.BAD_INPUT and "the same PATH" in out, out


def test_lease_files_needs_the_wallet_before_asking(tmp_path) -> None:
    code, out = _run("lease", "files", LEASE, "-k", str(tmp_path / "none.json"), "--coordinator", _closed_port())
    assert code == Exit.KEYPAIR and "none.json" in out, out
    create_keypair_file(tmp_path / "wallet.json")
    (tmp_path / "file").write_text("")
    code, out = _run(
        *("lease", "files", LEASE, "--out", str(tmp_path / "file"), "-k", str(tmp_path / "wallet.json")),
        *("--coordinator", _closed_port()),
    )
    assert code == Exit.BAD_INPUT and "not a directory" in out, out


def test_read_commands_read_at_the_commitment_asked(market) -> None:
    for level in ("processed", "confirmed", "finalized"):
        assert len(market.json("node", "list", "--commitment", level)) == 1
        assert market.json("balance", "--commitment", level, wallet="supplier")["io"] >= 0
    # history is not served at processed: read at confirmed, not refused
    supplier = market.pubkey("supplier")
    assert market.json("settlements", "list", "--provider", supplier, "--commitment", "processed") == []
    market("audit", "--provider", supplier, "--commitment", "finalized")


def _complete(words: str) -> list[str]:
    """What bash completion offers for the last of `words`, as `gpunet --install-completion` sets it up."""
    env = {**os.environ, "_GPUNET_COMPLETE": "complete_bash", "COMP_WORDS": words}
    env["COMP_CWORD"] = str(len(words.split()) - 1)
    done = subprocess.run([GPUNET], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_shell_completion_is_offered_and_completes_commands_and_catalog_names() -> None:
    code, out = _run("--help")
    assert code == 0 and "--install-completion" in out and "--show-completion" in out
    assert _complete("gpunet lease st") == ["status"]
    assert _complete("gpunet quote --region eu") == ["eu-west", "eu-central"]
    assert _complete("gpunet lease open --gpu RTX") == ["RTX4090", "RTX3090", "RTX5090"]


SIGNATURE = "5" * 88


@pytest.mark.parametrize(
    ("template", "rpc_url", "url"),
    [
        (
            None,
            "http://127.0.0.1:8899",
            f"https://explorer.solana.com/tx/{SIGNATURE}?cluster=custom&customUrl=http%3A%2F%2F127.0.0.1%3A8899",
        ),
        (None, "https://api.devnet.solana.com", f"https://explorer.solana.com/tx/{SIGNATURE}?cluster=devnet"),
        (None, "https://api.mainnet-beta.solana.com", f"https://explorer.solana.com/tx/{SIGNATURE}"),
        (
            "https://solscan.io/{kind}/{id}?cluster=devnet",
            "https://x",
            f"https://solscan.io/tx/{SIGNATURE}?cluster=devnet",
        ),
        (
            "http://my.explorer/{id}?rpc={rpc_url}",
            "http://h:1",
            f"http://my.explorer/{SIGNATURE}?rpc=http%3A%2F%2Fh%3A1",
        ),
    ],
)
def test_explorer_links_name_the_cluster(template, rpc_url, url) -> None:
    explorer = explorer_for(template, rpc_url)
    assert explorer is not None and explorer.url("tx", SIGNATURE) == url
    assert explorer.link("tx", SIGNATURE, "short") == f"[link={url}]short[/link]"
    assert explorer_for("none", rpc_url) is None


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("explorer.solana.com/{id}", "not an http(s) URL template with {id}"),
        ("https://explorer.solana.com/tx/", "not an http(s) URL template with {id}"),
        ("https://x/{id}/{slot}", "unknown field 'slot'"),
        ("https://x/{id}/[a]", "bracket"),
    ],
)
def test_bad_explorer_templates_are_refused_before_anything_is_sent(template, message) -> None:
    with pytest.raises(ExplorerError, match=re.escape(message)):
        explorer_for(template, "http://127.0.0.1:8899")
    code, out = _run("provider", "stake", "1", "--url", _closed_port(), env={"GPUNET_EXPLORER_URL": template})
    assert code == Exit.BAD_INPUT and message in out, out
    code, out = _run("node", "list", "--explorer", template, "--url", _closed_port())
    assert code == Exit.BAD_INPUT and message in out, out


def test_tables_and_json_link_transactions_and_accounts_to_the_explorer(market) -> None:
    done = market.json("provider", "stake", "1", wallet="supplier")
    query = "?cluster=custom&customUrl=" + quote(market.node.url, safe="")
    assert done["explorer"] == f"https://explorer.solana.com/tx/{done['signature']}{query}"
    assert market.json("lease", "list", wallet="client") == []
    node_key = market.pubkey("node1")
    runner = CliRunner(env={"FORCE_COLOR": "1", "COLUMNS": "250"})  # a terminal: links are drawn
    nodes = runner.invoke(app, ["node", "list", "--url", market.node.url])
    assert nodes.exit_code == 0 and "\x1b]8;id=" in nodes.output
    assert f"https://explorer.solana.com/address/{node_key}{query}" in nodes.output
    solscan = "https://solscan.io/account/{id}"
    nodes = runner.invoke(app, ["node", "list", "--url", market.node.url, "--explorer", solscan])
    assert f"https://solscan.io/account/{node_key}" in nodes.output
    plain = runner.invoke(app, ["node", "list", "--url", market.node.url, "--explorer", "none"])
    assert plain.exit_code == 0 and node_key in plain.output and "\x1b]8;id=" not in plain.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--secret", "TOKEN_UNSET_HERE"], "takes NAME=VALUE, or NAME with $TOKEN_UNSET_HERE set here"),
        (["--secret", "1X=v"], "'1X': not a valid variable name"),
        (["--secret", "A=1", "--secret", "A=2"], "--secret A: given twice"),
        (["--secret-file", "A"], "--secret-file takes NAME=PATH"),
        (["--secret-file", "A=/nonexistent/gpunet-secret"], "--secret-file A: cannot read /nonexistent/gpunet-secret"),
        (["--secret", "A=1", "--env", "A=2"], "A: both --env and --secret"),
        (["--secret", "GPUNET_A=1"], "set by the worker"),
    ],
)
def test_bad_secrets_are_refused_with_nothing_sent(args, message) -> None:
    code, out = _run("lease", "job", LEASE, "--command", "true", *args, "--coordinator", _closed_port())
    assert code == Exit.BAD_INPUT and message in out, out
