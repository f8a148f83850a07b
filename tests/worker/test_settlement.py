"""Usage receipts made by the agent, as the gateway receives them, verify with the SDK and are
accepted on chain by settle_usage on gpunet-localnet (the real program), each paying its increment;
`gpunet worker status` then shows the registration, the stake and the lease."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from gpunet import instructions as ix
from gpunet.amounts import IO
from gpunet.client import send_and_confirm
from gpunet.events import decode_events
from gpunet.keys import create_keypair_file
from gpunet.pda import lease_pda
from gpunet.protocol import Dispatch, JobSpec, UsageReceiptMessage
from gpunet.testbed import funded_deployer, funded_wallet
from gpunet.tokens import create_mint, create_token_account, mint_io, token_balance
from tests.worker.gateway import FakeGateway
from tests.worker.test_agent import final_status, reports, running_agent
from worker.cli import _check_registration
from worker.simulate import SimulatedGpus

PRICE = 36 * IO  # per GPU-hour: 10_000 base units per GPU-second
JOB = str(Path(__file__).parent / "jobs" / "steps.py")
GPUNET = str(Path(sys.executable).parent / "gpunet")


async def worker_status(keyfile: Path, state: Path, rpc_url: str, *, as_json: bool = True) -> Any:
    out = await asyncio.to_thread(
        subprocess.run,
        [
            GPUNET,
            "worker",
            "status",
            "-k",
            str(keyfile),
            "--simulate-gpus",
            "H100:2:80",
            "--state-dir",
            str(state),
            "--url",
            rpc_url,
            *(["--json"] if as_json else []),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "250"},
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout) if as_json else out.stdout


async def settle(
    client: AsyncClient,
    attester: Keypair,
    lease: Pubkey,
    node_key: Pubkey,
    supplier: Pubkey,
    supplier_tokens: Pubkey,
    message: UsageReceiptMessage,
    accepted: int,
):
    """What the coordinator will do: the node's own signature, carried into the Ed25519 instruction."""
    receipt = message.receipt()
    verify = receipt.signed_instruction(lease, node_key, message.signature_bytes())
    settle_ix = ix.settle_usage(attester.pubkey(), lease, node_key, supplier, supplier_tokens, receipt, accepted)
    while time.time() < receipt.through + 1:  # the program takes no receipt running past its clock
        await asyncio.sleep(0.2)
    sig = await send_and_confirm(client, attester, [verify, settle_ix])
    tx = (await client.get_transaction(sig, commitment=Confirmed, max_supported_transaction_version=0)).value
    [event] = [e for e in decode_events(tx.transaction.meta.log_messages) if e.name == "UsageSettled"]
    return event.data


async def test_the_workers_signed_receipts_settle_on_chain(node, tmp_path, capsys) -> None:
    keyfile = tmp_path / "node.json"
    node_key = create_keypair_file(keyfile)
    inventory = SimulatedGpus.parse("H100:2:80", str(node_key.pubkey())).inventory()
    async with AsyncClient(node.url, commitment=Confirmed) as client:
        admin = await funded_deployer(client)
        attester, supplier, client_wallet = [await funded_wallet(client) for _ in range(3)]
        mint = await create_mint(client, admin)
        treasury = await create_token_account(client, admin, mint, admin.pubkey())
        supplier_tokens = await create_token_account(client, admin, mint, supplier.pubkey())
        client_tokens = await create_token_account(client, admin, mint, client_wallet.pubkey())
        for account in (supplier_tokens, client_tokens):
            await mint_io(client, admin, mint, account, 1_000 * IO)
        params = ix.ConfigParams(
            treasury=treasury,
            protocol_fee_bps=500,
            min_stake_per_gpu=100 * IO,
            unbonding_seconds=60,
            usage_period_seconds=60,
            jail_seconds=60,
            slash_bps=(1_000, 2_000, 5_000),
            slash_client_share_bps=5_000,
            attesters=[attester.pubkey()],
        )
        await send_and_confirm(client, admin, [ix.initialize(admin.pubkey(), mint, params)])
        await send_and_confirm(
            client,
            supplier,
            [
                ix.register_provider(supplier.pubkey(), mint),
                ix.stake(supplier.pubkey(), supplier_tokens, 200 * IO),
                ix.register_node(
                    supplier.pubkey(),
                    node_key.pubkey(),
                    ix.NodeSpec(1, 2, 80, 1, PRICE, inventory_hash=inventory.hash()),
                ),
            ],
            [node_key],
        )
        # the agent's start-up check: the registered inventory matches; then a GPU goes missing
        await _check_registration(node.url, node_key, inventory, tmp_path / "check")
        assert capsys.readouterr().err == ""
        one_gpu = SimulatedGpus.parse("H100:1:80", str(node_key.pubkey())).inventory()
        await _check_registration(node.url, node_key, one_gpu, tmp_path / "check")
        warning = " ".join(capsys.readouterr().err.split())
        assert f"inventory hash {one_gpu.hash().hex()} differs from the registered {inventory.hash().hex()}" in warning
        assert f"GPU {inventory.gpus[1].uuid} missing" in warning
        await _check_registration(node.url, Keypair(), inventory, tmp_path / "check")
        assert "is not registered on chain" in " ".join(capsys.readouterr().err.split())

        terms = ix.LeaseTerms(
            gpu_model=1,
            min_vram_gb=80,
            gpu_count=2,
            region=ix.ANY,
            max_price_per_gpu_hour=PRICE,
            duration_seconds=3_600,
        )
        await send_and_confirm(
            client, client_wallet, [ix.open_lease(client_wallet.pubkey(), client_tokens, mint, 1, terms)]
        )
        lease = lease_pda(client_wallet.pubkey(), 1)
        await send_and_confirm(
            client,
            attester,
            [ix.assign_lease(attester.pubkey(), lease, [ix.Share(node_key.pubkey(), supplier.pubkey(), 2, PRICE)])],
        )
        status = await worker_status(keyfile, tmp_path / "state", node.url)  # placed, nothing run yet
        assert status["leases"] == {
            str(lease): {
                "receipts": 0,
                "acked": 0,
                "receipt_gpu_seconds": 0,
                "status": "Active",
                "gpus": 2,
                "price_per_gpu_hour": PRICE,
                "epoch": 1,
                "settled_until": status["leases"][str(lease)]["settled_until"],  # the assignment's time
                "settled_gpu_seconds": 0,
                "settled_gross": 0,
            }
        }
        await asyncio.sleep(1.1)  # the job starts in a later second than the assignment

        state = tmp_path / "state"
        async with FakeGateway(usage_period_seconds=2) as gateway, running_agent(gateway, state, node_key):
            spec = JobSpec(command=[sys.executable, JOB], env={"STEPS": "35", "STEP_SECONDS": "0.1"})
            await gateway.send(Dispatch(lease=str(lease), gpus=2, job=spec))
            await gateway.wait_for(lambda: final_status(gateway, str(lease)), what="the job's end")
            await gateway.wait_for(
                lambda: final_status(gateway, str(lease)) and len(reports(gateway, str(lease))) >= 2,
                what="the receipts",
            )
            usage = reports(gateway, str(lease))

        before = await token_balance(client, supplier_tokens)
        settled_payout, settled = 0, 0
        expected_payout = 0
        for message in usage:
            assert message.verify(node_key.pubkey()) and message.epoch == 1
            assert message.gpu_seconds >= settled  # each newer than the last (or the same one sent again)
            if message.gpu_seconds == settled:
                continue
            more = message.gpu_seconds - settled
            event = await settle(
                client, attester, lease, node_key.pubkey(), supplier.pubkey(), supplier_tokens, message, more
            )
            assert (event.receipt_gpu_seconds, event.through, event.gpu_seconds) == (
                message.gpu_seconds,
                message.through,
                more,
            )
            amount = message.gpu_seconds * PRICE // 3600 - settled * PRICE // 3600  # cumulative: no unit lost
            expected_payout += amount + (-amount * 500 // 10_000)  # the fee rounds up
            settled_payout += event.payout
            settled = message.gpu_seconds
        total = usage[-1].gpu_seconds
        assert total >= 2 * 3  # 3.5 s of steps on 2 GPUs
        assert await token_balance(client, supplier_tokens) == before + settled_payout == before + expected_payout

    status = await worker_status(keyfile, state, node.url)
    assert status["inventory"]["simulated"] and status["inventory"]["hash"] == inventory.hash().hex()
    # the GPUs' telemetry read now, as a heartbeat sends it
    assert [t["uuid"] for t in status["telemetry"]] == [g.uuid for g in inventory.gpus]
    assert all(t["healthy"] and t["temperature_c"] == 40 for t in status["telemetry"])
    chain = status["chain"]
    assert chain["registered"] and chain["inventory_hash"] == inventory.hash().hex()
    assert (chain["gpu_model"], chain["gpu_count"], chain["gpus_leased"], chain["jailed"]) == ("H100", 2, 2, False)
    assert chain["provider"]["staked"] == 200 * IO
    entry = status["leases"][str(lease)]
    assert entry["receipts"] == 1  # the journal keeps the share's newest receipt only
    assert entry["receipt_gpu_seconds"] >= entry["settled_gpu_seconds"] == total  # signed again as the agent stopped
    assert entry["epoch"] == 1 and entry["status"] == "Active"

    text = await worker_status(keyfile, state, node.url, as_json=False)
    assert "registered: 2x H100 80 GB in us-east" in text and "inventory matches" in text
    assert "GPU 1 now: healthy, 0% busy, 0 MiB used, 40 C, 0.0 W, 0 uncorrected ECC errors" in text
    assert "stake: 200 IO" in text and str(lease) in text
