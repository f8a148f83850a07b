"""`gpunet settlements list` and `gpunet audit`: what an explorer checks, read from the chain alone."""

from __future__ import annotations

import time
from typing import Annotated

import typer
from rich.console import Group
from rich.table import Table
from solders.pubkey import Pubkey

from gpunet.accounts import resolve_provider
from gpunet.amounts import format_io
from gpunet.audit import Check, audit_lease, audit_provider
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
from gpunet.history import node_keys, transactions_of

settlements_app = typer.Typer(help="Usage settlements, from the chain.", no_args_is_help=True)
LeaseOpt = Annotated[str | None, typer.Option("--lease", help="A lease's address.")]
ProviderOpt = Annotated[
    str | None, typer.Option("--provider", help="A provider: its supplier's wallet or its provider account.")
]


def _str(value: object | None) -> str | None:
    return None if value is None else str(value)


def node_label(account: Pubkey, key: Pubkey | None) -> str:
    """A node in a table: its key (what `gpunet node` commands and the coordinator's answers name),
    or, for a node whose key the chain no longer tells, its account, labelled so."""
    return str(key) if key is not None else f"(account) {account}"


def _subject(lease: str | None, provider: str | None) -> tuple[str, Pubkey]:
    if (lease is None) == (provider is None):
        raise BadInput("give exactly one of --lease ADDRESS or --provider WALLET|PROVIDER_ACCOUNT")
    if lease is not None:
        return "lease", pubkey_arg(lease, "lease address")
    assert provider is not None
    return "provider", pubkey_arg(provider, "provider wallet or account")


@settlements_app.command("list")
def list_settlements(
    lease: LeaseOpt = None,
    provider: ProviderOpt = None,
    url: UrlOpt = None,
    commitment: CommitmentOpt = None,
    explorer: ExplorerOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Every usage settlement of a lease or a provider, oldest first, with its transaction.

    Read from the chain alone: its UsageSettled events. Give exactly one of
    --lease and --provider."""

    async def command(s: Session) -> None:
        kind, key = _subject(lease, provider)
        async with s.client() as client:
            if kind == "lease":
                address, subject = key, f"lease {key}"
            else:
                resolved = await resolve_provider(client, key)
                address, subject = resolved.account, resolved.describe()
            with s.waiting("Reading transactions"):
                txs = await transactions_of(client, address)
                settled = [e.data.node for tx in txs for e in tx.events if e.name == "UsageSettled"]
                keys = await node_keys(client, settled, txs)
        rows = [
            {
                "signature": tx.signature,
                "block_time": tx.block_time,
                "lease": e.data.lease,
                "node": e.data.node,  # the node's account (what the event names)
                "node_key": keys.get(e.data.node),  # its worker's key (what `gpunet node` commands take)
                "provider": e.data.provider,
                "epoch": e.data.epoch,  # the assignment the receipt is of
                "receipt_gpu_seconds": e.data.receipt_gpu_seconds,  # the receipt's cumulative
                "through": e.data.through,
                "gpu_seconds": e.data.gpu_seconds,  # paid for by this settlement
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
                key_column("node key"),
                "through (UTC)",
                "GPU-s",
                "payout",
                "fee",
                key_column("transaction"),
                title=f"{len(rows)} settlements of {subject}",
            )
            for r in rows:
                when = time.strftime("%H:%M:%S", time.gmtime(r["block_time"])) if r["block_time"] else "-"
                t.add_row(
                    when,
                    s.link("address", r["lease"], str(r["lease"])[:8]),
                    node_label(r["node"], r["node_key"]),
                    time.strftime("%H:%M:%S", time.gmtime(r["through"])),
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
    coordinator: Annotated[
        str | None,
        typer.Option(
            "--coordinator",
            envvar="GPUNET_COORDINATOR_URL",
            show_envvar=True,
            help="A coordinator's API: fetch each slash's evidence from it and check it hashes to the chain's.",
        ),
    ] = None,
    url: UrlOpt = None,
    commitment: CommitmentOpt = None,
    explorer: ExplorerOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Recompute a lease's or a provider's totals from its transactions; compare them with the chain.

    Give exactly one of --lease and --provider. The totals are compared with its
    accounts and vaults. With --coordinator it also fetches each slash's evidence
    from that coordinator and checks that it hashes to the `evidence_hash` on
    chain, reported apart: matches, differs, or missing. Exit code 7 when a figure
    differs, 9 when the figures agree but a slash's evidence is missing or
    differs."""
    verdict = Exit.OK

    async def command(s: Session) -> None:
        nonlocal verdict
        kind, key = _subject(lease, provider)
        async with s.client() as client:
            with s.waiting("Auditing"):
                report = await (
                    audit_lease(client, key, coordinator)
                    if kind == "lease"
                    else audit_provider(client, key, coordinator)
                )
        verdict = Exit.AUDIT_MISMATCH if not report.ok else Exit.EVIDENCE if not report.evidence_ok else Exit.OK
        data = {
            "subject": report.subject,
            "ok": report.ok,
            "evidence_ok": report.evidence_ok,
            **({"earned": report.earned} if report.earned is not None else {}),
            "evidence": [
                {
                    "signature": str(e.signature),
                    "node": str(e.node),
                    "node_key": _str(report.node_keys.get(e.node)),
                    "fault": e.fault,
                    "on_chain": e.on_chain,
                    "status": e.status,
                    "served_hash": e.served_hash,
                    "evidence": e.evidence,
                }
                for e in report.evidence
            ],
            "transactions": report.transactions,
            "checks": [
                {
                    "what": c.what,
                    "from_events": c.from_events,
                    "on_chain": c.on_chain,
                    "ok": c.ok,
                    "signatures": [str(x) for x in c.signatures],
                    **({"node": str(c.node), "node_key": _str(report.node_keys.get(c.node))} if c.node else {}),
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

            def label(c: Check) -> str:
                """A per-node check names the node by its key (its account when the chain no longer tells it)."""
                if c.node is None:
                    return c.what
                key = report.node_keys.get(c.node)
                return f"GPU-seconds of node key {key}" if key else f"GPU-seconds of node account {c.node}"

            for c in report.checks:
                unit = str if c.what.startswith("gpu_seconds") else format_io
                t.add_row(
                    label(c), unit(c.from_events), unit(c.on_chain), "[green]ok[/]" if c.ok else "[red]DIFFERS[/]"
                )
            for c in report.differences():
                t.add_row(
                    f"  {label(c)}: from", ", ".join(s.link("tx", x) for x in c.signatures) or "no transaction", "", ""
                )
            if report.earned is not None:  # no account counts it: the settlements' payouts say it
                t.add_row("earned (its settlements' payouts)", format_io(report.earned), "-", "")
            return t

        def tables() -> Group:
            if not report.evidence:
                return Group(table())
            e = Table(
                key_column("slash transaction"),
                key_column("node key"),
                "fault",
                "evidence",
                title="slash evidence (SHA-256 of the evidence a coordinator serves, against the hash on chain)",
            )
            shown = {
                "matches": "[green]matches the hash on chain[/]",
                "differs": "[red]DIFFERS from the hash on chain[/]",
                "missing": "[red]MISSING: the coordinator serves none[/]",
                "unchecked": "not checked (give --coordinator URL)",
            }
            for x in report.evidence:
                e.add_row(str(x.signature), node_label(x.node, report.node_keys.get(x.node)), x.fault, shown[x.status])
            return Group(table(), e)

        s.show(data, tables)

    session = Session(url, json_output=json_output, commitment_flag=commitment, explorer_flag=explorer)
    session.run(command)
    if verdict != Exit.OK:
        raise typer.Exit(int(verdict))
