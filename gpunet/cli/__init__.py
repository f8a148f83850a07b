"""The `gpunet` command line: one sub-app per noun (keys, admin, provider, node, lease, settlements,
worker, coordinator), plus quote, audit, airdrop, balance, transfer and localnet (and --version).
Exit codes: gpunet.exits.Exit (listed in docs/cli.md).

The command line is the floor on top: it mounts the coordinator's and the worker's commands when
their extras are installed, and otherwise a command of the same name that says which to install."""

from __future__ import annotations

import importlib
import importlib.metadata
from typing import Annotated

import typer
from rich.markup import escape

from gpunet.cli import (
    admin,
    explorer,
    keys,
    lease,
    lease_endpoint,
    lease_reach,
    lease_watch,
    localnet,
    node,
    provider,
    quote,
    rewards,
    stake,
    wallet,
)
from gpunet.exits import Exit
from gpunet.extras import ExtraMissing

__all__ = ["app", "main"]

app = typer.Typer(
    name="gpunet",
    help="gpunet: decentralized GPU compute marketplace on Solana.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion, --show-completion (bash, zsh, fish, PowerShell)
)


def _version(asked: bool) -> None:
    if asked:
        typer.echo(f"gpunet {importlib.metadata.version('gpunet')}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print gpunet's version and exit.")
    ] = False,
) -> None:
    pass


app.add_typer(keys.app, name="keys")
app.add_typer(admin.app, name="admin")
app.add_typer(provider.app, name="provider")
app.add_typer(stake.app, name="stake")
app.add_typer(node.app, name="node")
app.add_typer(rewards.app, name="rewards")
lease.app.command("watch")(lease_watch.watch)  # in its own module, which builds on lease's
lease.app.command("shell")(lease_reach.shell)  # into the job: gpunet.reach
lease.app.command("exec")(lease_reach.exec_)
lease.app.command("forward")(lease_reach.forward)
lease.app.add_typer(lease_endpoint.app, name="endpoint")
app.add_typer(lease.app, name="lease")


def _mount_service(name: str) -> None:
    """Mounts `name`.cli's app as `gpunet <name>`; without the service's extra, a stand-in that
    takes any arguments (even --help) and prints the one line that says what to install."""
    try:
        service = importlib.import_module(f"{name}.cli")
    except ExtraMissing as missing:
        error = str(missing)

        @app.command(
            name,
            help=escape(f"Not installed: pip install 'gpunet[{missing.extra}]'."),  # [..] is no style
            context_settings={"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []},
        )
        def not_installed(ctx: typer.Context) -> None:
            typer.echo(f"gpunet {name}: {error}", err=True)
            raise typer.Exit(Exit.NOT_INSTALLED)
    else:
        app.add_typer(service.app, name=name)


_mount_service("worker")
_mount_service("coordinator")
app.add_typer(explorer.settlements_app, name="settlements")
app.command("audit")(explorer.audit)
app.command("airdrop")(localnet.airdrop)
app.command("quote")(quote.quote)
app.command("balance")(wallet.balance)
app.command("transfer")(wallet.transfer)
app.command("localnet")(localnet.localnet)


def main() -> None:
    app()
