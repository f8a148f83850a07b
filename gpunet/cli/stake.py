"""`gpunet stake delegate|undelegate|withdraw|collect|show`: a token holder's positions in providers'
pools (co-staking). A position is shares of the pool's delegated stake: it backs the provider at
once, earns from the next epoch on, and leaves through the unbonding cohort of the epoch it was
undelegated in (withdrawable once that cohort's unbonding ends). Rewards credited to the pool are
collected per position. The staking config and the epoch clock come from `gpunet admin staking`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

import typer
from rich.console import Group
from rich.table import Table
from solana.rpc.async_api import AsyncClient
from solders.pubkey import Pubkey
from solders.signature import Signature

from gpunet import staking as sx
from gpunet.accounts import (
    AccountError,
    ProviderKey,
    chain_clock,
    fetch,
    fetch_config,
    resolve_provider,
)
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
    key_column,
    pubkey_arg,
)
from gpunet.client import TransactionFailed
from gpunet.keys import KeypairFileError
from gpunet.limits import BPS_DENOMINATOR
from gpunet.pda import cohort_pda, delegation_pda, pool_pda
from gpunet.positions import (
    ACTIVE,
    PositionView,
    collect_ix,
    delegation_cap,
    epoch_at,
    epoch_start,
    fetch_staking,
    pool_facts,
    positions_of,
    share_value,
    shares_for,
    view,
)
from gpunet.tokens import create_io_account_if_missing, io_account, io_balance

app = typer.Typer(help="Delegate IO to providers' pools (co-staking) and collect its rewards.", no_args_is_help=True)

ProviderArg = Annotated[str, typer.Argument(help="The provider: its supplier's wallet or its provider account.")]
NonceOpt = Annotated[
    int | None,
    typer.Option(
        "--nonce", min=0, help="Only this position (see `gpunet stake show`); default: every one that applies."
    ),
]
# Positions undelegated (or collected) per transaction: their accounts fit one transaction's size.
PER_TRANSACTION = 4


# --- the epoch clock and the accounts every command reads


def bps_text(bps: int) -> str:
    return f"{bps:,} bps ({bps * 100 / BPS_DENOMINATOR:g} %)"


async def resolve(client: AsyncClient, text: str) -> ProviderKey:
    """PROVIDER as every stake command takes it: the supplier's wallet or its provider account."""
    return await resolve_provider(client, pubkey_arg(text, "provider wallet or provider account"))


async def fetch_pool(client: AsyncClient, provider: ProviderKey) -> Any:
    try:
        return await fetch(client, pool_pda(provider.account), "Pool")
    except AccountError:
        raise AccountError(
            f"{provider.describe()} has not opened a pool: it takes delegations once its supplier runs "
            "`gpunet provider open-pool --commission-bps N`"
        ) from None


def only(positions: list[tuple[Pubkey, Any]], nonce: int | None, provider: ProviderKey) -> list[tuple[Pubkey, Any]]:
    """The positions a --nonce names (all without one); refuses a nonce the wallet holds no position at."""
    if nonce is None:
        return positions
    chosen = [p for p in positions if p[1].nonce == nonce]
    if not chosen:
        held = ", ".join(str(d.nonce) for _, d in positions) or "none"
        raise BadInput(f"you hold no position {nonce} in the pool of {provider.describe()} (yours there: {held})")
    return chosen


def state_text(p: PositionView) -> str:
    if p.state == "unbonding" and p.withdrawable_at is not None:
        return f"unbonding until {clock.until(p.withdrawable_at)}"
    if p.state == "withdrawn":
        return f"withdrawn; it earned through epoch {p.d.exit_epoch}, collected through {p.d.reward_epoch}"
    return p.state


def report(s: Session, what: str, signatures: Sequence[Signature], **details: Any) -> None:
    """One transaction: as every command says it (Session.done); several: all their signatures."""
    if len(signatures) == 1:
        s.done(what, signatures[0], **details)
        return
    links = ", ".join(s.link("tx", sig) for sig in signatures)
    s.show({"signatures": list(signatures), **details}, lambda: f"[green]✓[/] {what}  [dim]{links}[/]")


def chunks(items: Sequence[Any], size: int = PER_TRANSACTION) -> list[Sequence[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


# --- the commands


@app.command("delegate")
def delegate(
    provider: ProviderArg,
    amount: Annotated[str, typer.Argument(help="IO to delegate, e.g. 100 or 12.5.")],
    url: UrlOpt = None,
    keypair: KeypairOpt = DEFAULT_KEYPAIR,
    json_output: JsonOpt = False,
) -> None:
    """Delegate IO from your wallet to a provider's pool, as a new position.

    The position holds shares of the pool's delegated stake, at the lowest nonce
    you hold no position at. It backs the provider at once and earns rewards from
    the next epoch on. Refused before anything is sent (exit 2) when it would pass
    the pool's cap (1x the supplier's own stake), buys no share, or the pool was
    slashed to nothing; more IO than you hold is refused (exit 4)."""

    async def command(s: Session) -> None:
        units, me = parse_io(amount), s.wallet.pubkey()
        async with s.client() as client:
            io_mint = (await fetch_config(client)).io_mint
            staking = await fetch_staking(client)
            target = await resolve(client, provider)
            await fetch_pool(client, target)
            p = target.decoded
            if p.delegated == 0 and p.delegated_shares > 0:
                raise BadInput(
                    f"the pool of {target.describe()} was slashed to nothing (PoolWipedOut): it takes no new "
                    "delegations; choose another provider"
                )
            cap, room = delegation_cap(p), max(delegation_cap(p) - p.delegated, 0)
            if p.delegated + units > cap:
                raise BadInput(
                    f"delegating {format_io(units)} would exceed the pool's cap (DelegationCapExceeded): "
                    f"{target.describe()} stakes {format_io(p.staked)} of its own, which allows at most "
                    f"{format_io(cap)} delegated (1x), and {format_io(p.delegated)} already is; at most "
                    f"{format_io(room)} more fits. Delegate less, or to another provider"
                )
            if shares_for(p, units) == 0:
                raise BadInput(f"{format_io(units)} buys no share of this pool (ZeroShares): delegate more")
            io_balance_check(f"delegating {format_io(units)}", units, await io_balance(client, me, io_mint))
            held = {d.nonce for _, d in await positions_of(client, me, target.account)}
            nonce = next(n for n in range(len(held) + 1) if n not in held)
            sig = await s.send(
                client,
                f"Delegating {format_io(units)}",
                [sx.delegate(me, io_account(me, io_mint), target.account, nonce, units)],
            )
            d = await fetch(client, delegation_pda(target.account, me, nonce), "Delegation")
        starts = epoch_start(staking, d.since)
        s.done(
            f"delegated {format_io(units)} to the pool of provider {target.account}: position {nonce}, "
            f"{d.shares:,} shares; it earns from epoch {d.since}, which starts "
            f"{clock.until(starts)}",
            sig,
            provider=target.account,
            delegation=delegation_pda(target.account, me, nonce),
            nonce=nonce,
            amount=units,
            shares=d.shares,
            earns_from_epoch=d.since,
            earns_from=starts,
        )

    Session(url, keypair, json_output).run(command)


@app.command("undelegate")
def undelegate(
    provider: ProviderArg,
    nonce: NonceOpt = None,
    url: UrlOpt = None,
    keypair: KeypairOpt = DEFAULT_KEYPAIR,
    json_output: JsonOpt = False,
) -> None:
    """Undelegate your active positions in a provider's pool (or one, --nonce).

    They earn through this epoch, then unbond; withdraw them with `gpunet stake
    withdraw` once that ends."""

    async def command(s: Session) -> None:
        me = s.wallet.pubkey()
        async with s.client() as client:
            staking = await fetch_staking(client)
            target = await resolve(client, provider)
            await fetch_pool(client, target)
            mine = only(await positions_of(client, me, target.account), nonce, target)
            active = [(a, d) for a, d in mine if d.exit_epoch == ACTIVE]
            if not active:
                if nonce is not None:
                    raise BadInput(
                        f"position {nonce} is already undelegated (in epoch {mine[0][1].exit_epoch}): see when it "
                        f"can be withdrawn with `gpunet stake show {target.account}`"
                    )
                raise BadInput(
                    f"you have no active position in the pool of {target.describe()}"
                    + (" (yours there are all undelegated already)" if mine else "")
                    + ": delegate with `gpunet stake delegate PROVIDER AMOUNT`"
                )
            signatures = []
            for batch in chunks(active):
                signatures.append(await _undelegate(s, client, staking, target.account, [d for _, d in batch]))
            done = [await fetch(client, a, "Delegation") for a, _ in active]
            cohorts = {
                e: await fetch(client, cohort_pda(target.account, e), "Cohort") for e in {d.exit_epoch for d in done}
            }
        rows = [
            {
                "nonce": d.nonce,
                "delegation": address,
                "amount": share_value(d.cohort_shares, cohorts[d.exit_epoch].shares, cohorts[d.exit_epoch].stake),
                "exit_epoch": d.exit_epoch,
                "withdrawable_at": cohorts[d.exit_epoch].ends_at,
            }
            for (address, _), d in zip(active, done, strict=True)
        ]
        said = "; ".join(
            f"position {r['nonce']} ({format_io(r['amount'])}) withdrawable {clock.until(r['withdrawable_at'])}"
            for r in rows
        )
        report(
            s,
            f"undelegated from the pool of provider {target.account}: {said}; then run "
            f"`gpunet stake withdraw {target.account}`",
            signatures,
            provider=target.account,
            positions=rows,
        )

    Session(url, keypair, json_output).run(command)


async def _undelegate(s: Session, client: AsyncClient, staking: Any, provider: Pubkey, batch: list[Any]) -> Signature:
    """Sends the batch's undelegations into the cohort of the epoch now by the chain's clock. The
    program derives that cohort from its own clock: sent just as an epoch ends, the transaction is
    refused (ConstraintSeeds) and built again for the new epoch."""
    me = s.wallet.pubkey()
    for attempt in range(3):
        epoch = epoch_at(staking, await chain_clock(client))
        try:
            return await s.send(
                client,
                f"Undelegating position{'s' if len(batch) > 1 else ''} {', '.join(str(d.nonce) for d in batch)}",
                [sx.undelegate(me, provider, d.nonce, epoch) for d in batch],
            )
        except TransactionFailed as e:
            if attempt == 2 or e.program_error is None or e.program_error.name != "ConstraintSeeds":
                raise
    raise AssertionError("unreachable")


@app.command("withdraw")
def withdraw(
    provider: ProviderArg,
    nonce: NonceOpt = None,
    url: UrlOpt = None,
    keypair: KeypairOpt = DEFAULT_KEYPAIR,
    json_output: JsonOpt = False,
) -> None:
    """Withdraw your unbonded positions in a provider's pool (or one, --nonce) to your IO account.

    A position is withdrawn once it was undelegated and its unbonding has ended,
    its credited rewards collected first; a position closes once withdrawn and
    collected through its exit epoch."""

    async def command(s: Session) -> None:
        me = s.wallet.pubkey()
        async with s.client() as client:
            io_mint = (await fetch_config(client)).io_mint
            await fetch_staking(client)
            target = await resolve(client, provider)
            pool = await fetch_pool(client, target)
            now = await chain_clock(client)
            mine = only(await positions_of(client, me, target.account), nonce, target)
            views = [await view(client, target.decoded, pool, a, d, now) for a, d in mine]
            ready = [v for v in views if v.state == "withdrawable"]
            waiting = [v for v in views if v.state == "unbonding"]
            later = "; ".join(
                f"position {v.d.nonce} ({format_io(v.amount)}) is unbonding until {clock.until(v.withdrawable_at)}"
                for v in waiting
                if v.withdrawable_at is not None
            )
            if not ready:
                if waiting:
                    raise BadInput(f"nothing to withdraw yet: {later}; run this again then")
                raise BadInput(
                    f"you have no undelegated stake in the pool of {target.describe()}: undelegate first "
                    f"(`gpunet stake undelegate {target.account}`), then withdraw once it has unbonded"
                )
            tokens = io_account(me, io_mint)
            missing = await create_io_account_if_missing(client, me, me, io_mint)
            signatures, rows = [], []
            for v in ready:
                collect = (
                    [await collect_ix(client, me, tokens, v.d)] if pool.credited_through >= v.d.reward_epoch else []
                )
                withdrawing = [sx.withdraw_delegation(me, tokens, target.account, v.d.nonce, v.d.exit_epoch)]
                signatures.append(
                    await s.send(
                        client,
                        f"Withdrawing position {v.d.nonce} ({format_io(v.amount)})",
                        [*missing, *collect, *withdrawing],
                    )
                )
                missing = []
                closed = (await client.get_account_info(v.address)).value is None
                rows.append(
                    {
                        "nonce": v.d.nonce,
                        "delegation": v.address,
                        "amount": v.amount,
                        "rewards": (v.rewards or 0) if collect else 0,
                        "exit_epoch": v.d.exit_epoch,
                        "closed": closed,
                    }
                )
        said = "; ".join(
            f"position {r['nonce']}: {format_io(r['amount'])}"
            + (f" and {format_io(r['rewards'])} of rewards" if r["rewards"] else "")
            + (
                ""
                if r["closed"]
                else f" (it stays open, for its rewards through epoch {r['exit_epoch']}, until the pool is credited "
                f"through that epoch: then `gpunet stake collect {target.account}`)"
            )
            for r in rows
        )
        report(
            s,
            f"withdrew to {tokens} from the pool of provider {target.account}: {said}"
            + (f". Still: {later}" if later else ""),
            signatures,
            provider=target.account,
            positions=rows,
        )

    Session(url, keypair, json_output).run(command)


@app.command("collect")
def collect(
    provider: ProviderArg,
    nonce: NonceOpt = None,
    url: UrlOpt = None,
    keypair: KeypairOpt = DEFAULT_KEYPAIR,
    json_output: JsonOpt = False,
) -> None:
    """Collect the rewards credited to your positions in a provider's pool (or one, --nonce).

    They go to your IO account. A withdrawn position whose rewards are all
    collected closes (its rent comes back)."""

    async def command(s: Session) -> None:
        me = s.wallet.pubkey()
        async with s.client() as client:
            io_mint = (await fetch_config(client)).io_mint
            staking = await fetch_staking(client)
            target = await resolve(client, provider)
            pool = await fetch_pool(client, target)
            now = await chain_clock(client)
            epoch_now = epoch_at(staking, now)
            mine = only(await positions_of(client, me, target.account), nonce, target)
            if not mine:
                raise BadInput(
                    f"you hold no position in the pool of {target.describe()}: delegate with "
                    "`gpunet stake delegate PROVIDER AMOUNT`"
                )
            views = [await view(client, target.decoded, pool, a, d, now) for a, d in mine]
            # what collect_rewards pays, or closes (withdrawn, and credited through its exit epoch)
            due = [
                v for v in views if v.rewards or (v.state == "withdrawn" and pool.credited_through >= v.d.exit_epoch)
            ]
            if not due:
                waiting = [v for v in views if min(v.d.exit_epoch, epoch_now) > pool.credited_through]
                raise BadInput(
                    f"nothing to collect: the pool's rewards are credited through epoch {pool.credited_through}, "
                    f"and {'your positions have' if len(views) > 1 else 'your position has'} collected all of "
                    "them"
                    + (
                        f"; position{'s' if len(waiting) > 1 else ''} {', '.join(str(v.d.nonce) for v in waiting)} "
                        "earned in later epochs: collect again once those are credited (an epoch is credited "
                        "when its reward root is claimed, after it ends)"
                        if waiting
                        else ""
                    )
                )
            tokens = io_account(me, io_mint)
            missing = await create_io_account_if_missing(client, me, me, io_mint)
            signatures = []
            for batch in chunks(due):
                ixs = [await collect_ix(client, me, tokens, v.d) for v in batch]
                signatures.append(await s.send(client, "Collecting rewards", [*missing, *ixs]))
                missing = []
        total = sum(v.rewards or 0 for v in due)
        rows = [{"nonce": v.d.nonce, "delegation": v.address, "rewards": v.rewards or 0} for v in due]
        report(
            s,
            f"collected {format_io(total)} of rewards from the pool of provider {target.account} to {tokens} "
            f"(position{'s' if len(due) > 1 else ''} {', '.join(str(v.d.nonce) for v in due)})",
            signatures,
            provider=target.account,
            rewards=total,
            positions=rows,
        )

    Session(url, keypair, json_output).run(command)


@app.command("show")
def show(
    provider: Annotated[
        str | None,
        typer.Argument(help="Only this provider's pool (its supplier's wallet or provider account), and the pool."),
    ] = None,
    delegator: Annotated[
        str | None, typer.Option("--delegator", help="Whose positions (default: your wallet).")
    ] = None,
    url: UrlOpt = None,
    keypair: KeypairOpt = DEFAULT_KEYPAIR,
    commitment: CommitmentOpt = None,
    explorer: ExplorerOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """A wallet's positions, in every pool or in one provider's.

    Each position with what it is worth now, its state and the rewards it can
    collect. With PROVIDER, the pool too: its commission and any change to come
    (from which epoch), the supplier's own stake, the delegated stake and the cap
    (1x the own stake)."""

    async def command(s: Session) -> None:
        async with s.client() as client:
            staking = await fetch_staking(client)
            now = await chain_clock(client)
            target = await resolve(client, provider) if provider else None
            pool = await fetch_pool(client, target) if target else None
            if delegator is not None:
                whose: Pubkey | None = pubkey_arg(delegator, "delegator wallet")
            else:
                try:
                    whose = s.wallet.pubkey()
                except KeypairFileError:
                    if target is None:
                        raise
                    whose = None  # a pool shown to someone without a wallet here
            found = await positions_of(client, whose, target.account if target else None) if whose else []
            pools: dict[Pubkey, tuple[Any, Any]] = {}
            if target is not None:
                pools[target.account] = (target.decoded, pool)
            for _, d in found:
                if d.provider not in pools:
                    pools[d.provider] = (
                        await fetch(client, d.provider, "Provider"),
                        await fetch(client, pool_pda(d.provider), "Pool"),
                    )
            views = [await view(client, *pools[d.provider], a, d, now) for a, d in found]
        epoch = epoch_at(staking, now)
        data: dict[str, Any] = {
            "delegator": whose,
            "epoch": epoch,
            "positions": [v.data() for v in views],
        }
        if target is not None and pool is not None:
            data["pool"] = pool_facts(target.account, target.decoded, pool, staking, epoch)

        def render() -> Group:
            parts: list[Any] = []
            if target is not None and pool is not None:
                parts.append(_pool_table(s, data["pool"], staking))
            if whose is None:
                return Group(*parts)
            if not views:
                where = f"the pool of provider {target.account}" if target else "any pool"
                parts.append(f"{whose} holds no position in {where} (delegate with `gpunet stake delegate`)")
                return Group(*parts)
            columns = ([] if target else [key_column("provider")]) + ["position", "amount now", "state"]
            rewards_known = all(v.rewards is not None for v in views)
            t = Table(*columns, *(["rewards to collect"] if rewards_known else []), title=f"positions of {whose}")
            for v in views:
                row = ([] if target else [s.link("address", v.d.provider)]) + [
                    str(v.d.nonce),
                    format_io(v.amount),
                    state_text(v),
                ]
                t.add_row(*row, *([format_io(v.rewards or 0)] if rewards_known else []))
            parts.append(t)
            return Group(*parts)

        s.show(data, render)

    Session(url, keypair, json_output, commitment_flag=commitment, explorer_flag=explorer).run(command)


def _pool_table(s: Session, pool: dict[str, Any], staking: Any) -> Table:
    t = Table("", "", title=f"pool of provider {s.link('address', pool['provider'])}", show_header=False)
    t.add_row("supplier's wallet", s.link("address", pool["authority"]))
    t.add_row("commission now", bps_text(pool["commission_bps"]))
    for change in pool["scheduled_commission"]:
        t.add_row(
            "commission change",
            f"{bps_text(change['commission_bps'])} from epoch {change['from_epoch']}, {clock.until(change['from'])}",
        )
    t.add_row("supplier's own stake", format_io(pool["own_stake"]))
    if pool["own_unbonding"]:
        t.add_row("supplier's own unbonding", format_io(pool["own_unbonding"]))
    t.add_row("delegated stake", format_io(pool["delegated"]))
    t.add_row("cap (1x own stake)", f"{format_io(pool['cap'])} ({format_io(pool['room'])} more fits)")
    t.add_row("delegators' unbonding", format_io(pool["delegated_unbonding"]))
    t.add_row("supplier's rewards to withdraw", format_io(pool["supplier_rewards"]))
    t.add_row("delegators' rewards not collected", format_io(pool["delegator_rewards"]))
    t.add_row(
        "epochs",
        f"opened in {pool['opened_epoch']}, credited through {pool['credited_through_epoch']} "
        f"(an epoch is {clock.span(staking.epoch_seconds)})",
    )
    return t
