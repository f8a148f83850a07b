"""The SDK against gpunet-localnet and the real program: every step of a lease built by
gpunet.instructions and sent by gpunet.client, the usage message accepted on chain (and a
one-byte change refused), program errors mapped to their names, events decoded."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from anchorpy import Coder
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from gpunet import instructions as ix
from gpunet.amounts import IO
from gpunet.client import TransactionFailed, send_and_confirm
from gpunet.events import decode_events
from gpunet.idl import load_idl
from gpunet.pda import (
    lease_pda,
    lease_vault_pda,
    node_pda,
    provider_pda,
    stake_vault_pda,
)
from gpunet.testbed import funded_deployer, funded_wallet
from gpunet.tokens import create_mint, create_token_account, mint_io, token_balance
from gpunet.usage import Receipt, ed25519_instruction


async def fetch(client: AsyncClient, name: str, address: Pubkey):
    data = (await client.get_account_info(address)).value.data
    return Coder(load_idl()).accounts.decode(bytes(data))


async def test_a_lease_from_opening_to_settlement_through_the_sdk(node) -> None:
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

        # a program error in preflight comes back by name, and nothing is sent
        with pytest.raises(TransactionFailed) as failed:
            await send_and_confirm(
                client, admin, [ix.update_config(admin.pubkey(), dataclasses.replace(params, protocol_fee_bps=2_001))]
            )
        assert failed.value.program_error is not None and failed.value.program_error.name == "FeeTooHigh"

        node_key = Keypair()
        await send_and_confirm(
            client,
            supplier,
            [
                ix.register_provider(supplier.pubkey(), mint),
                ix.stake(supplier.pubkey(), supplier_tokens, 200 * IO),
                ix.register_node(supplier.pubkey(), node_key.pubkey(), ix.NodeSpec(1, 2, 80, 1, 2 * IO)),
            ],
            [node_key],
        )
        assert await token_balance(client, stake_vault_pda(provider_pda(supplier.pubkey()))) == 200 * IO

        terms = ix.LeaseTerms(
            gpu_model=ix.ANY,
            min_vram_gb=24,
            gpu_count=2,
            region=ix.ANY,
            max_price_per_gpu_hour=3 * IO,
            duration_seconds=3_600,
        )
        await send_and_confirm(
            client, client_wallet, [ix.open_lease(client_wallet.pubkey(), client_tokens, mint, 1, terms)]
        )
        lease = lease_pda(client_wallet.pubkey(), 1)
        assert await token_balance(client, lease_vault_pda(lease)) == 6 * IO
        share = ix.Share(node_key.pubkey(), supplier.pubkey(), 2, 2 * IO)
        await send_and_confirm(client, attester, [ix.assign_lease(attester.pubkey(), lease, [share])])
        start = (await fetch(client, "Lease", lease)).assignments[0].settled_until

        await asyncio.sleep(2.2)  # the node's clock follows wall time
        report = Receipt(epoch=1, gpu_seconds=4, through=start + 2)
        settle = ix.settle_usage(
            attester.pubkey(), lease, node_key.pubkey(), supplier.pubkey(), supplier_tokens, report, 4
        )

        # one byte changed in the signed message: validly signed, but not this receipt
        tampered = bytearray(report.message(lease, node_key.pubkey()))
        tampered[-1] ^= 1
        with pytest.raises(TransactionFailed) as failed:
            await send_and_confirm(client, attester, [ed25519_instruction(node_key, bytes(tampered)), settle])
        assert failed.value.program_error.name == "MessageMismatch"

        before = await token_balance(client, supplier_tokens)
        sig = await send_and_confirm(client, attester, [report.sign(lease, node_key), settle])
        amount = 2 * IO * 4 // 3_600
        fee = -(-amount * 500 // 10_000)  # the protocol fee rounds up
        assert await token_balance(client, supplier_tokens) == before + amount - fee
        assert await token_balance(client, treasury) == 0  # the fee stays in the lease's vault until swept

        tx = (await client.get_transaction(sig, commitment=Confirmed, max_supported_transaction_version=0)).value
        events = decode_events(tx.transaction.meta.log_messages)
        assert [e.name for e in events] == ["UsageSettled"]
        assert (events[0].data.epoch, events[0].data.gpu_seconds, events[0].data.payout) == (1, 4, amount - fee)

        # replaying the same signed receipt is refused by the program (a new blockhash makes it a
        # new transaction; the same bytes again would be refused earlier, as a duplicate)
        await asyncio.sleep(0.3)
        with pytest.raises(TransactionFailed) as failed:
            await send_and_confirm(client, attester, [report.sign(lease, node_key), settle])
        assert failed.value.program_error.name == "BadSequence"

        state = await fetch(client, "Lease", lease)
        await asyncio.sleep(1.5)  # the node holds its GPUs on: a second or more of it unsettled at the close
        await send_and_confirm(
            client,
            client_wallet,
            [
                ix.close_lease(
                    client_wallet.pubkey(),
                    client_wallet.pubkey(),
                    client_tokens,
                    lease,
                    [a.node for a in state.assignments[: state.node_count]],
                )
            ],
        )
        closing = await fetch(client, "Lease", lease)
        kept = closing.deposited - closing.paid - closing.fees - closing.refunded  # the node's unsettled seconds
        # anyone may sweep the lease's fees to the treasury
        await send_and_confirm(client, client_wallet, [ix.sweep_fees(client_wallet.pubkey(), treasury, lease)])
        assert await token_balance(client, treasury) == fee
        assert type(closing.status).__name__ == "Closing" and kept > 0
        assert await token_balance(client, client_tokens) == 1_000 * IO - amount - kept
        # the attester declares its settlement done: the rest comes back and the vault is closed
        await send_and_confirm(
            client,
            attester,
            [ix.finalize_lease(attester.pubkey(), treasury, client_wallet.pubkey(), client_tokens, lease)],
        )
        assert await token_balance(client, client_tokens) == 1_000 * IO - amount
        assert (await client.get_account_info(lease_vault_pda(lease))).value is None
        assert node_pda(node_key.pubkey()) == state.assignments[0].node
