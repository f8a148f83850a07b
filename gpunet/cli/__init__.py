"""The `gpunet` command line: one sub-app per noun (keys, admin, provider, node, lease, settlements,
worker, coordinator), plus audit, airdrop and localnet. Exit codes: gpunet.exits.Exit (listed in the README)."""

from __future__ import annotations

import typer

from gpunet.cli import admin, explorer, keys, lease, localnet, node, provider
from coordinator.cli import app as coordinator_app
from worker.cli import app as worker_app

__all__ = ["app", "main"]

app = typer.Typer(
    name="gpunet",
    help="gpunet: decentralized GPU compute marketplace on Solana.",
    no_args_is_help=True,
    add_completion=False,
)
app.add_typer(keys.app, name="keys")
app.add_typer(admin.app, name="admin")
app.add_typer(provider.app, name="provider")
app.add_typer(node.app, name="node")
app.add_typer(lease.app, name="lease")
app.add_typer(worker_app, name="worker")
app.add_typer(coordinator_app, name="coordinator")
app.add_typer(explorer.settlements_app, name="settlements")
app.command("audit")(explorer.audit)
app.command("airdrop")(localnet.airdrop)
app.command("localnet")(localnet.localnet)


def main() -> None:
    app()
