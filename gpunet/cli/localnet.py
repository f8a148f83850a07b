"""`gpunet localnet` (run the local node in the foreground) and `gpunet airdrop` (SOL for fees)."""

from __future__ import annotations

import os
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Annotated

import typer

from gpunet.cli.common import (
    DEFAULT_KEYPAIR,
    BadInput,
    JsonOpt,
    KeypairOpt,
    Session,
    UrlOpt,
    pubkey_arg,
    wallet_path,
)
from gpunet.exits import Exit
from gpunet.keys import KeypairFileError, load_keypair
from gpunet.localnet import LocalnetError, localnet_binary, localnet_deployer
from gpunet.solana_config import SolanaConfigError

LAMPORTS_PER_SOL = 10**9


def localnet(
    rpc_port: Annotated[int, typer.Option("--rpc-port", min=1, max=65535, help="The JSON-RPC port.")] = 8899,
    ws_port: Annotated[int, typer.Option("--ws-port", min=1, max=65535, help="The PubSub (websocket) port.")] = 8900,
    ledger: Annotated[Path | None, typer.Option("--ledger", help="Keep state here across restarts.")] = None,
    slot_ms: Annotated[int, typer.Option("--slot-ms", min=1, help="Milliseconds per slot.")] = 400,
    confirm_slots: Annotated[
        int,
        typer.Option(
            "--confirm-slots",
            min=0,
            max=1000,
            help="Slots before a transaction is confirmed (0: at once; 2 is like a real cluster's 0.5-1.5 s).",
        ),
    ] = 0,
    keypair: KeypairOpt = DEFAULT_KEYPAIR,
) -> None:
    """Run gpunet-localnet, a local node with the gpunet program, in the foreground until Ctrl-C.

    It serves JSON-RPC on --rpc-port and PubSub on --ws-port. Your wallet
    (--keypair) is the program's upgrade authority, as if you had deployed it:
    `gpunet admin init` works only with it (without a wallet file: the local
    deployer key, see gpunet.localnet)."""
    try:
        binary = localnet_binary()
    except LocalnetError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1) from None
    try:
        keypair = wallet_path(keypair)
    except SolanaConfigError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(int(Exit.BAD_INPUT)) from None
    if keypair.exists():
        try:
            deployer = load_keypair(keypair).pubkey()
        except KeypairFileError as e:
            typer.echo(f"error: {e} (your wallet becomes the program's upgrade authority; or pass --keypair)", err=True)
            raise typer.Exit(1) from None
    else:
        deployer = localnet_deployer().pubkey()
        typer.echo(
            f"note: no wallet at {keypair}: the program's upgrade authority (the only key that may "
            f"`gpunet admin init`) is the local deployer key {deployer}; create your wallet with "
            f"`gpunet keys new {keypair}` and restart to make it yours",
            err=True,
        )
    args = [
        str(binary),
        "--rpc-port",
        str(rpc_port),
        "--ws-port",
        str(ws_port),
        "--slot-ms",
        str(slot_ms),
        "--confirm-slots",
        str(confirm_slots),
        "--upgrade-authority",
        str(deployer),
    ]
    if ledger is not None:
        args += ["--ledger", str(ledger)]
    os.execv(args[0], args)  # the node owns the terminal and its signals from here


def airdrop(
    sol: Annotated[str, typer.Argument(help="SOL to request, e.g. 2.")],
    to: Annotated[str | None, typer.Option("--to", help="Wallet (default: yours).")] = None,
    url: UrlOpt = None,
    keypair: KeypairOpt = DEFAULT_KEYPAIR,
    json_output: JsonOpt = False,
) -> None:
    """Request SOL for transaction fees (local node, devnet and testnet only)."""

    async def command(s: Session) -> None:
        try:
            lamports = int(Decimal(sol) * LAMPORTS_PER_SOL)
        except (InvalidOperation, ValueError):
            lamports = 0
        if lamports <= 0:
            raise BadInput(f"{sol!r} is not a positive amount of SOL")
        wallet = pubkey_arg(to, "wallet") if to else s.wallet.pubkey()
        async with s.client() as client:
            sig = (await client.request_airdrop(wallet, lamports)).value
            with s.waiting("Waiting for the airdrop"):
                await client.confirm_transaction(sig)
        s.done(f"{lamports / LAMPORTS_PER_SOL} SOL to {wallet}", sig, lamports=lamports)

    Session(url, keypair, json_output).run(command)
