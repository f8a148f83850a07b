"""`gpunet lease endpoint token|revoke|public|list|log`: a lease's served endpoints, the job's exposed
HTTP ports at a stable URL on the coordinator (gpunet.endpoints): who may call them, and who did."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from gpunet.cli.common import (
    DEFAULT_COORDINATOR,
    DEFAULT_KEYPAIR,
    BadInput,
    CoordinatorOpt,
    JsonOpt,
    KeypairOpt,
    Session,
    UrlOpt,
    key_column,
    pubkey_arg,
)
from gpunet.endpoints import (
    create_endpoint_token,
    endpoint_log,
    list_endpoints,
    revoke_endpoint_token,
    set_endpoint_public,
)

app = typer.Typer(
    help="A lease's served endpoints (its job's exposed HTTP ports): tokens, public access, the access log.",
    no_args_is_help=True,
)
LeaseArg = Annotated[str, typer.Argument(help="The lease's address.")]
FOLLOW_SECONDS = 1.0
_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$")
_TOKEN_ID = re.compile(r"^[0-9a-f]{16}$")


@app.command("token")
def token(
    lease: LeaseArg,
    label: Annotated[
        str, typer.Option("--label", help="What the token is for (shown in `endpoint list`; never secret).")
    ] = "",
    coordinator: CoordinatorOpt = DEFAULT_COORDINATOR,
    url: UrlOpt = None,
    keypair: KeypairOpt = DEFAULT_KEYPAIR,
    json_output: JsonOpt = False,
) -> None:
    """Create a bearer token that opens the lease's endpoints (Authorization: Bearer TOKEN). It is
    shown this once (the coordinator keeps only its SHA-256): keep it. Revoke it with
    `gpunet lease endpoint revoke LEASE ID`. The request is signed with your wallet (the lease's client)."""

    async def command_(s: Session) -> None:
        address = pubkey_arg(lease, "lease address")
        created = await create_endpoint_token(coordinator, s.wallet, address, label)
        listed = await list_endpoints(coordinator, s.wallet, address)
        urls = [e["url"] for e in listed["endpoints"] if e["url"]]

        def render() -> str:
            lines = [
                f"[green]✓[/] token [bold]{created['id']}[/]{f' ({escape(label)})' if label else ''} for lease "
                f"{address}'s endpoints; shown this once, keep it:",
                f"  {created['token']}",
            ]
            if urls:
                lines.append(f'[dim]curl -H "Authorization: Bearer {created["token"]}" {urls[0]}[/]')
            else:
                lines.append("[dim]the lease's job exposes no HTTP port yet (JobSpec.expose)[/]")
            return "\n".join(lines)

        s.show({**created, "urls": urls}, render)

    Session(url, keypair, json_output).run(command_)


@app.command("revoke")
def revoke(
    lease: LeaseArg,
    token_id: Annotated[str, typer.Argument(metavar="ID", help="The token's id (`endpoint list` shows them).")],
    coordinator: CoordinatorOpt = DEFAULT_COORDINATOR,
    url: UrlOpt = None,
    keypair: KeypairOpt = DEFAULT_KEYPAIR,
    json_output: JsonOpt = False,
) -> None:
    """Revoke one of the lease's endpoint tokens: from now on it is refused (403) at every endpoint."""

    async def command_(s: Session) -> None:
        address = pubkey_arg(lease, "lease address")
        if not _TOKEN_ID.fullmatch(token_id.strip()):
            raise BadInput(f"{token_id!r} is not a token id (16 hex digits: `gpunet lease endpoint list {lease}`)")
        revoked = await revoke_endpoint_token(coordinator, s.wallet, address, token_id.strip())
        s.show(revoked, lambda: f"[green]✓[/] token {revoked['id']} revoked (at {revoked['revoked_at']})")

    Session(url, keypair, json_output).run(command_)


@app.command("public")
def public(
    lease: LeaseArg,
    name: Annotated[str, typer.Argument(help="The exposed port's name (the job's expose list).")],
    off: Annotated[bool, typer.Option("--off", help="Take a token again (no longer public).")] = False,
    coordinator: CoordinatorOpt = DEFAULT_COORDINATOR,
    url: UrlOpt = None,
    keypair: KeypairOpt = DEFAULT_KEYPAIR,
    json_output: JsonOpt = False,
) -> None:
    """Make the lease's endpoint NAME public: anyone with its URL may call it, no token (its requests
    still count against the lease's limits, and the access log shows them). --off: tokens only again."""

    async def command_(s: Session) -> None:
        address = pubkey_arg(lease, "lease address")
        if not _NAME.fullmatch(name):
            raise BadInput(f"{name!r} is not an exposed port's name (a-z, 0-9 and -, at most 32)")
        done = await set_endpoint_public(coordinator, s.wallet, address, name, not off)
        s.show(
            done,
            lambda: (
                f"[green]✓[/] {done['url']} "
                + ("takes a token again" if off else "is public: anyone with the URL may call it")
            ),
        )

    Session(url, keypair, json_output).run(command_)


@app.command("list")
def list_(
    lease: LeaseArg,
    coordinator: CoordinatorOpt = DEFAULT_COORDINATOR,
    url: UrlOpt = None,
    keypair: KeypairOpt = DEFAULT_KEYPAIR,
    json_output: JsonOpt = False,
) -> None:
    """The lease's endpoints (its job's exposed ports, their URLs, public or by token, and how many of
    the nodes serving them answer now), its live tokens (ids and labels) and its limits."""

    async def command_(s: Session) -> None:
        address = pubkey_arg(lease, "lease address")
        listed = await list_endpoints(coordinator, s.wallet, address)

        def render() -> Table:
            limits = listed["limits"]
            t = Table(
                "name",
                "port",
                "access",
                "nodes",
                "URL",
                title=f"lease {address}'s endpoints ({listed['status'] or 'not indexed'})",
                caption=f"tokens: {_tokens(listed['tokens'])}\nlimits: {limits['requests_per_second']:g} requests/s "
                f"(bursts of {limits['burst']}), {limits['max_streams']} in flight, bodies up to "
                f"{limits['max_body_bytes']:,} bytes",
            )
            for e in listed["endpoints"]:
                if e["protocol"] != "http":
                    t.add_row(e["name"], str(e["port"]), "tcp", "", f"gpunet lease forward {address} {e['name']}")
                    continue
                up = sum(1 for n in e["nodes"] if n["linked"] and n["healthy"] is not False)
                t.add_row(
                    e["name"],
                    str(e["port"]),
                    "[yellow]public[/]" if e["public"] else "token",
                    f"{up}/{len(e['nodes'])}",
                    e["url"],
                )
            if not listed["endpoints"]:
                t.add_row("-", "", "", "", "the job exposes no port (JobSpec.expose)")
            return t

        s.show(listed, render)

    Session(url, keypair, json_output).run(command_)


def _tokens(tokens: list[dict[str, Any]]) -> str:
    if not tokens:
        return "none (create one: gpunet lease endpoint token LEASE)"
    return ", ".join(f"{t['id']}" + (f" ({escape(t['label'])})" if t["label"] else "") for t in tokens)


@app.command("log")
def log(
    lease: LeaseArg,
    tail: Annotated[int, typer.Option(min=1, max=1000, help="The last this many requests.")] = 50,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Then keep printing new ones (until Ctrl-C).")] = False,
    coordinator: CoordinatorOpt = DEFAULT_COORDINATOR,
    url: UrlOpt = None,
    keypair: KeypairOpt = DEFAULT_KEYPAIR,
    json_output: JsonOpt = False,
) -> None:
    """The access log of the lease's endpoints: time, endpoint, method, path (without its query),
    status, body bytes in and out, milliseconds, the node that answered and the token id used
    (--json: one JSON object per line). Refused requests are in it too."""

    async def command_(s: Session) -> None:
        address = pubkey_arg(lease, "lease address")
        page = await endpoint_log(coordinator, s.wallet, address, tail=tail)
        if not s.json_output:
            t = Table("time", "name", "method", "path", "status", "in", "out", "ms", key_column("node"), "token")
            for entry in page["items"]:
                t.add_row(*_cells(entry))
            s.out.print(t, soft_wrap=True)
        else:
            for entry in page["items"]:
                print(json.dumps(entry), flush=True)
        cursor = page["items"][-1]["id"] if page["items"] else 0
        while follow:
            await asyncio.sleep(FOLLOW_SECONDS)
            more = True
            while more:
                page = await endpoint_log(coordinator, s.wallet, address, after=cursor, limit=1000)
                for entry in page["items"]:
                    cursor = entry["id"]
                    if s.json_output:
                        print(json.dumps(entry), flush=True)
                    else:
                        s.out.print("  ".join(_cells(entry)), soft_wrap=True, highlight=False)
                more = page["more"]

    Session(url, keypair, json_output).run(command_)


def _cells(entry: dict[str, Any]) -> list[str]:
    status = entry["status"]
    colour = "green" if status < 400 else "yellow" if status < 500 else "red"
    return [
        entry["at"][:23],
        entry["name"],
        entry["method"],
        escape(entry["path"]),
        f"[{colour}]{status}[/]",
        str(entry["bytes_in"]),
        str(entry["bytes_out"]),
        str(entry["ms"]),
        entry["node_key"] or "-",
        entry["token"] or "-",
    ]
