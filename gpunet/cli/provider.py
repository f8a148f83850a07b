"""`gpunet provider register|stake|unstake|withdraw|show`: a supplier's account and stake."""

from __future__ import annotations

import time
from typing import Annotated

import typer
from rich.table import Table

from gpunet import instructions as ix
from gpunet.accounts import AccountError, fetch, fetch_config, resolve_provider
from gpunet.amounts import format_io, parse_io
from gpunet.cli import clock
from gpunet.cli.common import (
    DEFAULT_KEYPAIR,
    BadInput,
    CommitmentOpt,
    ExplorerOpt,
    JsonOpt,
    KeypairOpt,
    NotEnoughFunds,
    Session,
    UrlOpt,
    io_balance_check,
    pubkey_arg,
)
from gpunet.history import transactions_of
from gpunet.pda import provider_pda, stake_vault_pda
from gpunet.tokens import create_io_account_if_missing, io_account, io_balance

app = typer.Typer(help="A supplier's provider account and stake.", no_args_is_help=True)
AmountArg = Annotated[str, typer.Argument(help="IO, e.g. 1000 or 12.5.")]


@app.command("register")
def register(url: UrlOpt = None, keypair: KeypairOpt = DEFAULT_KEYPAIR, json_output: JsonOpt = False) -> None:
    """Create your provider account and stake vault (and your IO account for payouts)."""

    async def command(s: Session) -> None:
        me = s.wallet.pubkey()
        async with s.client() as client:
            io_mint = (await fetch_config(client)).io_mint
            if (await client.get_account_info(provider_pda(me))).value is not None:
                raise BadInput(f"wallet {me} is already a registered provider ({provider_pda(me)})")
            payouts = await create_io_account_if_missing(client, me, me, io_mint)
            sig = await s.send(client, "Registering the provider", [*payouts, ix.register_provider(me, io_mint)])
        s.done(
            f"provider {provider_pda(me)} registered; payouts go to {io_account(me, io_mint)}",
            sig,
            provider=provider_pda(me),
        )

    Session(url, keypair, json_output).run(command)


@app.command("stake")
def stake(
    amount: AmountArg, url: UrlOpt = None, keypair: KeypairOpt = DEFAULT_KEYPAIR, json_output: JsonOpt = False
) -> None:
    """Move IO from your wallet into your stake vault."""

    async def command(s: Session) -> None:
        units, me = parse_io(amount), s.wallet.pubkey()
        async with s.client() as client:
            io_mint = (await fetch_config(client)).io_mint
            await fetch(client, provider_pda(me), "Provider")
            io_balance_check(f"staking {format_io(units)}", units, await io_balance(client, me, io_mint))
            sig = await s.send(client, f"Staking {format_io(units)}", [ix.stake(me, io_account(me, io_mint), units)])
        s.done(f"staked {format_io(units)}", sig, amount=units)

    Session(url, keypair, json_output).run(command)


@app.command("unstake")
def unstake(
    amount: AmountArg, url: UrlOpt = None, keypair: KeypairOpt = DEFAULT_KEYPAIR, json_output: JsonOpt = False
) -> None:
    """Start unbonding free stake (stake not backing a node); withdraw it after the unbonding time."""

    async def command(s: Session) -> None:
        units, me = parse_io(amount), s.wallet.pubkey()
        async with s.client() as client:
            p = await fetch(client, provider_pda(me), "Provider")
            free = p.staked - p.bonded
            if p.unbonding:
                # One unbonding at a time: the program refuses a second request rather than move the
                # first one's date (it would otherwise restart the clock of everything unbonding).
                ready = "now" if p.unbonding_ends_at <= time.time() else clock.until(p.unbonding_ends_at)
                raise BadInput(
                    f"{format_io(p.unbonding)} is already unbonding, withdrawable {ready}: withdraw it with "
                    "`gpunet provider withdraw`, then unstake more (a second request would not change its date)"
                )
            if units > free:
                raise NotEnoughFunds(
                    f"unstaking {format_io(units)} needs that much free stake, but only "
                    f"{format_io(free)} is free ({format_io(p.bonded)} backs your nodes)"
                )
            sig = await s.send(client, f"Requesting to unstake {format_io(units)}", [ix.request_unstake(me, units)])
            p = await fetch(client, provider_pda(me), "Provider")  # the program set when unbonding ends
        s.done(
            f"unbonding {format_io(p.unbonding)} until {clock.until(p.unbonding_ends_at)}; withdraw it then with "
            "`gpunet provider withdraw`",
            sig,
            amount=units,
            unbonding=p.unbonding,
            unbonding_ends_at=p.unbonding_ends_at,
        )

    Session(url, keypair, json_output).run(command)


@app.command("withdraw")
def withdraw(url: UrlOpt = None, keypair: KeypairOpt = DEFAULT_KEYPAIR, json_output: JsonOpt = False) -> None:
    """Withdraw stake whose unbonding time has passed to your IO account."""

    async def command(s: Session) -> None:
        me = s.wallet.pubkey()
        async with s.client() as client:
            io_mint = (await fetch_config(client)).io_mint
            p = await fetch(client, provider_pda(me), "Provider")
            if p.unbonding == 0:
                raise BadInput("nothing is unbonding: request it first with `gpunet provider unstake AMOUNT`")
            if (wait := p.unbonding_ends_at - int(time.time())) > 0:
                raise BadInput(
                    f"{format_io(p.unbonding)} is still unbonding for {clock.span(wait)}, until "
                    f"{clock.at(p.unbonding_ends_at)}; run this again then"
                )
            missing = await create_io_account_if_missing(client, me, me, io_mint)
            sig = await s.send(
                client,
                f"Withdrawing {format_io(p.unbonding)}",
                [*missing, ix.withdraw_unstaked(me, io_account(me, io_mint))],
            )
        s.done(f"withdrew {format_io(p.unbonding)}", sig, amount=p.unbonding)

    Session(url, keypair, json_output).run(command)


@app.command("show")
def show(
    wallet: Annotated[
        str | None, typer.Argument(help="A provider's wallet or provider account (default: your wallet).")
    ] = None,
    url: UrlOpt = None,
    keypair: KeypairOpt = DEFAULT_KEYPAIR,
    commitment: CommitmentOpt = None,
    explorer: ExplorerOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """A provider's stake, bonds, unbonding, slashes and earnings."""

    async def command(s: Session) -> None:
        async with s.client() as client:
            if wallet:
                resolved = await resolve_provider(client, pubkey_arg(wallet, "provider wallet or account"))
                authority, address, p = resolved.wallet, resolved.account, resolved.decoded
            else:
                authority = s.wallet.pubkey()
                address = provider_pda(authority)
                try:
                    p = await fetch(client, address, "Provider")
                except AccountError:
                    raise AccountError(
                        f"wallet {authority} is not a provider (register with `gpunet provider register`)"
                    ) from None
            vault = int((await client.get_token_account_balance(stake_vault_pda(address))).value.amount)
            # No account counts earnings (a settlement writes no shared account): its events do.
            earned = sum(
                e.data.payout
                for tx in await transactions_of(client, address)
                for e in tx.events
                if e.name == "UsageSettled" and e.data.provider == address
            )
        data = {
            "provider": address,
            "authority": authority,
            "staked": p.staked,
            "bonded": p.bonded,
            "free": p.staked - p.bonded,
            "unbonding": p.unbonding,
            "unbonding_ends_at": p.unbonding_ends_at,
            "slashed": p.slashed,
            "earned": earned,
            "nodes": p.node_count,
            "stake_vault_balance": vault,
        }

        def table() -> Table:
            t = Table("", "", title=f"provider {s.link('address', address)}", show_header=False)
            t.add_row("wallet", s.link("address", authority))
            for key in ("staked", "bonded", "free", "unbonding", "slashed", "earned", "stake_vault_balance"):
                t.add_row(key.replace("_", " "), format_io(data[key]))
            if p.unbonding:
                t.add_row("unbonding ends", clock.until(p.unbonding_ends_at))
            t.add_row("nodes", str(p.node_count))
            return t

        s.show(data, table)

    Session(url, keypair, json_output, commitment_flag=commitment, explorer_flag=explorer).run(command)
