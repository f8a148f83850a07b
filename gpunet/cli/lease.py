"""`gpunet lease open|top-up|close|show|list`: a client's leases and their escrow; `job|status|logs|files`:
their jobs, through the coordinator."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import subprocess
import time
import urllib.parse
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from rich.console import Group
from rich.markup import escape
from rich.table import Table
from solana.rpc.async_api import AsyncClient

from gpunet import catalog
from gpunet import instructions as ix
from gpunet.accounts import escrow, fetch, fetch_config, program_accounts
from gpunet.amounts import escrow_for, format_io, parse_io
from gpunet.cli import clock
from gpunet.cli.common import (
    DEFAULT_COORDINATOR,
    DEFAULT_KEYPAIR,
    BadInput,
    CommitmentOpt,
    CoordinatorOpt,
    ExplorerOpt,
    JsonOpt,
    KeypairOpt,
    Session,
    UrlOpt,
    complete_gpu,
    complete_region,
    duration_arg,
    io_balance_check,
    key_column,
    pubkey_arg,
)
from gpunet.cli.waiting import what_to_change, why_not
from gpunet.exits import Exit
from gpunet.jobs import (
    CoordinatorError,
    job_logs,
    job_view,
    lease_files,
    seal_missing_checkpoint_key,
    seal_missing_secrets,
    submit_job,
)
from gpunet.limits import MAX_GPUS_PER_NODE, MAX_LEASE_GPUS
from gpunet.market import lease_reach
from gpunet.pda import lease_pda
from gpunet.protocol import JOB_ENDED, RAY_AUTH_TOKEN, Expose, InputFile, JobSpec
from gpunet.raycluster import RAY_INSTALL, ray_token
from gpunet.tokens import io_account, io_balance

app = typer.Typer(
    help="Leases: open, job, status, shell, exec, forward, ray, watch, top up, close, show, list.", no_args_is_help=True
)
STATUS_LINES = 20  # the latest log lines `lease status` shows (`lease logs` prints them all)
FOLLOW_SECONDS = 1.0
PLACEMENT_WAIT_SECONDS = 300.0  # how long `lease job --secret` waits for the lease's nodes to seal to
LeaseArg = Annotated[str, typer.Argument(help="The lease's address.")]
SecretOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--secret",
        help="NAME=VALUE (or NAME: the value of $NAME here): a secret for the job, sealed to each of the lease's "
        "nodes so only they can read it (the coordinator relays ciphertext); repeat for several.",
    ),
]
SecretFileOpt = Annotated[
    list[str] | None,
    typer.Option("--secret-file", help="NAME=PATH: a secret whose value is the file's content; repeat for several."),
]


def secrets_arg(secret: list[str] | None, secret_file: list[str] | None) -> dict[str, str]:
    """The secrets given (--secret NAME=VALUE or NAME, --secret-file NAME=PATH), name -> value."""
    values: dict[str, str] = {}
    for item in secret or []:
        name, sep, value = item.partition("=")
        if not sep:
            if name not in os.environ:
                raise BadInput(f"--secret {name}: takes NAME=VALUE, or NAME with ${name} set here")
            value = os.environ[name]
        values[_secret_name(name, values, "--secret")] = value
    for item in secret_file or []:
        name, sep, path = item.partition("=")
        if not sep or not path:
            raise BadInput(f"--secret-file takes NAME=PATH, got {item!r}")
        try:
            value = Path(path).expanduser().read_text()
        except (OSError, UnicodeDecodeError) as e:
            raise BadInput(f"--secret-file {name}: cannot read {path}: {e}") from None
        values[_secret_name(name, values, "--secret-file")] = value
    return values


def _secret_name(name: str, values: dict[str, str], option: str) -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,127}", name):
        raise BadInput(f"{option} {name!r}: not a valid variable name")
    if name in values:
        raise BadInput(f"{option} {name}: given twice")
    return name


def _status(lease: Any) -> str:
    return type(lease.status).__name__


def _hms(seconds: int | None) -> str:
    return clock.span(seconds)


async def lease_summary(client: Any, address: Any, lease: Any) -> dict[str, Any]:
    """What a lease holds and how long it runs. Its end and its escrow's runway are two numbers: the
    escrow is sized at the maximum price, so on cheaper nodes it lasts past the end, and nothing after
    the end is billed (a 2 h lease at 80 % of its maximum price has a 2h30m runway but ends in 2 h)."""
    e = await escrow(client, address, lease)
    terms, status = lease.terms, _status(lease)
    # An open lease's end is its duration after it is placed: no date until then.
    to_end = max(e.ends_at - int(time.time()), 0) if status == "Active" else None
    return {
        "lease": address,
        "client": lease.client,
        "lease_id": lease.lease_id,
        "status": status,
        "gpu_model": catalog.gpu_model_name(terms.gpu_model),
        "gpu_count": terms.gpu_count,
        "min_vram_gb": terms.min_vram_gb,
        "region": catalog.region_name(terms.region),
        "max_price_per_gpu_hour": terms.max_price_per_gpu_hour,
        "duration_seconds": terms.duration_seconds,
        "deposited": lease.deposited,
        "paid": lease.paid,
        "fees": lease.fees,
        "refunded": lease.refunded,
        "escrow_balance": e.balance,
        "burn_per_hour": e.burn_per_hour,
        "ends_at": e.ends_at if status == "Active" else None,
        "seconds_to_end": to_end,
        "escrow_runway_seconds": e.runway_seconds,
        "billable_until": lease.billable_until if status in ("Closing", "Closed") else None,
        "downtime_tolerance_seconds": lease.downtime_tolerance_seconds,
        "assignments": [
            {
                "node": a.node,
                "node_key": a.node_key,
                "gpus": a.gpus,
                "price_per_gpu_hour": a.price_per_gpu_hour,
                "epoch": a.epoch,
                "settled_until": a.settled_until,
                "gpu_seconds": a.gpu_seconds,
            }
            for a in list(lease.assignments)[: lease.node_count]
        ],
    }


def _end(data: dict[str, Any]) -> str:
    """When the lease ends, for people: a date and the time to it, or why there is none yet."""
    if data["status"] == "Open":
        return f"{_hms(data['duration_seconds'])} after it is placed"
    if data["ends_at"] is not None:
        return clock.until(data["ends_at"])
    return f"billing stopped {clock.at(data['billable_until'])}" if data["billable_until"] else "-"


@app.command("open")
def open_lease(
    gpu: Annotated[str, typer.Option("--gpu", autocompletion=complete_gpu, help="GPU model (e.g. H100) or 'any'.")],
    count: Annotated[int, typer.Option("--count", min=1, max=MAX_LEASE_GPUS, help="GPUs in all.")],
    max_price: Annotated[str, typer.Option("--max-price", help="Most IO per GPU-hour you will pay.")],
    duration: Annotated[str, typer.Option("--duration", help="e.g. 90m, 2h, 1d.")],
    vram: Annotated[int, typer.Option("--vram", min=0, help="Least GiB per GPU.")] = 0,
    region: Annotated[
        str, typer.Option("--region", autocompletion=complete_region, help="Region name or 'any'.")
    ] = "any",
    lease_id: Annotated[
        int | None, typer.Option("--lease-id", min=0, help="Your id for it (default: now in ms).")
    ] = None,
    downtime_tolerance: Annotated[
        str | None,
        typer.Option(
            "--downtime-tolerance",
            help=f"How long a node of the lease may be silent before the coordinator moves its share (and "
            f"slashes its supplier), e.g. 30s, 5m: {ix.MIN_DOWNTIME_TOLERANCE_SECONDS} s to "
            f"{ix.MAX_DOWNTIME_TOLERANCE_SECONDS // 60} min (default: the network's, its coordinator's "
            f"lost-after; never shorter than that).",
        ),
    ] = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Open it even when no registered node could take "
            "it (its escrow stays locked until it is placed or "
            "you close it).",
        ),
    ] = False,
    url: UrlOpt = None,
    keypair: KeypairOpt = DEFAULT_KEYPAIR,
    json_output: JsonOpt = False,
) -> None:
    """Open a lease, escrowing max price x GPUs x duration; the coordinator places it on nodes.

    Checked before anything is sent, from the chain: that you hold the escrow
    (exit 4), and that registered nodes neither jailed nor draining could ever
    take the lease: its model, VRAM, region and price, and its GPUs in all on at
    most 8 nodes. When none could, it is refused (exit 2), naming the closest
    nodes, what keeps each from the lease and the option to change; --force opens
    it anyway. Whether the nodes are online only the coordinator knows: `gpunet
    quote` asks it."""

    async def command(s: Session) -> None:
        tolerance = 0 if downtime_tolerance is None else duration_arg(downtime_tolerance)
        if tolerance and not ix.MIN_DOWNTIME_TOLERANCE_SECONDS <= tolerance <= ix.MAX_DOWNTIME_TOLERANCE_SECONDS:
            raise BadInput(
                f"--downtime-tolerance must be between {ix.MIN_DOWNTIME_TOLERANCE_SECONDS} s and "
                f"{ix.MAX_DOWNTIME_TOLERANCE_SECONDS} s, got {tolerance} s"
            )
        model = catalog.ANY if gpu.lower() == "any" else catalog.gpu_model(gpu).code
        region_code = catalog.ANY if region.lower() == "any" else catalog.region(region)
        terms = ix.LeaseTerms(model, vram, count, region_code, parse_io(max_price), duration_arg(duration))
        me, ident = s.wallet.pubkey(), lease_id if lease_id is not None else time.time_ns() // 1_000_000
        deposit = escrow_for(terms.max_price_per_gpu_hour, count, terms.duration_seconds)
        address = lease_pda(me, ident)
        async with s.client() as client:
            io_mint = (await fetch_config(client)).io_mint
            if (await client.get_account_info(address)).value is not None:
                raise BadInput(f"you already have lease id {ident} ({address}); pick another --lease-id")
            io_balance_check(
                f"the escrow of {count} GPUs for {_hms(terms.duration_seconds)} at "
                f"{format_io(terms.max_price_per_gpu_hour)}/GPU-hour",
                deposit,
                await io_balance(client, me, io_mint),
            )
            # An unplaceable lease locks its escrow until closed, with nothing to say why: refuse it here.
            if not force and not (r := await lease_reach(client, terms)).possible:
                raise BadInput(
                    f"no registered node could take this lease: {why_not(r)}. To place it, "
                    f"{what_to_change(r)}; or pass --force to open it anyway (its escrow stays locked "
                    "until it is placed or you close it)"
                )
            sig = await s.send(
                client,
                f"Opening the lease (escrow {format_io(deposit)})",
                [ix.open_lease(me, io_account(me, io_mint), io_mint, ident, terms, tolerance)],
            )
        s.done(
            f"lease {address} opened, {format_io(deposit)} in escrow",
            sig,
            lease=address,
            lease_id=ident,
            deposit=deposit,
        )

    Session(url, keypair, json_output).run(command)


@app.command("top-up")
def top_up(
    lease: LeaseArg,
    duration: Annotated[str, typer.Option("--duration", help="Extra time, e.g. 1h.")],
    url: UrlOpt = None,
    keypair: KeypairOpt = DEFAULT_KEYPAIR,
    json_output: JsonOpt = False,
) -> None:
    """Extend a lease, escrowing the extra time at its max price.

    Only the lease's client may top it up: another wallet is refused (exit 2), and
    so is more IO than you hold (exit 4), before anything is sent."""

    async def command(s: Session) -> None:
        address, extra = pubkey_arg(lease, "lease address"), duration_arg(duration)
        async with s.client() as client:
            sig, amount = await top_up_escrow(s, client, address, await fetch(client, address, "Lease"), extra)
        s.done(f"lease {address} extended by {_hms(extra)} for {format_io(amount)}", sig, amount=amount)

    Session(url, keypair, json_output).run(command)


async def top_up_escrow(s: Session, client: Any, address: Any, lease: Any, extra: int) -> tuple[Any, int]:
    """Extends the lease by `extra` seconds, escrowing them at its max price from the wallet (the one
    top-up path: `lease top-up` and `lease watch --auto-top-up`); the signature and the amount."""
    me = s.wallet.pubkey()
    if lease.client != me:
        raise BadInput(
            f"lease {address} belongs to {lease.client}: only the lease's client can top it up "
            "(sign with that wallet, -k)"
        )
    io_mint = (await fetch_config(client)).io_mint
    amount = escrow_for(lease.terms.max_price_per_gpu_hour, lease.terms.gpu_count, extra)
    io_balance_check(f"extending by {_hms(extra)}", amount, await io_balance(client, me, io_mint))
    sig = await s.send(
        client, f"Topping up {format_io(amount)}", [ix.top_up_lease(me, io_account(me, io_mint), address, extra)]
    )
    return sig, amount


def _settled(lease: Any) -> bool:
    """Every share settled up to the billing end: nothing more can be owed (the program's check)."""
    return all(a.settled_until >= lease.billable_until for a in list(lease.assignments)[: lease.node_count])


@app.command("close")
def close(
    lease: LeaseArg, url: UrlOpt = None, keypair: KeypairOpt = DEFAULT_KEYPAIR, json_output: JsonOpt = False
) -> None:
    """Close a lease: its nodes are freed and billing stops now.

    What their last usage could still cost stays in escrow while the coordinator
    settles it; the rest comes back at once. Once nothing more is owed (every
    node's usage settled, or the settlement window over) the lease is finalized
    and the rest comes back too: if it was not, run this again after the window
    (it says until when)."""

    async def command(s: Session) -> None:
        address = pubkey_arg(lease, "lease address")
        async with s.client() as client:
            config = await fetch_config(client)
            account = await fetch(client, address, "Lease")
            client_tokens = io_account(account.client, config.io_mint)
            sig = None
            if _status(account) == "Closed":
                raise BadInput(f"lease {address} is already closed and finalized")
            if _status(account) in ("Open", "Active"):
                nodes = [a.node for a in list(account.assignments)[: account.node_count]]
                sig = await s.send(
                    client,
                    "Closing the lease",
                    [ix.close_lease(s.wallet.pubkey(), account.client, client_tokens, address, nodes)],
                )
                account = await fetch(client, address, "Lease")
            if _settled(account) or time.time() > account.settle_deadline:
                sig = await s.send(
                    client,
                    "Finalizing the lease",
                    [ix.finalize_lease(s.wallet.pubkey(), config.treasury, account.client, client_tokens, address)],
                )
                account = await fetch(client, address, "Lease")
            elif sig is None:
                raise BadInput(
                    f"lease {address} is closing: its nodes' last usage may be settled until "
                    f"{clock.at(account.settle_deadline)}; run this again after that"
                )
        refunded, kept = account.refunded, account.deposited - account.paid - account.fees - account.refunded
        message = f"lease {address} closed, {format_io(refunded)} refunded"
        if kept:
            message += (
                f"; {format_io(kept)} kept for the nodes' last usage until {clock.at(account.settle_deadline)} "
                f"(then `gpunet lease close {address}` again returns the rest)"
            )
        s.done(message, sig, refunded=refunded, kept_for_settlement=kept, status=_status(account))

    Session(url, keypair, json_output).run(command)


@app.command("show")
def show(
    lease: LeaseArg,
    url: UrlOpt = None,
    commitment: CommitmentOpt = None,
    explorer: ExplorerOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """A lease's terms, escrow balance, burn rate, end, escrow runway and nodes.

    Its end (a date, and the time to it; an open lease's is its duration after it
    is placed) and its escrow's runway at the current burn rate are shown apart:
    the escrow is sized at the maximum price, so on cheaper nodes it lasts past
    the end, and nothing after the end is billed.

    Of an open lease it also says why it waits (no node with free GPUs matches it,
    with the closest ones; or it waits for its first job and for matching nodes
    online) and the `gpunet lease close` command that returns its escrow."""

    async def command(s: Session) -> None:
        address = pubkey_arg(lease, "lease address")
        async with s.client() as client:
            account = await fetch(client, address, "Lease")
            data = await lease_summary(client, address, account)
            if data["status"] == "Open":
                data["waiting"] = await _waiting(client, address, account, data["escrow_balance"])
        data["explorer"] = s.explorer_url("address", address)

        def table() -> Table | Group:
            t = Table("", "", title=f"lease {s.link('address', address)}  \\[{data['status']}]", show_header=False)
            t.add_row(
                "wants",
                f"{data['gpu_count']}x {data['gpu_model']} >= {data['min_vram_gb']} GB in {data['region']} "
                f"at <= {format_io(data['max_price_per_gpu_hour'])}/GPU-hour for {_hms(data['duration_seconds'])}",
            )
            for key in ("deposited", "paid", "fees", "refunded", "escrow_balance"):
                t.add_row(key.replace("_", " "), format_io(data[key]))
            t.add_row("burn rate", f"{format_io(data['burn_per_hour'])}/hour")
            t.add_row("ends", _end(data))
            t.add_row(
                "escrow runway",
                f"{_hms(data['escrow_runway_seconds'])} at this burn rate (lasts past the end: "
                "nothing after it is billed)"
                if data["escrow_runway_seconds"] is not None
                else "- (nothing is burning)",
            )
            for a in data["assignments"]:
                t.add_row(
                    f"node key {s.link('address', a['node_key'])}",
                    f"{a['gpus']} GPUs at {format_io(a['price_per_gpu_hour'])}/GPU-hour, "
                    f"{a['gpu_seconds']} GPU-s settled (through {clock.at(a['settled_until'])}, "
                    f"assignment {a['epoch']}); node account {a['node']}",
                )
            if not (waiting := data.get("waiting")):
                return t
            # Below the table, unwrapped: a command cut across lines cannot be copied.
            return Group(
                t,
                f"[yellow]waiting:[/] {escape(waiting['reason'])}",
                f"to get the escrow back ({format_io(data['escrow_balance'])}), with the client's wallet: "
                f"{waiting['close_command']}",
            )

        s.show(data, table)

    Session(url, json_output=json_output, commitment_flag=commitment, explorer_flag=explorer).run(command)


async def _waiting(client: Any, address: Any, lease: Any, escrow_balance: int) -> dict[str, Any]:
    """Why an open lease is not placed: no node with free GPUs matches it (with the closest ones), or
    it waits for its first job and for matching nodes to be online (only the coordinator sees those)."""
    r = await lease_reach(client, lease.terms, free_now=True)
    if r.possible:
        reason = (
            f"{r.gpus} free GPUs on registered nodes match it; it is placed once you give it a job "
            f"(`gpunet lease job {address} --command ...`) and the coordinator sees matching nodes online "
            f"(`gpunet lease status {address}` says what it waits for)"
        )
    else:
        reason = (
            f"no registered node can take it now: {why_not(r)}; to place it, open a new lease and {what_to_change(r)}"
        )
    return {
        "reason": reason,
        "matching_free_gpus": r.gpus,
        "closest": [{"node_key": f.node.node_key, "misses": [m.text for m in f.misses]} for f in r.closest],
        "close_command": f"gpunet lease close {address}",
        "escrow_locked": escrow_balance,
    }


@app.command("list")
def list_leases(
    client_wallet: Annotated[str | None, typer.Option("--client", help="Whose leases (default: yours).")] = None,
    url: UrlOpt = None,
    keypair: KeypairOpt = DEFAULT_KEYPAIR,
    commitment: CommitmentOpt = None,
    explorer: ExplorerOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """A client's leases with their escrow balance, burn rate, time to their end and escrow runway.

    The time to the end and the escrow's runway are apart, as `gpunet lease show`
    explains."""

    async def command(s: Session) -> None:
        owner = pubkey_arg(client_wallet, "client wallet") if client_wallet else s.wallet.pubkey()
        async with s.client() as client:
            rows = [
                await lease_summary(client, a, lease)
                for a, lease in await program_accounts(client, "Lease", client=owner)
            ]

        def table() -> Table:
            t = Table(
                key_column("lease"),
                "status",
                "GPUs",
                "escrow",
                "burn/hour",
                "ends in",
                "escrow runway",
                "paid",
                title=f"leases of {owner}",
            )
            for r in rows:
                t.add_row(
                    s.link("address", r["lease"]),
                    r["status"],
                    f"{r['gpu_count']}x {r['gpu_model']}",
                    format_io(r["escrow_balance"]),
                    format_io(r["burn_per_hour"]),
                    _hms(r["seconds_to_end"]) if r["seconds_to_end"] is not None else _end(r),
                    _hms(r["escrow_runway_seconds"]),
                    format_io(r["paid"]),
                )
            return t

        s.show(rows, table)

    Session(url, keypair, json_output, commitment_flag=commitment, explorer_flag=explorer).run(command)


_SHA256 = re.compile(r"[0-9a-fA-F]{64}")


def input_arg(text: str) -> InputFile:
    """'[PATH=]URL#SHA256' -> the job's input file; refuses a URL that is not http(s) with a host, a
    digest that is not 64 hex digits, and a path that would leave the working directory."""
    head, sep, rest = text.strip().partition("://")
    path = None
    if sep and "=" in head:
        path, head = head.rsplit("=", 1)
    url, hashed, digest = (head + sep + rest).rpartition("#")
    if not hashed or not _SHA256.fullmatch(digest):
        raise BadInput(f"--input {text!r}: end it with #SHA256, the file's 64-hex SHA-256 (`sha256sum FILE`)")
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or any(c.isspace() for c in url):
        raise BadInput(f"--input {text!r}: {url!r} is not an http:// or https:// URL with a host")
    if path is None:
        path = urllib.parse.unquote(parts.path.rsplit("/", 1)[-1])
        if not path:
            raise BadInput(f"--input {text!r}: the URL names no file; name it with PATH=URL#SHA256")
    try:
        return InputFile(path=path, url=url, sha256=digest.lower())
    except ValidationError as e:
        first = e.errors()[0]
        why = str(first["msg"]).removeprefix("Value error, ")
        if first["loc"] == ("path",):
            raise BadInput(f"--input {text!r}: the file's PATH {path!r} {why}; name it with PATH=URL#SHA256") from None
        raise BadInput(f"--input {text!r}: {why}") from None


@app.command("job")
def job(
    lease: LeaseArg,
    command: Annotated[
        str | None, typer.Option("--command", help="What to run, e.g. 'python train.py --epochs 3'.")
    ] = None,
    image: Annotated[str | None, typer.Option("--image", help="Run in this container image (docker/podman).")] = None,
    env: Annotated[list[str] | None, typer.Option("--env", help="NAME=value for the job; repeat for several.")] = None,
    gpus_per_node: Annotated[
        int | None,
        typer.Option(
            "--gpus-per-node", min=1, max=MAX_GPUS_PER_NODE, help="Split into equal shares (a cluster shape)."
        ),
    ] = None,
    time_limit: Annotated[str | None, typer.Option("--time-limit", help="Stop the job after, e.g. 2h.")] = None,
    inputs: Annotated[
        list[str] | None,
        typer.Option(
            "--input",
            help="[PATH=]URL#SHA256: a file each node fetches over http(s) into the job's working directory "
            "before the job starts, from a public address only and within the node's limits, checked against its "
            "64-hex SHA-256 and named PATH (default: the URL's file name). A bad URL, digest or path is refused "
            "with nothing sent. Repeat for several.",
        ),
    ] = None,
    secret: SecretOpt = None,
    secret_file: SecretFileOpt = None,
    ray: Annotated[
        bool,
        typer.Option(
            "--ray",
            help="Make the lease one Ray cluster (a Ray node on each node, with its GPUs; rank 0 the head): "
            "--command, if given, runs on the head as its driver; submit more with `gpunet lease ray LEASE -- "
            "ray job submit ...`. The cluster admits only holders of the lease's Ray token (derived from your "
            "wallet, sealed to the nodes as the secret RAY_AUTH_TOKEN).",
        ),
    ] = False,
    expose: Annotated[
        list[str] | None,
        typer.Option(
            "--expose",
            metavar="NAME=PORT[/tcp]",
            help="Expose the job's PORT by NAME: an HTTP one is served by the coordinator at "
            "/endpoints/LEASE/NAME/ (with a token or public: `gpunet lease endpoint`), a /tcp one is reached "
            "with `gpunet lease forward`; repeat for several.",
        ),
    ] = None,
    coordinator: CoordinatorOpt = DEFAULT_COORDINATOR,
    url: UrlOpt = None,
    keypair: KeypairOpt = DEFAULT_KEYPAIR,
    json_output: JsonOpt = False,
) -> None:
    """Give your lease its next job, signed with your wallet.

    The first job gets the lease placed; a later one runs on the same GPUs once
    the current job has ended (one job at a time). What is given is checked before
    anything is sent: a bad --input URL, digest or path, --env, --secret or
    --expose is refused (exit 2).

    With secrets, it then waits for the lease's nodes and seals each secret to
    each node's key: the nodes wait for them before the job starts. If the lease
    moves to another node (a failover), that node waits for its secrets too: keep
    `gpunet lease status LEASE --follow --secret ...` running to seal them again."""

    async def command_(s: Session) -> None:
        address = pubkey_arg(lease, "lease address")
        variables: dict[str, str] = {}
        for item in env or []:
            name, sep, value = item.partition("=")
            if not sep or not name:
                raise BadInput(f"--env takes NAME=value, got {item!r}")
            variables[name] = value
        secrets = secrets_arg(secret, secret_file)
        if set(secrets) & set(variables):
            raise BadInput(f"{', '.join(sorted(set(secrets) & set(variables)))}: both --env and --secret")
        if ray and RAY_AUTH_TOKEN in secrets | variables:
            raise BadInput(f"{RAY_AUTH_TOKEN}: --ray derives the cluster's token from your wallet; give no other")
        files = [input_arg(item) for item in inputs or []]
        if len({f.path for f in files}) < len(files):
            raise BadInput("two --input files have the same PATH; name them apart with PATH=URL#SHA256")
        try:
            spec = JobSpec(
                command=shlex.split(command or ""),
                image=image,
                env=variables,
                inputs=files,
                time_limit_seconds=duration_arg(time_limit) if time_limit else None,
                secrets=sorted([*secrets, RAY_AUTH_TOKEN] if ray else secrets),
                ray=ray,
                expose=[expose_arg(item) for item in expose or []],
            )
        except ValidationError as e:
            raise BadInput(f"the job: {e.errors()[0]['msg']}") from None
        with s.waiting("Submitting the job"):
            accepted = await submit_job(coordinator, s.wallet, address, spec, gpus_per_node)
        async with s.client() as chain:  # where the chain says the lease is: the only nodes sealed to
            if spec.secrets:  # a Ray job's token among them
                with s.waiting("Waiting for the lease's nodes, to seal the secrets to them"):
                    accepted["secrets_sealed_to"] = await _seal_once_placed(coordinator, chain, s, address, secrets)
            # the lease's checkpoint key, to the nodes it is placed on now (`lease status` seals it later ones)
            accepted["checkpoint_key_sealed_to"] = await seal_missing_checkpoint_key(
                coordinator, chain, s.wallet, address
            )
        s.show(
            accepted,
            lambda: (
                f"[green]✓[/] job {accepted['job_number']} attached to lease {address}"
                + (
                    f", its secrets sealed to {len(accepted['secrets_sealed_to'])} node(s)"
                    if accepted.get("secrets_sealed_to")
                    else ""
                )
                + f"; follow it with `gpunet lease status {address}`"
                + (
                    " --follow --secret ... (seals them again if the lease moves)"
                    if secrets
                    else " --follow (seals the cluster's token to a node the lease moves to)"
                    if ray
                    else ""
                )
            ),
        )

    Session(url, keypair, json_output).run(command_)


def expose_arg(item: str) -> Expose:
    """NAME=PORT[/http|/tcp] as the job's exposed port; BadInput saying what is wrong."""
    name, sep, rest = item.partition("=")
    port, _, protocol = rest.partition("/")
    if not sep or not port.isdigit():
        raise BadInput(f"--expose takes NAME=PORT[/tcp], e.g. api=8000 or ssh=22/tcp; got {item!r}")
    try:
        return Expose(name=name, port=int(port), protocol=protocol or "http")  # type: ignore[arg-type]
    except ValidationError as e:
        raise BadInput(f"--expose {item!r}: {e.errors()[0]['msg']}") from None


async def _seal_once_placed(
    coordinator: str, chain: AsyncClient, s: Session, address: Any, secrets: dict[str, str]
) -> list[str]:
    """Waits for the lease's placement, then seals the secrets to its nodes; the node keys sealed to."""
    deadline = time.monotonic() + PLACEMENT_WAIT_SECONDS
    while True:
        view = await job_view(coordinator, s.wallet, address, tail=1)
        placement = view.get("placement") or {}
        if placement.get("state") == "placed":
            return await seal_missing_secrets(coordinator, chain, s.wallet, address, secrets, view)
        if placement.get("state") in ("failed", "ended"):
            raise CoordinatorError(f"lease {address} is not placed ({placement.get('reason')}): no node to seal to")
        if time.monotonic() > deadline:
            raise CoordinatorError(
                f"lease {address} was not placed within {PLACEMENT_WAIT_SECONDS:.0f} s; its job waits for its "
                f"secrets: seal them once it is, with `gpunet lease status {address} --follow --secret ...`"
            )
        await asyncio.sleep(FOLLOW_SECONDS)


def _ended(view: dict[str, Any], cursor: int) -> bool:
    """The job ended on every node it reached, and every log line up to the last is printed."""
    states = [n["state"] for n in view["nodes"]]
    return (
        bool(states) and all(s in JOB_ENDED for s in states) and (not view["logs"] or view["logs"][-1]["id"] <= cursor)
    )


def _print_line(s: Session, line: dict[str, Any]) -> None:
    if s.json_output:
        print(json.dumps(line), flush=True)
    else:  # a job's "[...]" is text, not markup
        s.out.print(
            f"[dim]{line['node_key'][:8]} {line['stream']}[/] {escape(line['line'])}", soft_wrap=True, highlight=False
        )


def _changes(before: dict[str, Any] | None, view: dict[str, Any]) -> list[dict[str, Any]]:
    """What changed from one view of the lease to the next: its placement, its job, each node's state."""
    events: list[dict[str, Any]] = []
    p, q = (before or {}).get("placement") or {}, view["placement"] or {}
    if (p.get("state"), p.get("reason")) != (q.get("state"), q.get("reason")):
        events.append({"event": "placement", "state": q.get("state"), "reason": q.get("reason")})
    if before is not None and before.get("job_number") != view.get("job_number"):
        events.append({"event": "job", "job_number": view.get("job_number")})
    old = {n["node_key"]: n for n in (before or {}).get("nodes", [])}
    for n in view["nodes"]:
        was = old.get(n["node_key"])
        if was is None or (was["state"], was.get("detail")) != (n["state"], n.get("detail")):
            events.append(
                {
                    "event": "node",
                    "node_key": n["node_key"],
                    "state": n["state"],
                    "was": was["state"] if was else None,
                    "detail": n.get("detail"),
                }
            )
    return events


def _print_change(s: Session, event: dict[str, Any]) -> None:
    if s.json_output:
        print(json.dumps(event), flush=True)
        return
    when = time.strftime("%H:%M:%S", time.gmtime())
    if event["event"] == "placement":
        text = f"lease {event['state'] or 'not seen'}" + (f": {event['reason']}" if event["reason"] else "")
    elif event["event"] == "job":
        text = f"job {event['job_number']} is the lease's job now"
    elif event["event"] == "secrets":
        text = f"secrets sealed to node(s) {', '.join(event['sealed_to'])}"
    elif event["event"] == "checkpoint_key":
        text = f"the lease's checkpoint key sealed to node(s) {', '.join(event['sealed_to'])}"
    elif event["event"] == "seal_failed":
        text = f"not sealed (tried again): {event['error']}"
    else:
        arrow = f"{event['was']} -> {event['state']}" if event["was"] else event["state"]
        text = f"node {event['node_key']}: {arrow}" + (f" ({event['detail']})" if event["detail"] else "")
    s.out.print(f"[cyan]{when} {escape(text)}[/]", soft_wrap=True, highlight=False)


def _checkpoint_caption(checkpoint: dict[str, Any] | None) -> str | None:
    """The newest checkpoint in the coordinator's checkpoint store (of any rank), for `lease status`."""
    if not checkpoint:
        return None
    taken = datetime.fromtimestamp(checkpoint["taken_at"], UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    text = (
        f"checkpoint: {checkpoint['bytes'] / 2**20:.1f} MiB in {checkpoint['files']} files "
        f"({checkpoint['chunks']} chunks), from node {checkpoint['node_key'][:8]} at {taken}"
    )
    ranks = [r["rank"] for r in checkpoint.get("ranks") or []]
    if len(ranks) > 1:  # a multi-node lease's nodes checkpoint one each: `lease files --rank` gets another's
        text += f", rank {checkpoint['rank']}'s (ranks {', '.join(map(str, ranks))} each have their own)"
    return text


def _ray_caption(ray: dict[str, Any] | None) -> str | None:
    """Where a Ray lease's head answers, for `lease status` (its log says what the cluster went through)."""
    if not ray:
        return None
    return (
        f"Ray: Jobs API and dashboard at {ray['dashboard']}, RAY_ADDRESS={ray['address']} (head: node "
        f"{ray['head'][:8]}); `gpunet lease ray LEASE -- ray job submit ...`"
    )


@app.command("status")
def status(
    lease: LeaseArg,
    coordinator: CoordinatorOpt = DEFAULT_COORDINATOR,
    follow: Annotated[
        bool,
        typer.Option(
            "--follow",
            "-f",
            help="Then keep printing new log lines and status changes until the job ends (or Ctrl-C).",
        ),
    ] = False,
    secret: SecretOpt = None,
    secret_file: SecretFileOpt = None,
    url: UrlOpt = None,
    keypair: KeypairOpt = DEFAULT_KEYPAIR,
    json_output: JsonOpt = False,
) -> None:
    """Where the coordinator placed the lease, its job on each node, and the latest log lines.

    The placement, each node's job state and the latest 20 log lines. With
    --follow, then every new log line and change of state, placement or job as it
    comes, until the job ends (or Ctrl-C); with --json, one JSON object per line:
    the status first, then each line and each change with its "event".

    Only the lease's client (or a supplier of its nodes) may read it: the request
    is signed with your wallet (-k). It seals the lease's checkpoint key (derived
    from your wallet) to every node of the lease that lacks it, and with the job's
    secrets (--secret, --secret-file) seals them too: after a failover, the new
    node's job waits ("waiting_secrets") until then."""

    async def command_(s: Session) -> None:
        address = pubkey_arg(lease, "lease address")
        secrets = secrets_arg(secret, secret_file)
        view = await job_view(coordinator, s.wallet, address, tail=STATUS_LINES)

        said: set[str] = set()

        async def reseal(latest: dict[str, Any]) -> None:
            """Seals what a node of the lease lacks; following, a refusal is said once and tried again."""
            ray = (latest.get("job") or {}).get("ray")  # its token is sealed without being given
            try:
                async with s.client() as chain:
                    if (secrets or ray) and (
                        sealed := await seal_missing_secrets(coordinator, chain, s.wallet, address, secrets, latest)
                    ):
                        _print_change(s, {"event": "secrets", "sealed_to": sealed})
                    if keyed := await seal_missing_checkpoint_key(coordinator, chain, s.wallet, address, latest):
                        _print_change(s, {"event": "checkpoint_key", "sealed_to": keyed})
            except CoordinatorError as e:
                if not follow:
                    raise
                if str(e) not in said:
                    said.add(str(e))
                    _print_change(s, {"event": "seal_failed", "error": str(e)})

        await reseal(view)

        def table() -> Table:
            p = view["placement"] or {}
            job = f"job {view['job_number']}" if view.get("job_number") else "job"
            t = Table(
                key_column("node key"),
                job,
                "detail",
                title=f"lease {lease}: {p.get('state', 'not seen')}  {p.get('reason', '')}",
                caption="\n".join(
                    c for c in (_ray_caption(view.get("ray")), _checkpoint_caption(view.get("checkpoint"))) if c
                )
                or None,
            )
            for n in view["nodes"]:
                t.add_row(s.link("address", n["node_key"]), n["state"], n.get("detail") or "")
            for line in view["logs"]:
                t.add_row(line["node_key"][:8], line["stream"], escape(line["line"]))
            return t

        if not follow:
            s.show(view, table)
            return
        if s.json_output:
            print(json.dumps(view), flush=True)
        else:
            s.out.print(table(), soft_wrap=True)
        cursor = view["logs"][-1]["id"] if view["logs"] else 0
        while not _ended(view, cursor):
            await asyncio.sleep(FOLLOW_SECONDS)
            async for line in job_logs(coordinator, s.wallet, address, cursor):
                cursor = line["id"]
                _print_line(s, line)
            latest = await job_view(coordinator, s.wallet, address, tail=1)
            for event in _changes(view, latest):
                _print_change(s, event)
            await reseal(latest)
            view = latest
        if not s.json_output:
            states = ", ".join(sorted({n["state"] for n in view["nodes"]}))
            s.out.print(f"job {view.get('job_number') or ''} ended: {states}", highlight=False)

    Session(url, keypair, json_output).run(command_)


@app.command("files")
def files(
    lease: LeaseArg,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="Write the files under this directory (default: ./LEASE-checkpoint, and ./LEASE-checkpoint-rankR "
            "for --rank R other than 0).",
        ),
    ] = None,
    rank: Annotated[
        int,
        typer.Option(
            min=0,
            help="Whose checkpoint: the lease's node of this rank (a multi-node lease's nodes checkpoint one each).",
        ),
    ] = 0,
    coordinator: CoordinatorOpt = DEFAULT_COORDINATOR,
    url: UrlOpt = None,
    keypair: KeypairOpt = DEFAULT_KEYPAIR,
    json_output: JsonOpt = False,
) -> None:
    """Download the lease's latest checkpoint from the coordinator.

    The checkpoint is what the lease's job last wrote to $GPUNET_CHECKPOINT_DIR:
    at most 512 KiB through the gateway, or up to 64 MiB from the checkpoint
    store; of a multi-node lease, rank 0's unless --rank names another. Each file
    is checked against its SHA-256 before any is written. Only the lease's client
    may read it: the request is signed with your wallet (-k).

    Nothing else a job writes (its working directory, other outputs) reaches the
    coordinator: have the job upload what it must keep, or write it as its
    checkpoint."""

    async def command_(s: Session) -> None:
        address = pubkey_arg(lease, "lease address")
        wallet = s.wallet  # a missing keypair file is said before anything is asked
        target = (out or Path(f"{address}-checkpoint" + (f"-rank{rank}" if rank else ""))).expanduser()
        if target.exists() and not target.is_dir():
            raise BadInput(f"--out {target}: not a directory")
        with s.waiting("Downloading the lease's latest checkpoint"):
            meta, checkpoint = await lease_files(coordinator, wallet, address, rank)
        contents = []
        for f in checkpoint:  # all checked before anything is written
            try:
                contents.append((f, f.content()))
            except ValueError as e:
                raise CoordinatorError(f"the coordinator sent a damaged file: {e}; nothing was written") from None
        written: list[dict[str, Any]] = []
        for f, content in contents:
            path = target.joinpath(*f.path.split("/"))
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
            written.append({"path": str(path), "bytes": len(content), "sha256": f.sha256})
        data = {**meta, "directory": str(target), "files": written}

        def table() -> Table:
            t = Table(
                "file",
                "bytes",
                "sha256",
                title=f"checkpoint of lease {s.link('address', address)}"
                + (f" rank {rank}" if rank else "")
                + " from node "
                f"{s.link('address', meta['node_key'])} at {meta['received_at']}",
            )
            for w in written:
                t.add_row(escape(w["path"]), str(w["bytes"]), w["sha256"])
            return t

        s.show(data, table)

    Session(url, keypair, json_output).run(command_)


@app.command("logs")
def logs(
    lease: LeaseArg,
    coordinator: CoordinatorOpt = DEFAULT_COORDINATOR,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new lines until the job ends.")] = False,
    after: Annotated[int, typer.Option(min=0, help="Only lines after this id (--json prints each line's id).")] = 0,
    url: UrlOpt = None,
    keypair: KeypairOpt = DEFAULT_KEYPAIR,
    json_output: JsonOpt = False,
) -> None:
    """Every log line of the lease's jobs, in order.

    Fetched from the coordinator a page at a time; with --json, one JSON object
    per line, with each line's id (for --after). Only the lease's client (or a
    supplier of its nodes) may read them: the request is signed with your wallet
    (-k)."""

    async def command_(s: Session) -> None:
        address = pubkey_arg(lease, "lease address")
        cursor = after
        while True:
            async for line in job_logs(coordinator, s.wallet, address, cursor):
                cursor = line["id"]
                _print_line(s, line)
            if not follow:
                return
            if _ended(await job_view(coordinator, s.wallet, address, tail=1), cursor):
                return  # the job ended and every line of it is printed
            await asyncio.sleep(FOLLOW_SECONDS)

    Session(url, keypair, json_output).run(command_)


@app.command("ray")
def ray_cli(
    lease: LeaseArg,
    argv: Annotated[
        list[str], typer.Argument(help="Ray's own command, after --, e.g. -- ray job submit -- python job.py")
    ],
    coordinator: CoordinatorOpt = DEFAULT_COORDINATOR,
    url: UrlOpt = None,
    keypair: KeypairOpt = DEFAULT_KEYPAIR,
) -> None:
    """Run Ray's own CLI against the lease's Ray cluster (a job attached with --ray).

    RAY_ADDRESS and RAY_API_SERVER_ADDRESS are its head's Jobs API (for `ray job
    submit|logs|status|list|stop`), GPUNET_RAY_GCS its GCS address (`ray status
    --address $GPUNET_RAY_GCS` from the cluster's network), RAY_AUTH_TOKEN the
    lease's Ray token (derived from your wallet; the cluster admits no one without
    it). Ray's CLI comes with gpunet's `ray` extra (`pip install
    'gpunet\\[ray]'`). Exits with the command's exit status."""
    found: dict[str, Any] = {}

    async def command_(s: Session) -> None:
        address = pubkey_arg(lease, "lease address")
        view = await job_view(coordinator, s.wallet, address, tail=1)
        if not (view.get("job") or {}).get("ray"):
            raise BadInput(
                f"lease {address}'s job is no Ray cluster: attach one with `gpunet lease job {address} --ray`"
            )
        if not view.get("ray"):
            raise CoordinatorError(
                f"lease {address}'s Ray head is not up (placement: {(view.get('placement') or {}).get('state')}, "
                "or its node's worker is not connected): see `gpunet lease status`"
            )
        found.update(view["ray"], token=ray_token(s.wallet, address))

    session = Session(url, keypair, False)
    session.run(command_)
    env = os.environ | {
        "RAY_ADDRESS": found["dashboard"],
        "RAY_API_SERVER_ADDRESS": found["dashboard"],
        "GPUNET_RAY_GCS": found["address"],
        "RAY_AUTH_MODE": "token",
        RAY_AUTH_TOKEN: found["token"],
    }
    try:
        done = subprocess.run(argv, env=env, check=False)
    except FileNotFoundError:
        raise session.fail(Exit.BAD_INPUT, f"{argv[0]!r} is not installed here ({RAY_INSTALL} brings Ray's)") from None
    raise typer.Exit(done.returncode)
