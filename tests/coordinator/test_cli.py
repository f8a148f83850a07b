"""`python -m coordinator`: bad settings and arguments get a message and exit 2; the audit
command's verdict is its exit code; a ledger is never mixed with another chain's events."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from solders.keypair import Keypair

from coordinator.indexer import Indexer
from coordinator.indexer.service import ChainMismatch
from coordinator.settings import Settings
from gpunet.keys import create_keypair_file
from gpunet.localnet import free_ports
from gpunet.testbed import Market
from worker.agent import WorkerSettings

from .conftest import eventually

REPO = Path(__file__).resolve().parents[2]


def coordinator(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "coordinator", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
    )


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"GPUNET_API_PORT": "eighty"}, "GPUNET_API_PORT: Input should be a valid integer"),
        ({"GPUNET_PROGRAM_ID": "not-a-key"}, "GPUNET_PROGRAM_ID: Value error, not a base58 public key"),
        ({"GPUNET_COMMITMENT": "processed"}, "GPUNET_COMMITMENT: Input should be 'confirmed' or 'finalized'"),
    ],
)
def test_bad_settings_are_refused_with_a_message(env, message):
    out = coordinator("index", **env)
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize(
    ("rpc_url", "ws_url"),
    [
        ("https://api.devnet.solana.com", "wss://api.devnet.solana.com"),
        ("http://10.0.0.5:8899", "ws://10.0.0.5:8900"),
        ("http://127.0.0.1:8899", "ws://127.0.0.1:8900"),  # the default: gpunet-localnet's
    ],
)
def test_the_pubsub_url_follows_the_rpc_url_unless_it_is_set(monkeypatch, rpc_url, ws_url):
    """An operator who names another cluster's RPC gets that cluster's PubSub, not the local node's."""
    monkeypatch.delenv("GPUNET_WS_URL", raising=False)
    assert Settings(rpc_url=rpc_url).ws_url == ws_url
    assert Settings(rpc_url=rpc_url, ws_url="wss://pubsub.example/ws").ws_url == "wss://pubsub.example/ws"


def test_audit_needs_exactly_one_valid_account():
    assert "exactly one of --lease or --provider" in coordinator("audit").stderr
    out = coordinator("audit", "--provider", "0x1234")
    assert out.returncode == 2 and "provider: '0x1234' is not a base58 public key" in out.stderr


async def test_audit_command_exit_code_is_the_verdict(node, market: Market, indexer, pool, settings):
    supplier = await market.supplier()
    await eventually(lambda: _indexed(pool, 3), what="the supplier indexed")
    env = {"GPUNET_RPC_URL": node.url, "GPUNET_DATABASE_URL": settings.database_url}
    out = coordinator("audit", "--provider", str(supplier.provider), **env)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["ok"] is True
    by_wallet = coordinator("audit", "--provider", str(supplier.wallet.pubkey()), **env)
    assert by_wallet.returncode == 0 and json.loads(by_wallet.stdout)["given"] == "wallet", by_wallet.stderr
    stranger = str(Keypair().pubkey())
    unknown = coordinator("audit", "--provider", stranger, **env)
    assert unknown.returncode == 6 and f"{stranger} is neither a provider account" in unknown.stderr
    assert unknown.stdout == "" and "Traceback" not in unknown.stderr
    async with pool.acquire() as conn:
        await conn.execute("UPDATE providers SET staked = staked + 1")
    out = coordinator("audit", "--provider", str(supplier.provider), **env)
    report = json.loads(out.stdout)
    assert out.returncode == 1 and [d["what"] for d in report["differences"]] == ["provider.staked"]
    assert str(market.signatures[-1]) in report["differences"][0]["signatures"]


async def _indexed(pool, n: int) -> bool:
    async with pool.acquire() as conn:
        return await conn.fetchval("SELECT count(*) FROM events") >= n


async def test_a_node_of_another_chain_is_refused(node, start_node, market: Market, pool, settings):
    await market.supplier()
    first = Indexer(settings, pool)
    try:
        assert await first.backfill() == 4  # ConfigInitialized and the supplier's three
    finally:
        await first.rpc.close()
    other = start_node()  # a fresh chain: another genesis hash
    stranger = Indexer(settings.model_copy(update={"rpc_url": other.url, "ws_url": other.ws_url}), pool)
    with pytest.raises(ChainMismatch, match="use another database"):
        await stranger.run()
    async with pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM events") == 4


def test_resume_slashing_says_what_is_missing_and_sends_nothing(tmp_path):
    missing = coordinator("resume-slashing", GPUNET_ATTESTER_KEYPAIR=str(tmp_path / "none.json"))
    assert missing.returncode == 3 and "GPUNET_ATTESTER_KEYPAIR" in missing.stderr and "Traceback" not in missing.stderr
    key = tmp_path / "attester.json"
    create_keypair_file(key, Keypair())
    [port] = free_ports(1)  # nothing listens there
    out = coordinator("resume-slashing", "--coordinator", f"http://127.0.0.1:{port}", GPUNET_ATTESTER_KEYPAIR=str(key))
    assert out.returncode == 5 and "cannot reach the coordinator" in out.stderr and "Traceback" not in out.stderr


async def test_run_with_a_key_that_is_no_attester_hints_adding_it_not_replacing_the_list(
    node, market: Market, tmp_path
):
    """Following the hint must keep the attesters already working: `--add-attester`, never the old
    `--attester` (which replaced the list and so cut off the running coordinator)."""
    key = tmp_path / "newcomer.json"
    newcomer = create_keypair_file(key, Keypair()).pubkey()
    out = await asyncio.to_thread(coordinator, "run", GPUNET_RPC_URL=node.url, GPUNET_ATTESTER_KEYPAIR=str(key))
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert "is not one of the config's attesters" in out.stderr
    assert f"gpunet admin update --add-attester {newcomer}`" in out.stderr
    assert "--attester " not in out.stderr.replace("--add-attester ", "")


@pytest.mark.parametrize("command", ["run", "index", "api", "migrate"])
def test_help_lists_every_setting_with_its_variable(command):
    out = coordinator(command, "--help", COLUMNS="200")
    assert out.returncode == 0, out.stderr
    for name, info in Settings.model_fields.items():
        assert info.description, f"setting {name} has no description for --help"
        assert f"GPUNET_{name.upper()} " in out.stdout, (name, out.stdout)


def test_run_with_the_rpc_node_down_says_so_in_one_line(tmp_path):
    key = tmp_path / "attester.json"
    create_keypair_file(key, Keypair())
    [port] = free_ports(1)  # nothing listens there
    state = Path(tempfile.mkdtemp(prefix="gpunet-coordinator-norpc-"))  # see the pg_server fixture
    try:
        out = coordinator(
            "run",
            GPUNET_RPC_URL=f"http://127.0.0.1:{port}",
            GPUNET_WS_URL=f"ws://127.0.0.1:{port}",
            GPUNET_ATTESTER_KEYPAIR=str(key),
            GPUNET_STATE_DIR=str(state),
            GPUNET_DATABASE_URL="",
        )
    finally:
        shutil.rmtree(state, ignore_errors=True)
    assert out.returncode == 5, out.stderr[-3000:]
    [line] = out.stderr.strip().splitlines()
    assert f"cannot reach the chain's RPC node at http://127.0.0.1:{port} (GPUNET_RPC_URL)" in line
    assert "gpunet localnet" in line


def test_the_configuration_page_is_generated_from_every_setting():
    """docs/configuration.md holds no hand-written settings: its tables are rendered by the docs hook
    from Settings and WorkerSettings, every field with a description (what `--help` and the page say
    of it) in a row of its own, and the worker's with `gpunet worker run`'s flag where it has one."""
    spec = importlib.util.spec_from_file_location("settings_reference", REPO / "docs/_hooks/settings_reference.py")
    assert spec is not None and spec.loader is not None
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    source = (REPO / "docs" / "configuration.md").read_text()
    assert "| `GPUNET_" not in source, "docs/configuration.md has a hand-written settings row"
    page = hook.render_page(source)
    rows = {line.split("|")[1].strip(" `"): line for line in page.splitlines() if line.startswith("| `GPUNET_")}
    for model in (Settings, WorkerSettings):
        for name, info in model.model_fields.items():
            variable = hook.variable(model, name)
            assert (info.description or "").strip(), f"{variable} has no description"
            assert variable in rows, f"the configuration page has no row for {variable}"
            assert hook.cell(info.description) in rows[variable], f"{variable}'s row lacks its description"
    assert "`--gateway`" in rows["GPUNET_WORKER_GATEWAY_URL"]
    assert "`--url`" in rows["GPUNET_WORKER_RPC_URL"]
