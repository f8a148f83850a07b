"""Airdrop, SOL transfer confirmed through signatureSubscribe, transaction history, the confirmation delay."""

from __future__ import annotations

import asyncio

import pytest
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed, Processed
from solana.rpc.websocket_api import connect
from solders.keypair import Keypair
from solders.rpc.responses import SignatureNotification, SlotNotification
from solders.system_program import TransferParams, transfer

from gpunet.testbed import funded_wallet

from .helpers import SOL, confirm, signed

pytestmark = pytest.mark.filterwarnings("ignore:websockets.legacy is deprecated:DeprecationWarning")


async def test_airdrop_and_transfer_confirmed_by_signature_subscribe(node):
    async with AsyncClient(node.url) as client:
        alice = await funded_wallet(client, 5)
        bob = Keypair()
        assert (await client.get_balance(alice.pubkey())).value == 5 * SOL

        tx = await signed(
            client, alice, [transfer(TransferParams(from_pubkey=alice.pubkey(), to_pubkey=bob.pubkey(), lamports=SOL))]
        )
        sig = tx.signatures[0]
        async with connect(node.ws_url) as ws:
            await ws.signature_subscribe(sig)
            first = await ws.recv()
            sub_id = first[0].result
            assert isinstance(sub_id, int)
            assert (await client.send_raw_transaction(bytes(tx))).value == sig
            note = (await asyncio.wait_for(ws.recv(), 5))[0]
            assert isinstance(note, SignatureNotification)
            assert note.subscription == sub_id
            assert note.result.value.err is None

        assert (await client.get_balance(bob.pubkey())).value == SOL
        assert (await client.get_balance(alice.pubkey())).value == 4 * SOL - 5000

        got = (await client.get_transaction(sig)).value
        assert got is not None
        meta = got.transaction.meta
        assert meta.err is None and meta.fee == 5000
        keys = got.transaction.transaction.message.account_keys
        i_alice, i_bob = keys.index(alice.pubkey()), keys.index(bob.pubkey())
        assert meta.pre_balances[i_alice] == 5 * SOL and meta.post_balances[i_alice] == 4 * SOL - 5000
        assert meta.pre_balances[i_bob] == 0 and meta.post_balances[i_bob] == SOL
        assert any("11111111111111111111111111111111 success" in line for line in meta.log_messages)
        assert got.slot <= (await client.get_slot()).value
        assert got.block_time == (await client.get_block_time(got.slot)).value

        status = (await client.get_signature_statuses([sig])).value[0]
        assert status.confirmation_status is not None and str(status.confirmation_status).endswith("Finalized")
        sigs = (await client.get_signatures_for_address(bob.pubkey())).value
        assert [s.signature for s in sigs] == [sig]


async def test_signature_subscribe_after_processing_notifies_at_once(node):
    async with AsyncClient(node.url) as client:
        kp = Keypair()
        sig = (await client.request_airdrop(kp.pubkey(), SOL)).value
        await confirm(client, sig)
        async with connect(node.ws_url) as ws:
            await ws.signature_subscribe(sig)
            msgs = list(await ws.recv())
            if len(msgs) == 1:
                msgs += list(await asyncio.wait_for(ws.recv(), 5))
            assert isinstance(msgs[1], SignatureNotification) and msgs[1].result.value.err is None


async def test_signatures_for_address_newest_first_with_before_until_limit(node):
    async with AsyncClient(node.url) as client:
        kp = Keypair()
        sigs = []
        for i in range(5):
            sig = (await client.request_airdrop(kp.pubkey(), SOL + i)).value
            await confirm(client, sig)
            sigs.append(sig)
        got = [s.signature for s in (await client.get_signatures_for_address(kp.pubkey())).value]
        assert got == sigs[::-1]
        got = [s.signature for s in (await client.get_signatures_for_address(kp.pubkey(), limit=2)).value]
        assert got == [sigs[4], sigs[3]]
        got = [s.signature for s in (await client.get_signatures_for_address(kp.pubkey(), before=sigs[3])).value]
        assert got == [sigs[2], sigs[1], sigs[0]]
        got = [s.signature for s in (await client.get_signatures_for_address(kp.pubkey(), until=sigs[1])).value]
        assert got == [sigs[4], sigs[3], sigs[2]]
        # The same airdrop twice in one slot still gets two distinct transactions.
        a = (await client.request_airdrop(kp.pubkey(), 7)).value
        b = (await client.request_airdrop(kp.pubkey(), 7)).value
        assert a != b


async def test_slot_subscribe_and_unsubscribe(node):
    async with connect(node.ws_url) as ws:
        await ws.slot_subscribe()
        sub_id = (await ws.recv())[0].result
        notes = [(await asyncio.wait_for(ws.recv(), 5))[0] for _ in range(2)]
        assert all(isinstance(n, SlotNotification) for n in notes)
        assert notes[1].result.slot == notes[0].result.slot + 1
        assert notes[1].result.parent == notes[0].result.slot
        await ws.slot_unsubscribe(sub_id)


async def test_epoch_info_blockhash_and_fees(node):
    async with AsyncClient(node.url) as client:
        info = (await client.get_epoch_info()).value
        assert info.slots_in_epoch == 432_000
        bh = (await client.get_latest_blockhash()).value
        height = (await client.get_block_height()).value
        assert height < bh.last_valid_block_height <= height + 150
        assert node.call("isBlockhashValid", [str(bh.blockhash)])["result"]["value"] is True
        assert node.call("isBlockhashValid", [str(Keypair().pubkey())])["result"]["value"] is False
        kp = Keypair()
        tx = await signed(
            client, kp, [transfer(TransferParams(from_pubkey=kp.pubkey(), to_pubkey=kp.pubkey(), lamports=1))]
        )
        assert (await client.get_fee_for_message(tx.message)).value == 5000
        assert (await client.get_minimum_balance_for_rent_exemption(0)).value == 890_880
        assert (await client.get_genesis_hash()).value
        version = (await client.get_version()).value
        assert version.solana_core == "2.3.13"
        assert (await client.get_identity()).value.identity


async def test_a_confirmation_delay_holds_confirmed_back_by_its_slots(start_node):
    """With --confirm-slots 3, a transfer is processed at once and confirmed only 3 slots after its
    own slot: its status and a signatureSubscribe at "confirmed" both wait; the control, a
    subscription at "processed", is told at once."""
    node = start_node(confirm_slots=3)
    async with AsyncClient(node.url) as client:
        alice = await funded_wallet(client, 2)  # waits out the delay (the client asks for "finalized")
        tx = await signed(
            client,
            alice,
            [transfer(TransferParams(from_pubkey=alice.pubkey(), to_pubkey=Keypair().pubkey(), lamports=1))],
        )
        sig = tx.signatures[0]
        async with connect(node.ws_url) as confirmed_ws, connect(node.ws_url) as processed_ws:
            await confirmed_ws.signature_subscribe(sig, commitment=Confirmed)
            await processed_ws.signature_subscribe(sig, commitment=Processed)
            await confirmed_ws.recv()
            await processed_ws.recv()
            await client.send_raw_transaction(bytes(tx))
            told = (await asyncio.wait_for(processed_ws.recv(), 5))[0]
            assert isinstance(told, SignatureNotification)
            first = (await client.get_signature_statuses([sig])).value[0]
            assert first is not None and str(first.confirmation_status).endswith("Processed")
            note = (await asyncio.wait_for(confirmed_ws.recv(), 10))[0]
            assert isinstance(note, SignatureNotification) and note.result.value.err is None
            slot_told = (await client.get_slot()).value
        assert slot_told >= first.slot + 3
        status = (await client.get_signature_statuses([sig])).value[0]
        assert str(status.confirmation_status).endswith("Confirmed") and status.confirmations >= 3
