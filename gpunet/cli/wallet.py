"""`gpunet balance [WALLET]` and `gpunet transfer AMOUNT TO`: what a wallet holds in gpunet (SOL, IO,
stake, escrow locked in its leases) and IO sent to another wallet."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table
from solders.pubkey import Pubkey
from spl.token.constants import TOKEN_PROGRAM_ID
from spl.token.instructions import TransferCheckedParams, transfer_checked

from gpunet.accounts import AccountError, escrow, fetch, fetch_config, program_accounts
from gpunet.amounts import format_io, parse_io
from gpunet.cli import clock
from gpunet.cli.common import (
    DEFAULT_KEYPAIR,
    BadInput,
    CommitmentOpt,
    ExplorerOpt,
    JsonOpt,
    KeypairOpt,
    Session,
    UrlOpt,
    io_balance_check,
    pubkey_arg,
)
from gpunet.idl import PROGRAM_ID
from gpunet.pda import provider_pda
from gpunet.tokens import IO_DECIMALS, create_io_account_if_missing, io_account, io_balance

LAMPORTS_PER_SOL = 1_000_000_000
LOCKED = ("Open", "Active", "Closing")  # lease states whose vault still holds the client's escrow


def format_sol(lamports: int) -> str:
    """5_000_000_000 -> '5 SOL', 1_500_000_000 -> '1.5 SOL' (exact: no float on the way)."""
    whole, frac = divmod(lamports, LAMPORTS_PER_SOL)
    return f"{whole:,}" + (f".{frac:09d}".rstrip("0") if frac else "") + " SOL"


def balance(
    wallet: Annotated[str | None, typer.Argument(help="Any wallet (default: yours).")] = None,
    url: UrlOpt = None,
    keypair: KeypairOpt = DEFAULT_KEYPAIR,
    commitment: CommitmentOpt = None,
    explorer: ExplorerOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """A wallet's SOL, IO, stake and the escrow locked in its leases.

    Stake is shown for a provider's wallet: how much is bonded to its nodes, how
    much is free, and how much is unbonding (with the date it can be withdrawn).
    The escrow locked is what the wallet's leases not yet finalized (open, active
    or closing) still hold."""

    async def command(s: Session) -> None:
        owner = pubkey_arg(wallet, "wallet") if wallet else s.wallet.pubkey()
        async with s.client() as client:
            io_mint = (await fetch_config(client)).io_mint
            lamports = (await client.get_balance(owner)).value
            io = await io_balance(client, owner, io_mint)
            try:
                p = await fetch(client, provider_pda(owner), "Provider")
                stake: dict[str, Any] | None = {
                    "staked": p.staked,
                    "bonded": p.bonded,
                    "free": p.staked - p.bonded,
                    "unbonding": p.unbonding,
                    "unbonding_ends_at": p.unbonding_ends_at,
                }
            except AccountError:
                stake = None  # not a provider
            leases = [
                (a, lease)
                for a, lease in await program_accounts(client, "Lease", client=owner)
                if type(lease.status).__name__ in LOCKED
            ]
            locked = sum([(await escrow(client, a, lease)).balance for a, lease in leases])
        data = {
            "wallet": owner,
            "sol_lamports": lamports,
            "io": io,
            "io_account": io_account(owner, io_mint),
            "stake": stake,
            "escrow_locked": locked,
            "leases_holding_escrow": len(leases),
        }

        def table() -> Table:
            t = Table("", "", title=f"wallet {s.link('address', owner)}", show_header=False)
            t.add_row("SOL", format_sol(lamports))
            t.add_row("IO", f"{format_io(io)} (account {s.link('address', data['io_account'])})")
            if stake is None:
                t.add_row("stake", "- (not a provider)")
            else:
                t.add_row(
                    "stake",
                    f"{format_io(stake['staked'])} ({format_io(stake['bonded'])} bonded to nodes, "
                    f"{format_io(stake['free'])} free)",
                )
                if stake["unbonding"]:
                    t.add_row(
                        "unbonding", f"{format_io(stake['unbonding'])} until {clock.until(stake['unbonding_ends_at'])}"
                    )
            t.add_row("escrow locked", f"{format_io(locked)} in {len(leases)} lease(s) not yet finalized")
            return t

        s.show(data, table)

    Session(url, keypair, json_output, commitment_flag=commitment, explorer_flag=explorer).run(command)


def transfer(
    amount: Annotated[str, typer.Argument(help="IO to send, e.g. 12.5 (at most 6 decimals).")],
    to: Annotated[str, typer.Argument(help="The recipient's wallet (not its token account).")],
    url: UrlOpt = None,
    keypair: KeypairOpt = DEFAULT_KEYPAIR,
    json_output: JsonOpt = False,
) -> None:
    """Send IO to another wallet.

    TO must be a wallet: a token account, a gpunet account or your own wallet is
    refused (exit 2), and so is a bad amount; more IO than you hold is refused
    (exit 4). Nothing is sent then. When the recipient has no IO account yet, it
    is created in the same transaction, its rent paid by you, and the command says
    so."""

    async def command(s: Session) -> None:
        units, me = parse_io(amount), s.wallet.pubkey()
        recipient = pubkey_arg(to, "recipient wallet")
        if recipient == me:
            raise BadInput(f"{recipient} is your own wallet: give the recipient's")
        async with s.client() as client:
            io_mint = (await fetch_config(client)).io_mint
            await _check_is_wallet(client, recipient)
            io_balance_check(f"sending {format_io(units)}", units, await io_balance(client, me, io_mint))
            created = await create_io_account_if_missing(client, me, recipient, io_mint)
            sig = await s.send(
                client,
                f"Sending {format_io(units)}",
                [
                    *created,
                    transfer_checked(
                        TransferCheckedParams(
                            program_id=TOKEN_PROGRAM_ID,
                            source=io_account(me, io_mint),
                            mint=io_mint,
                            dest=io_account(recipient, io_mint),
                            owner=me,
                            amount=units,
                            decimals=IO_DECIMALS,
                        )
                    ),
                ],
            )
        note = f" (created its IO account {io_account(recipient, io_mint)}, rent paid by you)" if created else ""
        s.done(
            f"sent {format_io(units)} to {recipient}{note}",
            sig,
            amount=units,
            to=recipient,
            created_io_account=bool(created),
        )

    Session(url, keypair, json_output).run(command)


async def _check_is_wallet(client: Any, address: Pubkey) -> None:
    """Tokens sent to the IO account of a token account or of a gpunet account would be stuck: refuse."""
    info = (await client.get_account_info(address)).value
    if info is None:
        return
    if info.owner == TOKEN_PROGRAM_ID:
        owner = Pubkey.from_bytes(bytes(info.data)[32:64]) if len(info.data) >= 64 else None
        raise BadInput(
            f"{address} is a token account, not a wallet"
            + (f": give the wallet that owns it, {owner}" if owner else "")
        )
    if info.owner == PROGRAM_ID:
        raise BadInput(f"{address} is a gpunet account (a lease, node, provider or the config), not a wallet")
