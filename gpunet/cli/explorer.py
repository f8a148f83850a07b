"""`gpunet settlements list` and `gpunet audit`: what an explorer checks, read from the chain alone."""

from __future__ import annotations

import time
from typing import Annotated

import typer
from rich.table import Table
from solders.pubkey import Pubkey

from gpunet.amounts import format_io
from gpunet.audit import audit_lease, audit_provider
from gpunet.cli.common import (
    BadInput,
    CommitmentOpt,
    Exit,
    ExplorerOpt,
    JsonOpt,
    Session,
    UrlOpt,
    key_column,
    pubkey_arg,
)
from gpunet.history import transactions_of
from gpunet.pda import provider_pda

settlements_app = typer.Typer(help="Usage settlements, from the chain.", no_args_is_help=True)
LeaseOpt = Annotated[str | None, typer.Option("--lease", help="A lease's address.")]
ProviderOpt = Annotated[str | None, typer.Option("--provider", help="A provider's wallet.")]


def _subject(lease: str | None, provider: str | None) -> tuple[str, Pubkey]:
    if (lease is None) == (provider is None):
        raise BadInput("give exactly one of --lease ADDRESS or --provider WALLET")
    if lease is not None:
        return "lease", pubkey_arg(lease, "lease address")
    assert provider is not None
    return "provider", pubkey_arg(provider, "provider wallet")


@settlements_app.command("list")
def list_settlements(
    lease: LeaseOpt = None,
    provider: ProviderOpt = None,
    url: UrlOpt = None,
    commitment: CommitmentOpt = None,
    explorer: ExplorerOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Every usage settlement of a lease or a provider, oldest first, with its transaction."""

    async def command(s: Session) -> None:
        kind, key = _subject(lease, provider)
        address = key if kind == "lease" else provider_pda(key)
        async with s.client() as client:
            with s.waiting("Reading transactions"):
                txs = await transactions_of(client, address)
        rows = [
            {
                "signature": tx.signature,
                "block_time": tx.block_time,
                "lease": e.data.lease,
                "node": e.data.node,
                "provider": e.data.provider,
                "seq": e.data.seq,
                "period_start": e.data.period_start,
                "period_end": e.data.period_end,
                "gpu_seconds": e.data.gpu_seconds,
                "payout": e.data.payout,
                "fee": e.data.fee,
                "explorer": s.explorer_url("tx", tx.signature),
            }
            for tx in txs
            for e in tx.events
            if e.name == "UsageSettled" and address in (e.data.lease, e.data.provider)
        ]

        def table() -> Table:
            t = Table(
                "time (UTC)",
                "lease",
                "node",
                "seq",
                "GPU-s",
                "payout",
                "fee",
                key_column("transaction"),
                title=f"{len(rows)} settlements of {kind} {key}",
            )
            for r in rows:
                when = time.strftime("%H:%M:%S", time.gmtime(r["block_time"])) if r["block_time"] else "-"
                t.add_row(
                    when,
                    s.link("address", r["lease"], str(r["lease"])[:8]),
                    s.link("address", r["node"], str(r["node"])[:8]),
                    str(r["seq"]),
                    str(r["gpu_seconds"]),
                    format_io(r["payout"]),
                    format_io(r["fee"]),
                    s.link("tx", r["signature"]),
                )
            return t

        s.show(rows, table)

    Session(url, json_output=json_output, commitment_flag=commitment, explorer_flag=explorer).run(command)


def audit(
    lease: LeaseOpt = None,
    provider: ProviderOpt = None,
    url: UrlOpt = None,
    commitment: CommitmentOpt = None,
    explorer: ExplorerOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Recompute a lease's or provider's totals from its transactions and compare with its accounts and
    vaults. Exit code 7 when anything differs."""
    mismatch = False

    async def command(s: Session) -> None:
        nonlocal mismatch
        kind, key = _subject(lease, provider)
        async with s.client() as client:
            with s.waiting("Auditing"):
                report = await (audit_lease(client, key) if kind == "lease" else audit_provider(client, key))
        mismatch = not report.ok
        data = {
            "subject": report.subject,
            "ok": report.ok,
            "transactions": report.transactions,
            "checks": [
                {
                    "what": c.what,
                    "from_events": c.from_events,
                    "on_chain": c.on_chain,
                    "ok": c.ok,
                    "signatures": [str(x) for x in c.signatures],
                }
                for c in report.checks
            ],
        }

        def table() -> Table:
            t = Table(
                "check",
                "from transactions",
                "on chain",
                "",
                title=f"audit of {report.subject} ({report.transactions} transactions)",
            )
            for c in report.checks:
                unit = str if c.what.startswith("gpu_seconds") else format_io
                t.add_row(c.what, unit(c.from_events), unit(c.on_chain), "[green]ok[/]" if c.ok else "[red]DIFFERS[/]")
            for c in report.differences():
                t.add_row(
                    f"  {c.what}: from", ", ".join(s.link("tx", x) for x in c.signatures) or "no transaction", "", ""
                )
            return t

        s.show(data, table)

    session = Session(url, json_output=json_output, commitment_flag=commitment, explorer_flag=explorer)
    session.run(command)
    if mismatch:
        raise typer.Exit(int(Exit.AUDIT_MISMATCH))
