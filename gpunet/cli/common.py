"""What every chain command shares: cluster/keypair/--json options, the documented exit codes,
the spinner while a transaction confirms, and one place that turns errors into messages."""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import Callable, Coroutine, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer
from rich.console import Console, RenderableType
from rich.table import Column
from solana.exceptions import SolanaRpcException
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Commitment
from solders.instruction import Instruction
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.signature import Signature

from gpunet.accounts import AccountError
from gpunet.amounts import AmountError, format_io
from gpunet.catalog import GPU_MODELS, REGIONS, CatalogError
from gpunet.cli.links import Explorer, ExplorerError, Kind, explorer_for
from gpunet.client import TransactionExpired, TransactionFailed, send_and_confirm
from gpunet.cluster import Cluster, ClusterError, resolve_cluster
from gpunet.errors import GpunetError
from gpunet.exits import Exit
from gpunet.fees import Budget
from gpunet.jobs import CoordinatorError
from gpunet.keys import KeypairFileError, NodeKeyNotFound, load_keypair, load_node_keypair, node_keypair_path, nodes_dir
from gpunet.solana_config import COMMITMENTS, SolanaConfig, SolanaConfigError, load_solana_config


class BadInput(GpunetError, ValueError):
    """An argument that makes no sense for this command; nothing was sent."""


class NotEnoughFunds(GpunetError):
    """Checked before sending: the wallet cannot pay; nothing was sent."""


DEFAULT_KEYPAIR: Path | None = None  # no --keypair: $GPUNET_KEYPAIR, the Solana CLI's keypair_path, SOLANA_KEYPAIR
SOLANA_KEYPAIR = Path("~/.config/solana/id.json")

UrlOpt = Annotated[
    str | None,
    typer.Option(
        "--url",
        "-u",
        envvar="GPUNET_RPC_URL",
        show_envvar=True,
        help="RPC URL or cluster name (localnet, devnet, testnet, mainnet). Default: Anchor.toml, else the Solana "
        "CLI's config (~/.config/solana/cli/config.yml json_rpc_url), else localnet.",
    ),
]
KeypairOpt = Annotated[
    Path | None,
    typer.Option(
        "--keypair",
        "-k",
        envvar="GPUNET_KEYPAIR",
        show_envvar=True,
        help="Wallet keypair file (Solana CLI format). Default: the Solana CLI's config "
        "(~/.config/solana/cli/config.yml keypair_path), else ~/.config/solana/id.json.",
    ),
]
ExplorerOpt = Annotated[
    str | None,
    typer.Option(
        "--explorer",
        envvar="GPUNET_EXPLORER_URL",
        show_envvar=True,
        help="Explorer URL template for links to transactions and accounts, with {kind} (tx or address), {id}, "
        "{cluster} (?cluster=... for the Solana Explorer) and {rpc_url}; 'none' for no links. Default: "
        "https://explorer.solana.com/{kind}/{id}{cluster}.",
    ),
]
CommitmentLevel = StrEnum("CommitmentLevel", {name: name for name in COMMITMENTS})  # type: ignore[misc]
CommitmentOpt = Annotated[
    CommitmentLevel | None,
    typer.Option(
        "--commitment",
        case_sensitive=False,
        help="How settled the state read must be: processed, confirmed or finalized. Default: the Solana CLI's "
        "config (commitment), else confirmed. Transaction history is read at confirmed at least.",
    ),
]
CoordinatorOpt = Annotated[
    str, typer.Option("--coordinator", envvar="GPUNET_COORDINATOR_URL", show_envvar=True, help="The coordinator's API.")
]
DEFAULT_COORDINATOR = "http://127.0.0.1:8080"
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable JSON on stdout instead of tables.")]


def complete_gpu(incomplete: str) -> list[str]:
    """Shell completion of --gpu: the catalog's model names (and 'any')."""
    return [n for n in ("any", *(m.name for m in GPU_MODELS)) if n.lower().startswith(incomplete.lower())]


def complete_region(incomplete: str) -> list[str]:
    """Shell completion of --region: the catalog's region names (and 'any')."""
    return [n for n in ("any", *REGIONS.values()) if n.startswith(incomplete.lower())]


def pubkey_arg(text: str, what: str = "public key") -> Pubkey:
    try:
        return Pubkey.from_string(text.strip())
    except ValueError:
        raise BadInput(f"{text!r} is not a valid {what} (base58, 32 bytes)") from None


def _named_node_file(text: str) -> tuple[Path, bool]:
    """Where a node key given as `text` would be (gpunet.keys.node_keypair_path) and whether
    `text` was a name (under nodes_dir()) rather than a path."""
    path = node_keypair_path(text.strip())
    return path, path.parent == nodes_dir() and path.name == f"{text.strip()}.json"


def node_keypair_arg(text: str) -> Keypair:
    """The node keypair a command signs with (`node register`): a name from `gpunet keys new-node`
    or a keypair file. An unknown name is bad input (exit 2), saying how to create it."""
    try:
        return load_node_keypair(text.strip())
    except NodeKeyNotFound as e:
        raise BadInput(str(e)) from None


def node_key_arg(text: str) -> Pubkey:
    """A node, as every `gpunet node` command takes it: its public key, a name from `gpunet keys
    new-node`, or its keypair file (the one resolver; `node register`, which signs, reads the same
    names with node_keypair_arg). A public key that is also the name of a node key file holding
    another key is ambiguous, and refused."""
    path, is_name = _named_node_file(text)
    try:
        key = Pubkey.from_string(text.strip())
    except ValueError:
        key = None
    if key is not None:
        if path.exists() and (named := load_keypair(path).pubkey()) != key:
            raise BadInput(
                f"{text.strip()!r} is ambiguous: a public key, and the name of the node key file {path}, which "
                f"holds node {named}: give that file's path for it, or rename the file"
            )
        return key
    if is_name and not path.exists():
        raise BadInput(
            f"{text.strip()!r} is neither a node's public key (base58, 32 bytes) nor the name of a node key "
            f"(no {path}; `gpunet keys new-node` writes them there); give the node's public key, its name, or "
            "its keypair file"
        )
    return load_keypair(path).pubkey()


_DURATION = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s?)?$")


def duration_arg(text: str) -> int:
    """'90m', '1h30m', '2d', '3600' (seconds) -> seconds; refuses zero and garbage."""
    m = _DURATION.match(text.strip().lower())
    if not m or not any(m.groups()):
        raise BadInput(f"{text!r} is not a duration (for example 90m, 1h30m, 2d or 3600 for seconds)")
    d, h, mins, s = (int(g or 0) for g in m.groups())
    seconds = ((d * 24 + h) * 60 + mins) * 60 + s
    if seconds <= 0:
        raise BadInput("the duration must be more than zero")
    return seconds


def key_column(name: str) -> Column:
    """A table column that shows a whole base58 key or signature (never cut with an ellipsis)."""
    return Column(name, min_width=44, overflow="fold")


def _plain(value: Any) -> Any:
    if isinstance(value, (Pubkey, Signature)):
        return str(value)
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def wallet_path(flag: Path | None, config: SolanaConfig | None = None) -> Path:
    """--keypair (or $GPUNET_KEYPAIR), else the Solana CLI config's keypair_path, else
    ~/.config/solana/id.json. `config` default: the Solana CLI's config file, read now."""
    if flag is not None:
        return flag.expanduser()
    config = config or load_solana_config()
    if config is not None and config.keypair_path:
        return Path(config.keypair_path).expanduser()
    return SOLANA_KEYPAIR.expanduser()


@dataclass
class Session:
    """One command's view of the world: where to connect, whose wallet, how to print."""

    url: str | None
    keypair_path: Path | None = DEFAULT_KEYPAIR
    json_output: bool = False
    out: Console = field(default_factory=Console)
    err: Console = field(default_factory=lambda: Console(stderr=True))
    commitment_flag: str | None = None  # --commitment of a read command
    explorer_flag: str | None = None  # --explorer (else $GPUNET_EXPLORER_URL)
    budget: Budget | None = None  # what the last transaction sent bid (gpunet.fees)

    @cached_property
    def cluster(self) -> Cluster:
        return resolve_cluster(self.url)

    @cached_property
    def explorer(self) -> Explorer | None:
        """Where links to transactions and accounts point; None: no links."""
        if self.explorer_flag is not None:
            return explorer_for(self.explorer_flag, self.cluster.rpc_url)
        return explorer_for(os.environ.get("GPUNET_EXPLORER_URL"), self.cluster.rpc_url, "GPUNET_EXPLORER_URL")

    def link(self, kind: Kind, ident: object, text: str | None = None) -> str:
        """`text` (default: the id) linked to the explorer in rich markup (plain without an explorer)."""
        return self.explorer.link(kind, ident, text) if self.explorer else str(text if text is not None else ident)

    def explorer_url(self, kind: Kind, ident: object) -> str | None:
        return self.explorer.url(kind, ident) if self.explorer else None

    @cached_property
    def solana_config(self) -> SolanaConfig | None:
        return load_solana_config()

    @cached_property
    def wallet_path(self) -> Path:
        return wallet_path(self.keypair_path, self.solana_config)

    @cached_property
    def wallet(self) -> Keypair:
        return load_keypair(self.wallet_path)

    @cached_property
    def commitment(self) -> Commitment:
        """--commitment, else the Solana CLI config's commitment, else confirmed."""
        name = self.commitment_flag or (self.solana_config.commitment if self.solana_config else None) or "confirmed"
        return Commitment(str(name))

    def client(self) -> AsyncClient:
        return AsyncClient(self.cluster.rpc_url, commitment=self.commitment, timeout=30)

    @contextmanager
    def waiting(self, what: str) -> Iterator[None]:
        if self.json_output:
            yield
        else:
            with self.err.status(f"{what}…"):
                yield

    async def send(
        self, client: AsyncClient, what: str, instructions: list[Instruction], signers: Sequence[Keypair] = ()
    ) -> Signature:
        """Sends with the wallet as fee payer, after checking it can pay the fee; says the compute
        budget and the priority fee it bids (gpunet.fees) before it waits."""
        await self.check_fee(client)
        with self.waiting(f"{what}: waiting for confirmation"):
            return await send_and_confirm(client, self.wallet, instructions, signers, on_budget=self._bid)

    def _bid(self, budget: Budget) -> None:
        self.budget = budget
        if not self.json_output:
            priority = (
                f"a priority fee of at most {budget.priority_fee_lamports:,} lamports "
                f"({budget.micro_lamports_per_unit:,} micro-lamports per compute unit)"
                if budget.micro_lamports_per_unit
                else "no priority fee (nobody paid one lately for these accounts)"
            )
            self.err.print(f"[dim]fee: 5,000 lamports per signature and {priority}; "
                           f"compute limit {budget.compute_units:,} units[/]")  # fmt: skip

    async def check_fee(self, client: AsyncClient) -> None:
        """Before anything is sent: the wallet must hold enough SOL for fees (and a little rent)."""
        lamports = (await client.get_balance(self.wallet.pubkey())).value
        if lamports < 10_000_000:
            raise NotEnoughFunds(
                f"wallet {self.wallet.pubkey()} holds {lamports} lamports, not enough for "
                "transaction fees and rent (0.01 SOL); fund it (on localnet: `gpunet airdrop 1`)"
            )

    def show(self, data: Any, render: Callable[[], RenderableType | str]) -> None:
        """JSON for scripts, a table or line for people."""
        if self.json_output:
            print(json.dumps(_plain(data), indent=2))
        else:
            self.out.print(render(), soft_wrap=True)  # never break a key or signature across lines

    def done(self, what: str, signature: Signature, **details: Any) -> None:
        data = {"signature": signature, **details}
        if self.budget is not None:
            data["compute_unit_limit"] = self.budget.compute_units
            data["priority_micro_lamports_per_unit"] = self.budget.micro_lamports_per_unit
        if url := self.explorer_url("tx", signature):
            data["explorer"] = url
        self.show(data, lambda: f"[green]✓[/] {what}  [dim]{self.link('tx', signature)}[/]")

    def fail(self, code: Exit, message: str) -> typer.Exit:
        if self.json_output:
            print(json.dumps({"error": message, "exit_code": int(code)}))
        else:
            self.err.print(f"[red]error:[/] {message}", soft_wrap=True)
        return typer.Exit(int(code))

    def run(self, command: Callable[[Session], Coroutine[Any, Any, Any]]) -> None:
        """Runs one async command and maps every expected failure to its message and exit code."""
        try:
            self.cluster  # noqa: B018 - a bad --url (or config file) is reported before anything else happens
            self.explorer  # noqa: B018 - and so is a bad --explorer
            asyncio.run(command(self))
        except KeyboardInterrupt:  # Ctrl-C: ends a --follow, or gives up waiting
            self.err.print("interrupted")
            raise typer.Exit(130) from None
        except (BadInput, AmountError, CatalogError, ClusterError, SolanaConfigError, ExplorerError) as e:
            raise self.fail(Exit.BAD_INPUT, str(e)) from None
        except KeypairFileError as e:
            raise self.fail(Exit.KEYPAIR, f"{e} (create one with `gpunet keys new PATH`, or pass --keypair)") from None
        except NotEnoughFunds as e:
            raise self.fail(Exit.FUNDS, f"{e}; nothing was sent") from None
        except AccountError as e:
            raise self.fail(Exit.NOT_FOUND, str(e)) from None
        except CoordinatorError as e:
            raise self.fail(Exit.UNREACHABLE if "cannot reach" in str(e) else Exit.REFUSED, str(e)) from None
        except (TransactionFailed, TransactionExpired) as e:
            sig = getattr(e, "signature", None)
            raise self.fail(Exit.REFUSED, f"{e}{f' (transaction {sig})' if sig else ''}") from None
        except (SolanaRpcException, httpx.HTTPError, OSError) as e:
            cause = e.__cause__ or e
            raise self.fail(
                Exit.UNREACHABLE,
                f"cannot reach the RPC node at {self.cluster.rpc_url} (from "
                f"{self.cluster.source}): {type(cause).__name__}: {cause}. Start a local node with "
                "`gpunet localnet`, or pass --url",
            ) from None


def io_balance_check(what: str, need: int, have: int) -> None:
    if have < need:
        raise NotEnoughFunds(f"{what} needs {format_io(need)} but the wallet's IO account holds {format_io(have)}")
