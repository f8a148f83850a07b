"""`gpunet keys new|show`: Solana CLI keypair files (created 0600, secrets never printed)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import typer
from rich.console import Console
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from gpunet.cli.common import Exit
from gpunet.keys import KeypairFileError, create_keypair_file, load_keypair, new_node_name, node_keypair_path, nodes_dir

__all__ = ["app"]

app = typer.Typer(help="Create and inspect keypair files (Solana CLI format).", no_args_is_help=True)
console = Console()
errors = Console(stderr=True)


@app.command("new")
def new(
    path: Path = typer.Argument(..., help="Where to write the new keypair (an existing file is never overwritten)."),
    json_output: bool = typer.Option(False, "--json", help='Print {"pubkey", "path"} as JSON.'),
) -> None:
    """Create a new keypair file with mode 0600 and print its public key.

    Its secret is never printed. A file already at PATH is never overwritten: that
    is refused (exit 3)."""
    _show(_or_exit(create_keypair_file, path), path, json_output)


def _is_pubkey(text: str) -> bool:
    try:
        Pubkey.from_string(text)
    except ValueError:
        return False
    return True


@app.command("new-node")
def new_node(
    name: str = typer.Argument(None, help="The node's name (default: node1, node2, ... whichever is free)."),
    json_output: bool = typer.Option(False, "--json", help='Print {"pubkey", "path", "name"} as JSON.'),
) -> None:
    """Create a node key (the key a worker signs usage with) under a name.

    It is written to ~/.config/gpunet/nodes/NAME.json
    ($XDG_CONFIG_HOME/gpunet/nodes/ where that is set), never into the working
    directory, with mode 0600 and never over an existing file; its public key and
    path are printed, never its secret.

    `gpunet node register` and `gpunet worker run -k` take the NAME (or the file's
    path), and every other `gpunet node` command that takes a node takes its NAME,
    the file's path or its public key. A NAME that is a path or a public key is
    refused (exit 2)."""
    name = name or new_node_name()
    if "/" in name or name.endswith(".json") or name.startswith((".", "~")):
        errors.print(
            f"[red]error:[/] {name!r} is a path, not a name: give a name (node1) and the key goes under "
            f"{nodes_dir()}, or use `gpunet keys new PATH`"
        )
        raise typer.Exit(int(Exit.BAD_INPUT))
    if _is_pubkey(name):  # `gpunet node drain NAME` could not tell it from a node's key
        errors.print(f"[red]error:[/] {name!r} is a public key, not a name: give a name (node1, rack7)", soft_wrap=True)
        raise typer.Exit(int(Exit.BAD_INPUT))
    path = node_keypair_path(name)
    keypair = _or_exit(create_keypair_file, path)
    if json_output:
        print(json.dumps({"pubkey": str(keypair.pubkey()), "path": str(path), "name": name}))
    else:
        console.print(
            f"{keypair.pubkey()}  [dim]{path}[/]\nregister it with `gpunet node register {name} --gpu ...`; "
            f"on the GPU machine run the worker with `-k {path}`",
            soft_wrap=True,
        )


@app.command("show")
def show(
    path: Path = typer.Argument(..., help="A keypair file."),
    json_output: bool = typer.Option(False, "--json", help='Print {"pubkey", "path"} as JSON.'),
) -> None:
    """Print the public key of a keypair file (never its secret)."""
    _show(_or_exit(load_keypair, path), path, json_output)


def _or_exit(action: Callable[[Path], Keypair], path: Path) -> Keypair:
    try:
        return action(path)
    except KeypairFileError as e:
        errors.print(f"[red]error:[/] {e}")
        raise typer.Exit(int(Exit.KEYPAIR)) from None


def _show(keypair: Keypair, path: Path, json_output: bool) -> None:
    pubkey = keypair.pubkey()
    if json_output:
        print(json.dumps({"pubkey": str(pubkey), "path": str(path.expanduser())}))
    else:
        console.print(f"{pubkey}  [dim]{path}[/]")
