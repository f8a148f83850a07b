"""The `gpunet` command line: one sub-app per noun (keys today; provider, node, lease, ... next)."""

from __future__ import annotations

import typer

from gpunet.cli.keys import app as keys_app
from worker.cli import app as worker_app

__all__ = ["app", "main"]

app = typer.Typer(
    name="gpunet",
    help="gpunet: decentralized GPU compute marketplace on Solana.",
    no_args_is_help=True,
    add_completion=False,
)
app.add_typer(keys_app, name="keys")
app.add_typer(worker_app, name="worker")


def main() -> None:
    app()
