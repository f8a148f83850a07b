"""Client-side helpers for the localnet tests: confirmation by polling and raw signed transactions.

Raw, because these tests drive the node itself (stale blockhashes, forged signatures,
duplicate sends); a plain send, funded wallets, token accounts and minting come from the SDK
(gpunet.client.send_and_confirm, gpunet.testbed.funded_wallet, gpunet.tokens).
"""

from __future__ import annotations

import asyncio

from solana.rpc.async_api import AsyncClient
from solders.hash import Hash
from solders.instruction import Instruction
from solders.keypair import Keypair
from solders.message import Message
from solders.signature import Signature
from solders.transaction import Transaction

SOL = 1_000_000_000


async def confirm(client: AsyncClient, sig: Signature, timeout: float = 10.0) -> None:
    """Polls getSignatureStatuses until the transaction is recorded."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        status = (await client.get_signature_statuses([sig])).value[0]
        if status is not None:
            assert status.err is None, status.err
            return
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError(f"{sig} not confirmed")
        await asyncio.sleep(0.05)


async def signed(
    client: AsyncClient,
    payer: Keypair,
    ixs: list[Instruction],
    signers: list[Keypair] = (),
    blockhash: Hash | None = None,
) -> Transaction:
    """A signed transaction, not sent: the test chooses how (and how often) to send it."""
    if blockhash is None:
        blockhash = (await client.get_latest_blockhash()).value.blockhash
    msg = Message.new_with_blockhash(ixs, payer.pubkey(), blockhash)
    return Transaction([payer, *signers], msg, blockhash)
