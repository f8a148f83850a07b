"""`gpunet provider register|stake|unstake|withdraw|show`: a supplier's account and stake; and its pool
of delegated stake (co-staking): `open-pool`, `commission`, `withdraw-rewards` (delegators use
`gpunet stake`)."""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer
from rich.table import Table
from solana.rpc.async_api import AsyncClient
from solders.pubkey import Pubkey

from gpunet import instructions as ix
from gpunet import staking as sx
from gpunet.accounts import AccountError, chain_clock, fetch, fetch_config, resolve_provider
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
from gpunet.cli.stake import bps_text
from gpunet.history import transactions_of
from gpunet.pda import pool_pda, provider_pda, stake_vault_pda
from gpunet.positions import epoch_at, epoch_start, fetch_staking, schedule_at, scheduled_after
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
    """Start unbonding free stake (stake not backing a node).

    Withdraw it with `gpunet provider withdraw` once the unbonding time has
    passed. One amount unbonds at a time: while stake is unbonding, unstake is
    refused (exit 2), with the date from which to withdraw it. More than your free
    stake is refused (exit 4)."""

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
    """Withdraw stake whose unbonding time has passed to your IO account.

    Refused (exit 2) when nothing is unbonding, or before its unbonding time has
    passed (with the date)."""

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


async def _my_provider(client: AsyncClient, me: Pubkey) -> Any:
    try:
        return await fetch(client, provider_pda(me), "Provider")
    except AccountError:
        raise AccountError(f"wallet {me} is not a provider (register with `gpunet provider register`)") from None


async def _my_pool(client: AsyncClient, me: Pubkey) -> Any:
    await _my_provider(client, me)
    try:
        return await fetch(client, pool_pda(provider_pda(me)), "Pool")
    except AccountError:
        raise AccountError(
            f"provider {provider_pda(me)} has no pool yet: open it with `gpunet provider open-pool --commission-bps N`"
        ) from None


def _commission_check(bps: int, staking: Any) -> None:
    if bps > staking.max_commission_bps:
        raise BadInput(
            f"a commission of {bps_text(bps)} is above the staking config's bound, "
            f"{bps_text(staking.max_commission_bps)} (see `gpunet admin staking show`)"
        )


@app.command("open-pool")
def open_pool(
    commission_bps: Annotated[
        int,
        typer.Option(
            "--commission-bps",
            min=0,
            help="Your commission on the delegators' part of the pool's rewards, in basis points (at most the "
            "staking config's bound: `gpunet admin staking show`).",
        ),
    ],
    url: UrlOpt = None,
    keypair: KeypairOpt = DEFAULT_KEYPAIR,
    json_output: JsonOpt = False,
) -> None:
    """Open your pool to delegators (co-staking).

    From now on it takes delegations, up to 1x your own active stake, and it earns
    rewards from the next epoch on."""

    async def command(s: Session) -> None:
        me = s.wallet.pubkey()
        async with s.client() as client:
            staking = await fetch_staking(client)
            await _my_provider(client, me)
            _commission_check(commission_bps, staking)
            if (await client.get_account_info(pool_pda(provider_pda(me)))).value is not None:
                raise BadInput(
                    f"provider {provider_pda(me)} already has a pool: change its commission with "
                    "`gpunet provider commission BPS`"
                )
            sig = await s.send(client, "Opening the pool", [sx.open_pool(me, provider_pda(me), commission_bps)])
            pool = await fetch(client, pool_pda(provider_pda(me)), "Pool")
        first = pool.opened_epoch + 1
        s.done(
            f"pool of provider {provider_pda(me)} opened with a commission of {bps_text(commission_bps)}: it takes "
            f"delegations now (`gpunet stake delegate {me} AMOUNT`) and earns rewards from epoch {first}, "
            f"{clock.until(epoch_start(staking, first))}",
            sig,
            provider=provider_pda(me),
            pool=pool_pda(provider_pda(me)),
            commission_bps=commission_bps,
            opened_epoch=pool.opened_epoch,
        )

    Session(url, keypair, json_output).run(command)


@app.command("commission")
def commission(
    bps: Annotated[int, typer.Argument(min=0, help="The new commission, in basis points (100 = 1 %).")],
    url: UrlOpt = None,
    keypair: KeypairOpt = DEFAULT_KEYPAIR,
    json_output: JsonOpt = False,
) -> None:
    """Change your pool's commission.

    A cut applies at once, a raise only after a full epoch's notice (from the
    epoch after next), so delegators can leave before it applies. A commission
    above the staking config's bound is refused (exit 2)."""

    async def command(s: Session) -> None:
        me = s.wallet.pubkey()
        async with s.client() as client:
            staking = await fetch_staking(client)
            pool = await _my_pool(client, me)
            _commission_check(bps, staking)
            epoch = epoch_at(staking, await chain_clock(client))
            current = schedule_at(pool.commission, epoch) or 0
            if bps == current and not scheduled_after(pool.commission, epoch):
                raise BadInput(f"the commission is already {bps_text(bps)}: nothing to change")
            sig = await s.send(client, "Setting the commission", [sx.set_commission(me, provider_pda(me), bps)])
            pool = await fetch(client, pool_pda(provider_pda(me)), "Pool")
        # the program's schedule says when it applies (the epoch may have turned meanwhile)
        from_epoch = max(e.from_epoch for e in list(pool.commission.entries)[: pool.commission.len])
        starts = epoch_start(staking, from_epoch)
        when = "from now" if starts <= time.time() else f"from epoch {from_epoch}, {clock.until(starts)}"
        s.done(
            f"commission set to {bps_text(bps)} {when} (it was {bps_text(current)})",
            sig,
            commission_bps=bps,
            from_epoch=from_epoch,
            previous_bps=current,
        )

    Session(url, keypair, json_output).run(command)


@app.command("withdraw-rewards")
def withdraw_rewards(url: UrlOpt = None, keypair: KeypairOpt = DEFAULT_KEYPAIR, json_output: JsonOpt = False) -> None:
    """Withdraw your pool's rewards (your own part and your commission) to your IO account.

    Until then a slash takes them first."""

    async def command(s: Session) -> None:
        me = s.wallet.pubkey()
        async with s.client() as client:
            io_mint = (await fetch_config(client)).io_mint
            pool = await _my_pool(client, me)
            if pool.provider_rewards == 0:
                raise BadInput(
                    f"your pool holds no rewards of yours (credited through epoch {pool.credited_through}): they "
                    "come as its epochs' reward roots are claimed"
                )
            missing = await create_io_account_if_missing(client, me, me, io_mint)
            amount = pool.provider_rewards
            sig = await s.send(
                client,
                f"Withdrawing {format_io(amount)} of rewards",
                [*missing, sx.withdraw_pool_rewards(me, provider_pda(me), io_account(me, io_mint))],
            )
        s.done(f"withdrew {format_io(amount)} of pool rewards to {io_account(me, io_mint)}", sig, amount=amount)

    Session(url, keypair, json_output).run(command)
