"""Verified supply through the SDK against gpunet-localnet: record_verification built by
gpunet.instructions, refused with its error's name, recorded on the Node account and announced by
NodeVerified; with a tier required, only a verified node is assigned."""

from __future__ import annotations

import hashlib
import time

import pytest
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solders.keypair import Keypair

from gpunet import instructions as ix
from gpunet.accounts import fetch
from gpunet.client import TransactionFailed
from gpunet.events import decode_events
from gpunet.limits import MAX_VERIFICATION_SECONDS, MAX_VERIFICATION_TIER
from gpunet.testbed import Market


def test_the_builder_refuses_what_the_program_would() -> None:
    key = Keypair().pubkey()
    for tier in (ix.TIER_UNVERIFIED, MAX_VERIFICATION_TIER + 1):
        with pytest.raises(ValueError, match="tier"):
            ix.record_verification(key, key, tier, 1, bytes(32), bytes(32))
    with pytest.raises(ValueError, match="32 bytes"):
        ix.record_verification(key, key, ix.TIER_GPU, 1, bytes(31), bytes(32))
    assert MAX_VERIFICATION_TIER == ix.TIER_CONFIDENTIAL
    assert ix.ConfigParams(Keypair().pubkey(), 0, 0, 0, 1, 0, (0, 0, 0), 0).min_verification_tier == 0
    assert 0 < ix.ConfigParams(Keypair().pubkey(), 0, 0, 0, 1, 0, (0, 0, 0), 0).max_verification_seconds
    assert MAX_VERIFICATION_SECONDS == 30 * 86_400


async def _error(market: Market, payer: Keypair, instruction) -> str | None:
    with pytest.raises(TransactionFailed) as failed:
        await market.send(payer, [instruction])
    return failed.value.program_error.name if failed.value.program_error else None


async def test_a_verification_recorded_and_required(node) -> None:
    async with AsyncClient(node.url, commitment=Confirmed) as chain:
        market = await Market.create(chain)
        ada, bob = await market.supplier(), await market.supplier()
        attester = market.attester.pubkey()
        until = int(time.time()) + 3_600
        evidence = hashlib.sha256(b"challenge evidence").digest()

        wrong = ix.record_verification(attester, ada.node_key.pubkey(), ix.TIER_GPU, until, evidence, bytes([1] * 32))
        assert await _error(market, market.attester, wrong) == "InventoryMismatch"
        stranger = ix.record_verification(
            ada.wallet.pubkey(), ada.node_key.pubkey(), ix.TIER_GPU, until, evidence, bytes(32)
        )
        assert await _error(market, ada.wallet, stranger) == "NotAttester"

        good = ix.record_verification(attester, ada.node_key.pubkey(), ix.TIER_GPU, until, evidence, bytes(32))
        sig = await market.send(market.attester, [good])
        tx = (await chain.get_transaction(sig, max_supported_transaction_version=0)).value
        assert tx is not None and tx.transaction.meta is not None
        (event,) = decode_events(tx.transaction.meta.log_messages or [])
        assert event.name == "NodeVerified"
        assert (event.data.node, event.data.tier, event.data.valid_until) == (ada.node, ix.TIER_GPU, until)
        assert bytes(event.data.evidence_hash) == evidence
        n = await fetch(chain, ada.node, "Node")
        assert (n.verification_tier, n.verified_until, bytes(n.verification_evidence)) == (ix.TIER_GPU, until, evidence)

        # A tier required: the unverified node is refused, the verified one placed.
        params = ix.ConfigParams(**{**market.params.__dict__, "min_verification_tier": ix.TIER_GPU})
        await market.send(market.admin, [ix.update_config(market.admin.pubkey(), params)])
        dev = await market.client()
        lease = await market.open_lease(dev, 1, gpus=2)
        refused = ix.assign_lease(attester, lease, [bob.share(2)])
        assert await _error(market, market.attester, refused) == "NodeNotVerified"
        await market.assign(lease, [(ada, 2)])
