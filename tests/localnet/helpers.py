"""Client-side helpers for the localnet tests: funded keypairs, signed transactions, SPL setup."""

from __future__ import annotations

import asyncio

from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solana.rpc.types import TxOpts
from solders.hash import Hash
from solders.instruction import Instruction
from solders.keypair import Keypair
from solders.message import Message
from solders.pubkey import Pubkey
from solders.signature import Signature
from solders.transaction import Transaction
from spl.token.constants import TOKEN_PROGRAM_ID
from spl.token.instructions import (
    MintToParams,
    create_associated_token_account,
    get_associated_token_address,
    mint_to,
)

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


async def funded(client: AsyncClient, lamports: int = 10 * SOL) -> Keypair:
    kp = Keypair()
    sig = (await client.request_airdrop(kp.pubkey(), lamports)).value
    await confirm(client, sig)
    return kp


async def signed(client: AsyncClient, payer: Keypair, ixs: list[Instruction], signers: list[Keypair] = (),
                 blockhash: Hash | None = None) -> Transaction:
    if blockhash is None:
        blockhash = (await client.get_latest_blockhash()).value.blockhash
    msg = Message.new_with_blockhash(ixs, payer.pubkey(), blockhash)
    return Transaction([payer, *signers], msg, blockhash)


async def send(client: AsyncClient, payer: Keypair, ixs: list[Instruction], signers: list[Keypair] = ()) -> Signature:
    tx = await signed(client, payer, ixs, signers)
    sig = (await client.send_raw_transaction(bytes(tx), opts=TxOpts(preflight_commitment=Confirmed))).value
    await confirm(client, sig)
    return sig


async def create_ata(client: AsyncClient, payer: Keypair, owner: Pubkey, mint: Pubkey) -> Pubkey:
    await send(client, payer, [create_associated_token_account(payer.pubkey(), owner, mint)])
    return get_associated_token_address(owner, mint)


async def mint_tokens(client: AsyncClient, authority: Keypair, mint: Pubkey, dest: Pubkey, amount: int) -> Signature:
    return await send(client, authority, [mint_to(MintToParams(program_id=TOKEN_PROGRAM_ID, mint=mint, dest=dest,
                                                                mint_authority=authority.pubkey(), amount=amount))])
