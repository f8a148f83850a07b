"""`gpunet rewards show|claim|audit`: the epochs' reward trees a coordinator published, claims from
them (anyone may crank a pool's), and an audit that rebuilds a tree from its published inputs."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from gpunet import staking
from gpunet.accounts import AccountError, fetch, resolve_provider
from gpunet.amounts import format_io
from gpunet.cli.common import (
    DEFAULT_COORDINATOR,
    DEFAULT_KEYPAIR,
    BadInput,
    CoordinatorOpt,
    JsonOpt,
    KeypairOpt,
    Session,
    UrlOpt,
    pubkey_arg,
)
from gpunet.exits import Exit
from gpunet.jobs import _call
from gpunet.pda import pool_pda
from gpunet.reward_audit import audit_epoch, published_epoch, verified_claim

app = typer.Typer(help="Rewards for verified uptime: what each epoch paid, claims, audits.", no_args_is_help=True)
EpochArg = Annotated[int, typer.Argument(min=0, help="The reward epoch (gpunet admin staking show: its length).")]


@app.command("show")
def show(
    epoch: Annotated[
        int | None, typer.Argument(min=0, help="One epoch's leaves; without it, the latest epochs.")
    ] = None,
    coordinator: CoordinatorOpt = DEFAULT_COORDINATOR,
    json_output: JsonOpt = False,
) -> None:
    """The reward epochs a coordinator built, or one epoch's part for each pool."""

    async def command(s: Session) -> None:
        if epoch is None:
            page = await _call("GET", f"{coordinator.rstrip('/')}/rewards/epochs")
            rows = page["items"]

            def epochs() -> Table:
                t = Table("epoch", "total", "pools", "root posted", "claims cranked", title="reward epochs")
                for r in rows:
                    t.add_row(
                        str(r["epoch"]), format_io(int(r["total"])), str(r["leaves"]), r["posted"] or "not yet",
                        "yes" if r["credited"] else "no",
                    )  # fmt: skip
                return t

            s.show(rows, epochs)
            return
        body, inputs = await published_epoch(coordinator, epoch)

        def leaves() -> Table:
            title = f"epoch {epoch}: {format_io(int(body['total']))} over {inputs.samples} uptime samples"
            t = Table("provider", "to the supplier", "to its delegators", title=title)
            for c in body["claims"]:
                t.add_row(c["provider"], format_io(int(c["supplier_amount"])), format_io(int(c["delegators_amount"])))
            return t

        s.show(body, leaves)

    Session(None, json_output=json_output).run(command)


@app.command("claim")
def claim(
    epoch: EpochArg,
    provider: Annotated[
        str | None, typer.Argument(help="The supplier's wallet or provider account (default: your own).")
    ] = None,
    coordinator: CoordinatorOpt = DEFAULT_COORDINATOR,
    url: UrlOpt = None,
    keypair: KeypairOpt = DEFAULT_KEYPAIR,
    json_output: JsonOpt = False,
) -> None:
    """Credit a pool with its reward for EPOCH, from a tree checked against the chain's root first.

    Anyone may: you pay the fee and a small rent."""

    async def command(s: Session) -> None:
        async with s.client() as client:
            key = pubkey_arg(provider, "provider") if provider else s.wallet.pubkey()
            pool = (await resolve_provider(client, key)).account
            try:
                credited = (await fetch(client, pool_pda(pool), "Pool")).credited_through
            except AccountError:
                raise BadInput(f"provider {pool} has no pool, so nothing to claim: it opens one to earn") from None
            if credited >= epoch:
                raise BadInput(f"pool {pool} is credited through epoch {credited} already: epoch {epoch} was claimed")
            if credited + 1 < epoch:
                raise BadInput(
                    f"pool {pool} is credited through epoch {credited}: claim epoch {credited + 1} first "
                    "(pools are credited epoch by epoch)"
                )
            leaf, proof = await verified_claim(client, coordinator, epoch, pool)
            sig = await s.send(
                client,
                f"Claiming epoch {epoch}'s reward of {pool}",
                [staking.claim_reward(s.wallet.pubkey(), leaf, proof)],
            )
        s.done(
            f"epoch {epoch}: {format_io(leaf.supplier_amount)} to the supplier, "
            f"{format_io(leaf.delegators_amount)} to its delegators (before its commission) credited to pool {pool}",
            sig,
            epoch=epoch,
            provider=pool,
            supplier_amount=leaf.supplier_amount,
            delegators_amount=leaf.delegators_amount,
        )

    Session(url, keypair, json_output).run(command)


@app.command("audit")
def audit(
    epoch: EpochArg,
    coordinator: CoordinatorOpt = DEFAULT_COORDINATOR,
    url: UrlOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Rebuild EPOCH's reward tree from the coordinator's published inputs; compare with the chain.

    Exit code 7 when the roots differ."""
    verdict = Exit.OK

    async def command(s: Session) -> None:
        nonlocal verdict
        async with s.client() as client:
            with s.waiting(f"Auditing epoch {epoch}"):
                report = await audit_epoch(client, coordinator, epoch)
        verdict = Exit.OK if report.ok else Exit.AUDIT_MISMATCH
        data = {
            "epoch": epoch,
            "ok": report.ok,
            "rebuilt_root": report.tree.root.hex(),
            "chain_root": report.chain_root.hex() if report.chain_root else None,
            "total": report.tree.total,
            "leaves": len(report.tree.leaves),
            "differences": report.differences,
        }

        def verdict_text() -> str:
            if report.ok:
                return (
                    f"[green]✓[/] epoch {epoch}: the published inputs rebuild the chain's root {data['rebuilt_root']} "
                    f"({format_io(report.tree.total)} over {len(report.tree.leaves)} pools)"
                )
            return "\n".join(f"[red]DIFFERS[/] {d}" for d in report.differences)

        s.show(data, verdict_text)

    Session(url, json_output=json_output).run(command)
    if verdict != Exit.OK:
        raise typer.Exit(int(verdict))
