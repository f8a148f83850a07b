"""--ledger keeps accounts, transactions and the slot across a restart; --genesis funds accounts and an IO mint."""

from __future__ import annotations

import json
import signal
import subprocess

import pytest
from solana.rpc.async_api import AsyncClient
from solders.keypair import Keypair
from solders.system_program import TransferParams, transfer

from gpunet.client import send_and_confirm
from gpunet.testbed import funded_wallet
from gpunet.tokens import create_mint, ensure_io_account, mint_io

from .helpers import SOL, confirm


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT])
async def test_restart_with_ledger_finds_every_account_and_transaction(start_node, tmp_path, stop_signal):
    ledger = tmp_path / "ledger"
    node = start_node(ledger=ledger)
    async with AsyncClient(node.url) as client:
        alice = await funded_wallet(client)
        bob = Keypair()
        sigs = [
            await send_and_confirm(
                client,
                alice,
                [transfer(TransferParams(from_pubkey=alice.pubkey(), to_pubkey=bob.pubkey(), lamports=SOL))],
            )
        ]
        mint = await create_mint(client, alice)
        ata = await ensure_io_account(client, alice, bob.pubkey(), mint)
        sigs.append(await mint_io(client, alice, mint, ata, 42))
        balances = {k: (await client.get_balance(k)).value for k in (alice.pubkey(), bob.pubkey(), mint, ata)}
        history = {str(k): node.call("getSignaturesForAddress", [str(k)])["result"] for k in (alice.pubkey(), ata)}
        txs = {str(s): node.call("getTransaction", [str(s), "json"])["result"] for s in sigs}
        slot = (await client.get_slot()).value
        genesis = (await client.get_genesis_hash()).value
        identity = node.call("getIdentity")["result"]
        count = node.call("getTransactionCount")["result"]
    assert node.stop(stop_signal) == 0
    assert (ledger / "snapshot.bin").exists()

    again = start_node(ledger=ledger)
    async with AsyncClient(again.url) as client:
        assert (await client.get_slot()).value > slot
        assert (await client.get_genesis_hash()).value == genesis
        assert again.call("getIdentity")["result"] == identity
        assert again.call("getTransactionCount")["result"] == count
        for k, lamports in balances.items():
            assert (await client.get_balance(k)).value == lamports
        assert (await client.get_token_account_balance(ata)).value.amount == "42"
        for k, h in history.items():
            assert again.call("getSignaturesForAddress", [k])["result"] == h
        for s, tx in txs.items():
            assert again.call("getTransaction", [s, "json"])["result"] == tx
            assert again.call("getBlockTime", [tx["slot"]])["result"] == tx["blockTime"]
        # The chain goes on: new transactions, and no replay of old ones.
        await send_and_confirm(
            client, alice, [transfer(TransferParams(from_pubkey=alice.pubkey(), to_pubkey=bob.pubkey(), lamports=1))]
        )
        assert (await client.get_balance(bob.pubkey())).value == balances[bob.pubkey()] + 1


async def test_without_ledger_state_is_in_memory(start_node):
    node = start_node()
    async with AsyncClient(node.url) as client:
        kp = await funded_wallet(client)
    node.stop()
    fresh = start_node()
    async with AsyncClient(fresh.url) as client:
        assert (await client.get_balance(kp.pubkey())).value == 0


async def test_genesis_file_funds_accounts_and_creates_the_io_mint(start_node, tmp_path):
    rich, authority, mint = Keypair(), Keypair(), Keypair()
    genesis = tmp_path / "genesis.json"
    genesis.write_text(
        json.dumps(
            {
                "accounts": [{"pubkey": str(rich.pubkey()), "lamports": 123 * SOL}],
                "ioMint": {"pubkey": str(mint.pubkey()), "mintAuthority": str(authority.pubkey()), "decimals": 9},
            }
        )
    )
    node = start_node(genesis=genesis)
    async with AsyncClient(node.url) as client:
        assert (await client.get_balance(rich.pubkey())).value == 123 * SOL
        parsed = (await client.get_account_info_json_parsed(mint.pubkey())).value.data.parsed
        assert parsed["info"]["mintAuthority"] == str(authority.pubkey()) and parsed["info"]["decimals"] == 9
        # The mint works: its authority mints to a token account.
        payer = await funded_wallet(client)
        ata = await ensure_io_account(client, payer, rich.pubkey(), mint.pubkey())
        await confirm(client, (await client.request_airdrop(authority.pubkey(), SOL)).value)
        await mint_io(client, authority, mint.pubkey(), ata, 5)
        assert (await client.get_token_supply(mint.pubkey())).value.amount == "5"


def test_bad_genesis_file_fails_to_start(localnet_bin, tmp_path):
    bad = tmp_path / "genesis.json"
    bad.write_text('{"accounts": [{"pubkey": "nope", "lamports": 1}]}')
    out = subprocess.run(
        [str(localnet_bin), "--rpc-port", "0", "--ws-port", "0", "--genesis", str(bad)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 1 and "invalid pubkey" in out.stderr
