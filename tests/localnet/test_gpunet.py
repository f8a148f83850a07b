"""A gpunet instruction built from the committed IDL with anchorpy3; its event through logsSubscribe."""

from __future__ import annotations

import asyncio
import json

import pytest
from anchorpy import Context, EventParser, Program, Provider, Wallet
from solana.rpc.async_api import AsyncClient
from solana.rpc.types import MemcmpOpts
from solana.rpc.websocket_api import connect
from solders.pubkey import Pubkey
from solders.rpc.config import RpcTransactionLogsFilterMentions
from solders.rpc.responses import LogsNotification
from solders.system_program import ID as SYSTEM_PROGRAM_ID

from gpunet.tokens import create_mint
from gpunet.idl import PROGRAM_ID, idl_json, load_idl

from .helpers import create_ata, funded, send

B58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"


def _b58(data: bytes) -> str:
    n = int.from_bytes(data, "big")
    out = ""
    while n:
        n, r = divmod(n, 58)
        out = B58[r] + out
    return "1" * (len(data) - len(data.lstrip(b"\0"))) + out


pytestmark = pytest.mark.filterwarnings("ignore:websockets.legacy is deprecated:DeprecationWarning")


async def initialize_config(client: AsyncClient, ws=None):
    program = Program(load_idl(), PROGRAM_ID, Provider(client, Wallet.dummy()))
    admin = await funded(client)
    mint = await create_mint(client, admin)
    treasury = await create_ata(client, admin, admin.pubkey(), mint)
    config, _ = Pubkey.find_program_address([b"config"], PROGRAM_ID)
    # A plain dict: anchorpy3's dataclass path deep-copies the solders Pubkeys, which cannot be pickled.
    params = dict(
        treasury=treasury, protocol_fee_bps=100, min_stake_per_gpu=1_000, unbonding_seconds=60,
        usage_period_seconds=60, jail_seconds=60, slash_bps=[1_000, 1_000, 1_000], slash_client_share_bps=5_000,
        attesters=[admin.pubkey()], paused=False)
    ix = program.instruction["initialize"](params, ctx=Context(accounts={
        "admin": admin.pubkey(), "config": config, "io_mint": mint, "treasury": treasury,
        "system_program": SYSTEM_PROGRAM_ID}))
    sig = await send(client, admin, [ix])
    return program, admin, mint, config, sig


async def test_initialize_event_arrives_through_logs_subscribe(node):
    async with AsyncClient(node.url) as client, connect(node.ws_url) as ws:
        await ws.logs_subscribe(RpcTransactionLogsFilterMentions(PROGRAM_ID))
        await ws.recv()
        program, admin, mint, config, sig = await initialize_config(client)

        note = (await asyncio.wait_for(ws.recv(), 5))[0]
        assert isinstance(note, LogsNotification)
        assert note.result.value.signature == sig and note.result.value.err is None
        events = []
        EventParser(PROGRAM_ID, program.coder).parse_logs(note.result.value.logs, events.append)
        assert [e.name for e in events] == ["ConfigInitialized"]
        assert events[0].data.admin == admin.pubkey() and events[0].data.io_mint == mint

        # The account decodes with the IDL, and getProgramAccounts filters it by memcmp.
        cfg = await program.account["Config"].fetch(config)
        assert cfg.admin == admin.pubkey() and cfg.protocol_fee_bps == 100
        disc = next(a["discriminator"] for a in json.loads(idl_json())["accounts"] if a["name"] == "Config")
        found = (await client.get_program_accounts(PROGRAM_ID, encoding="base64", filters=[
            MemcmpOpts(offset=8, bytes=str(admin.pubkey()))])).value
        assert [a.pubkey for a in found] == [config]
        none = (await client.get_program_accounts(PROGRAM_ID, encoding="base64", filters=[
            MemcmpOpts(offset=8, bytes=str(mint))])).value
        assert none == []
        by_disc = (await client.get_program_accounts(PROGRAM_ID, encoding="base64", filters=[
            MemcmpOpts(offset=0, bytes=_b58(bytes(disc)))])).value
        assert [a.pubkey for a in by_disc] == [config]
        size = len((await client.get_account_info(config)).value.data)
        with_size = node.call("getProgramAccounts", [str(PROGRAM_ID), {
            "encoding": "base64", "withContext": True, "filters": [{"dataSize": size}]}])
        assert [a["pubkey"] for a in with_size["result"]["value"]] == [str(config)]
        assert with_size["result"]["context"]["slot"] > 0

        resp = node.call("getTransaction", [str(sig), {"encoding": "json"}])
        assert resp["result"]["meta"]["err"] is None
        assert any(line.startswith("Program data: ") for line in resp["result"]["meta"]["logMessages"])
        # The config account is created through a CPI to the system program: an inner instruction.
        inner = resp["result"]["meta"]["innerInstructions"]
        assert inner and inner[0]["index"] == 0 and inner[0]["instructions"][0]["stackHeight"] == 2
        keys = resp["result"]["transaction"]["message"]["accountKeys"]
        assert keys[inner[0]["instructions"][0]["programIdIndex"]] == "11111111111111111111111111111111"
