"""SPL Token: an IO mint, token accounts, balances, jsonParsed, token balances in transaction meta."""

from __future__ import annotations

import asyncio
import json

import pytest
from solana.rpc.async_api import AsyncClient
from solana.rpc.types import TokenAccountOpts
from solana.rpc.websocket_api import connect
from solders.keypair import Keypair
from solders.rpc.responses import AccountNotificationJsonParsed, ProgramNotification
from spl.token.constants import ASSOCIATED_TOKEN_PROGRAM_ID, TOKEN_PROGRAM_ID

from gpunet.testbed import funded_wallet
from gpunet.tokens import create_mint, ensure_io_account, mint_io

pytestmark = pytest.mark.filterwarnings("ignore:websockets.legacy is deprecated:DeprecationWarning")


async def test_io_mint_token_accounts_and_balances(node):
    async with AsyncClient(node.url) as client:
        ata_program = (await client.get_account_info(ASSOCIATED_TOKEN_PROGRAM_ID)).value
        assert ata_program is not None and ata_program.executable

        authority = await funded_wallet(client)
        holder = Keypair()
        mint = await create_mint(client, authority)
        ata = await ensure_io_account(client, authority, holder.pubkey(), mint)

        async with connect(node.ws_url) as ws:
            await ws.account_subscribe(ata, encoding="jsonParsed")
            await ws.recv()
            await ws.program_subscribe(TOKEN_PROGRAM_ID, encoding="base64")
            await ws.recv()
            sig = await mint_io(client, authority, mint, ata, 1_500_000)
            seen = {}
            while len(seen) < 2:
                for msg in await asyncio.wait_for(ws.recv(), 5):
                    seen.setdefault(type(msg), msg)
            acc_note = seen[AccountNotificationJsonParsed]
            parsed = acc_note.result.value.data.parsed
            assert parsed["info"]["tokenAmount"]["uiAmountString"] == "1.5"
            assert seen[ProgramNotification].result.value.pubkey in (ata, mint)

        bal = (await client.get_token_account_balance(ata)).value
        assert (bal.amount, bal.decimals, bal.ui_amount_string) == ("1500000", 6, "1.5")
        supply = (await client.get_token_supply(mint)).value
        assert supply.amount == "1500000"

        parsed = (await client.get_account_info_json_parsed(ata)).value.data.parsed
        assert parsed["type"] == "account"
        assert parsed["info"]["mint"] == str(mint) and parsed["info"]["owner"] == str(holder.pubkey())
        assert parsed["info"]["state"] == "initialized"
        mint_parsed = (await client.get_account_info_json_parsed(mint)).value.data.parsed
        assert mint_parsed["info"]["decimals"] == 6 and mint_parsed["info"]["supply"] == "1500000"
        assert mint_parsed["info"]["mintAuthority"] == str(authority.pubkey())

        by_owner = (await client.get_token_accounts_by_owner(holder.pubkey(), TokenAccountOpts(mint=mint))).value
        assert [a.pubkey for a in by_owner] == [ata]
        by_prog = (
            await client.get_token_accounts_by_owner_json_parsed(
                holder.pubkey(), TokenAccountOpts(program_id=TOKEN_PROGRAM_ID)
            )
        ).value
        assert by_prog[0].account.data.parsed["info"]["tokenAmount"]["amount"] == "1500000"

        meta = (await client.get_transaction(sig)).value.transaction.meta
        post = [b for b in meta.post_token_balances if b.mint == mint]
        pre = [b for b in meta.pre_token_balances if b.mint == mint]
        assert post[0].ui_token_amount.amount == "1500000" and post[0].owner == holder.pubkey()
        assert pre[0].ui_token_amount.amount == "0"

        # Errors for non-token accounts, as Agave words them.
        resp = node.call("getTokenAccountBalance", [str(mint)])
        assert resp["error"] == {"code": -32602, "message": "Invalid param: not a Token account"}
        resp = node.call("getTokenSupply", [str(ata)])
        assert resp["error"]["code"] == -32602


async def test_account_subscribe_default_encoding_and_large_accounts(node):
    """Default (binary) notifications carry base58 data; over 128 bytes, Agave's error text
    instead (which solders cannot parse: subscribe with encoding="base64" from solana-py)."""
    import websockets

    async with AsyncClient(node.url) as client:
        authority = await funded_wallet(client)
        mint = await create_mint(client, authority)
        ata = await ensure_io_account(client, authority, authority.pubkey(), mint)
        async with websockets.connect(node.ws_url) as ws:
            subs = {}
            for key in (mint, ata):
                await ws.send(
                    json.dumps({"jsonrpc": "2.0", "id": 1, "method": "accountSubscribe", "params": [str(key)]})
                )
                subs[json.loads(await ws.recv())["result"]] = key
            await mint_io(client, authority, mint, ata, 7)
            notes = {}
            while len(notes) < 2:
                msg = json.loads(await asyncio.wait_for(ws.recv(), 5))
                assert msg["method"] == "accountNotification"
                notes[subs[msg["params"]["subscription"]]] = msg["params"]["result"]["value"]
        assert len(base58_decode(notes[mint]["data"])) == 82
        assert notes[ata]["data"] == "error: data too large for bs58 encoding"
        assert notes[ata]["space"] == 165


def base58_decode(s: str) -> bytes:
    alphabet = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
    n = 0
    for c in s:
        n = n * 58 + alphabet.index(c)
    body = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return b"\0" * (len(s) - len(s.lstrip("1"))) + body
