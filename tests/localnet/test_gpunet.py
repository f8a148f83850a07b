"""A gpunet instruction built by the SDK from the committed IDL; its event through logsSubscribe."""

from __future__ import annotations

import asyncio
import os

import based58
import pytest
from solana.rpc.async_api import AsyncClient
from solana.rpc.types import MemcmpOpts
from solana.rpc.websocket_api import connect
from solders.rpc.config import RpcTransactionLogsFilterMentions
from solders.rpc.responses import LogsNotification

from gpunet import instructions as ix
from gpunet.accounts import discriminator, fetch
from gpunet.client import send_and_confirm
from gpunet.events import decode_events
from gpunet.idl import PROGRAM_ID
from gpunet.localnet import PROGRAM_SO_ENV
from gpunet.pda import config_pda
from gpunet.testbed import funded_deployer
from gpunet.tokens import create_mint, ensure_io_account

pytestmark = pytest.mark.filterwarnings("ignore:websockets.legacy is deprecated:DeprecationWarning")


async def initialize_config(client: AsyncClient):
    admin = await funded_deployer(client)
    mint = await create_mint(client, admin)
    treasury = await ensure_io_account(client, admin, admin.pubkey(), mint)
    params = ix.ConfigParams(
        treasury=treasury,
        protocol_fee_bps=100,
        min_stake_per_gpu=1_000,
        unbonding_seconds=60,
        usage_period_seconds=60,
        jail_seconds=60,
        slash_bps=(1_000, 1_000, 1_000),
        slash_client_share_bps=5_000,
        attesters=[admin.pubkey()],
    )
    sig = await send_and_confirm(client, admin, [ix.initialize(admin.pubkey(), mint, params)])
    return admin, mint, sig


async def test_initialize_event_arrives_through_logs_subscribe(node):
    async with AsyncClient(node.url) as client, connect(node.ws_url) as ws:
        await ws.logs_subscribe(RpcTransactionLogsFilterMentions(PROGRAM_ID))
        await ws.recv()
        admin, mint, sig = await initialize_config(client)
        config = config_pda()

        note = (await asyncio.wait_for(ws.recv(), 5))[0]
        assert isinstance(note, LogsNotification)
        assert note.result.value.signature == sig and note.result.value.err is None
        events = decode_events(note.result.value.logs)
        assert [e.name for e in events] == ["ConfigInitialized"]
        assert events[0].data.admin == admin.pubkey() and events[0].data.io_mint == mint

        # The account decodes with the IDL, and getProgramAccounts filters it by memcmp.
        cfg = await fetch(client, config, "Config")
        assert cfg.admin == admin.pubkey() and cfg.protocol_fee_bps == 100
        found = (
            await client.get_program_accounts(
                PROGRAM_ID, encoding="base64", filters=[MemcmpOpts(offset=8, bytes=str(admin.pubkey()))]
            )
        ).value
        assert [a.pubkey for a in found] == [config]
        none = (
            await client.get_program_accounts(
                PROGRAM_ID, encoding="base64", filters=[MemcmpOpts(offset=8, bytes=str(mint))]
            )
        ).value
        assert none == []
        by_disc = (
            await client.get_program_accounts(
                PROGRAM_ID,
                encoding="base64",
                filters=[MemcmpOpts(offset=0, bytes=based58.b58encode(discriminator("Config")).decode())],
            )
        ).value
        assert [a.pubkey for a in by_disc] == [config]
        size = len((await client.get_account_info(config)).value.data)
        with_size = node.call(
            "getProgramAccounts",
            [str(PROGRAM_ID), {"encoding": "base64", "withContext": True, "filters": [{"dataSize": size}]}],
        )
        assert [a["pubkey"] for a in with_size["result"]["value"]] == [str(config)]
        # withContext: the slot the answer was read at (0 is a real slot: this test may finish inside it)
        assert 0 <= with_size["result"]["context"]["slot"] <= node.call("getSlot")["result"]

        resp = node.call("getTransaction", [str(sig), {"encoding": "json"}])
        assert resp["result"]["meta"]["err"] is None
        assert any(line.startswith("Program data: ") for line in resp["result"]["meta"]["logMessages"])
        # The config account is created through a CPI to the system program: an inner instruction.
        inner = resp["result"]["meta"]["innerInstructions"]
        keys = resp["result"]["transaction"]["message"]["accountKeys"]
        top = resp["result"]["transaction"]["message"]["instructions"]  # the compute budget's, then initialize
        ours = next(i for i, ix in enumerate(top) if keys[ix["programIdIndex"]] == str(PROGRAM_ID))
        assert inner and inner[0]["index"] == ours and inner[0]["instructions"][0]["stackHeight"] == 2
        assert keys[inner[0]["instructions"][0]["programIdIndex"]] == "11111111111111111111111111111111"


async def test_the_node_runs_the_program_build_gpunet_program_so_names(node):
    """With GPUNET_PROGRAM_SO (scripts/test sets it for an SBF pass) the node runs that ELF,
    metered; without it, the native build at a flat fee plus the System program's CPI."""
    async with AsyncClient(node.url) as client:
        _, _, sig = await initialize_config(client)
    consumed = node.call("getTransaction", [str(sig), {"encoding": "json"}])["result"]["meta"]["computeUnitsConsumed"]
    flat = 1_000  # gpunet_localnet::NATIVE_PROGRAM_COMPUTE_UNITS
    if not os.environ.get(PROGRAM_SO_ENV):
        assert consumed < 2 * flat
    else:
        assert consumed > 5 * flat  # Borsh, PDA checks and the CPI, metered instruction by instruction
