"""IO token accounts: the SPL Token steps the admin, suppliers and clients need around gpunet."""

from __future__ import annotations

from solana.rpc.async_api import AsyncClient
from solders.instruction import Instruction
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.signature import Signature
from solders.system_program import CreateAccountParams, create_account
from spl.token.constants import TOKEN_PROGRAM_ID
from spl.token.instructions import (
    InitializeAccountParams,
    InitializeMintParams,
    MintToParams,
    create_associated_token_account,
    get_associated_token_address,
    initialize_account,
    initialize_mint,
    mint_to,
)

from gpunet.client import send_and_confirm

__all__ = [
    "IO_DECIMALS",
    "create_io_account_if_missing",
    "create_mint",
    "create_token_account",
    "ensure_io_account",
    "io_account",
    "io_balance",
    "mint_authority",
    "mint_io",
    "token_balance",
]

IO_DECIMALS = 6
_MINT_LEN = 82
_ACCOUNT_LEN = 165


async def create_mint(client: AsyncClient, payer: Keypair, decimals: int = IO_DECIMALS) -> Pubkey:
    """A new mint whose mint authority is `payer`."""
    mint = Keypair()
    rent = (await client.get_minimum_balance_for_rent_exemption(_MINT_LEN)).value
    await send_and_confirm(
        client,
        payer,
        [
            create_account(
                CreateAccountParams(
                    from_pubkey=payer.pubkey(),
                    to_pubkey=mint.pubkey(),
                    lamports=rent,
                    space=_MINT_LEN,
                    owner=TOKEN_PROGRAM_ID,
                )
            ),
            initialize_mint(
                InitializeMintParams(
                    decimals=decimals, program_id=TOKEN_PROGRAM_ID, mint=mint.pubkey(), mint_authority=payer.pubkey()
                )
            ),
        ],
        [mint],
    )
    return mint.pubkey()


async def create_token_account(client: AsyncClient, payer: Keypair, mint: Pubkey, owner: Pubkey) -> Pubkey:
    """A new token account of `mint` owned by `owner`, paid by `payer`."""
    account = Keypair()
    rent = (await client.get_minimum_balance_for_rent_exemption(_ACCOUNT_LEN)).value
    await send_and_confirm(
        client,
        payer,
        [
            create_account(
                CreateAccountParams(
                    from_pubkey=payer.pubkey(),
                    to_pubkey=account.pubkey(),
                    lamports=rent,
                    space=_ACCOUNT_LEN,
                    owner=TOKEN_PROGRAM_ID,
                )
            ),
            initialize_account(
                InitializeAccountParams(program_id=TOKEN_PROGRAM_ID, account=account.pubkey(), mint=mint, owner=owner)
            ),
        ],
        [account],
    )
    return account.pubkey()


async def mint_io(client: AsyncClient, mint_authority: Keypair, mint: Pubkey, to: Pubkey, amount: int) -> Signature:
    """Mints `amount` base units to the token account `to`; the transaction's signature."""
    return await send_and_confirm(
        client,
        mint_authority,
        [
            mint_to(
                MintToParams(
                    program_id=TOKEN_PROGRAM_ID,
                    mint=mint,
                    dest=to,
                    mint_authority=mint_authority.pubkey(),
                    amount=amount,
                )
            )
        ],
    )


async def mint_authority(client: AsyncClient, mint: Pubkey) -> Pubkey | None:
    """Who may mint more of `mint` (its COption<Pubkey> at the start of the SPL Mint layout: a u32
    tag, then the key); None when nobody may (or it is no SPL mint)."""
    info = (await client.get_account_info(mint)).value
    if info is None or info.owner != TOKEN_PROGRAM_ID or len(info.data) < _MINT_LEN:
        return None
    data = bytes(info.data)
    return Pubkey.from_bytes(data[4:36]) if int.from_bytes(data[:4], "little") == 1 else None


async def token_balance(client: AsyncClient, account: Pubkey) -> int:
    """The account's balance in base units."""
    return int((await client.get_token_account_balance(account)).value.amount)


def io_account(owner: Pubkey, mint: Pubkey) -> Pubkey:
    """A wallet's IO token account: its associated token account, as every Solana wallet uses."""
    return get_associated_token_address(owner, mint)


async def io_balance(client: AsyncClient, owner: Pubkey, mint: Pubkey) -> int:
    """The wallet's IO balance in base units (0 when it has no IO account yet)."""
    account = io_account(owner, mint)
    if (await client.get_account_info(account)).value is None:
        return 0
    return await token_balance(client, account)


async def create_io_account_if_missing(
    client: AsyncClient, payer: Pubkey, owner: Pubkey, mint: Pubkey
) -> list[Instruction]:
    """The instruction that creates the owner's IO account (paid by `payer`), or none if it exists."""
    if (await client.get_account_info(io_account(owner, mint))).value is not None:
        return []
    return [create_associated_token_account(payer, owner, mint)]


async def ensure_io_account(client: AsyncClient, payer: Keypair, owner: Pubkey, mint: Pubkey) -> Pubkey:
    """The owner's IO account, created (paid by `payer`) when missing."""
    if missing := await create_io_account_if_missing(client, payer.pubkey(), owner, mint):
        await send_and_confirm(client, payer, missing)
    return io_account(owner, mint)
