"""`gpunet quote`: which nodes a lease would get now, at what price, how reliable and whether online,
and the escrow `lease open` needs for its duration (asked of the coordinator, which sees the nodes)."""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Any

import typer
from rich.console import Group
from rich.markup import escape
from rich.table import Table

from gpunet import catalog
from gpunet.amounts import format_io, parse_io, parse_u64
from gpunet.cli import clock
from gpunet.cli.common import (
    DEFAULT_COORDINATOR,
    BadInput,
    CoordinatorOpt,
    JsonOpt,
    Session,
    complete_gpu,
    complete_region,
    duration_arg,
    key_column,
)
from gpunet.jobs import quote as ask_quote
from gpunet.limits import MAX_GPUS_PER_NODE, MAX_LEASE_GPUS
from gpunet.tokens import IO_DECIMALS

__all__ = ["quote"]


# the coordinator's word for a node's GPU verification (`gpunet node verifications NODE` says why)
_VERIFICATION = {"verified": "[green]verified[/]", "unverified": "[yellow]unverified[/]", "failed": "[red]failed[/]"}


def _free(c: dict[str, Any]) -> str:
    """'1/2 (1 missing)': free of registered, and those its worker does not run (never placed)."""
    missing = f" ({c['missing_gpus']} missing)" if c["missing_gpus"] else ""
    return f"{c['free_gpus']}/{c['gpu_count']}{missing}"


def _state(c: dict[str, Any]) -> str:
    words = ["[green]online[/]" if c["online"] else "[red]offline[/]"]
    words += [w for w in ("jailed", "draining") if c[w]]
    if not c["healthy"]:
        words.append("unhealthy")
    if c["simulated"]:
        words.append("simulated")
    return ", ".join(words)


def _open_command(terms: dict[str, Any], price: int, duration: str) -> str:
    command = f"gpunet lease open --gpu {terms['gpu_model']} --count {terms['gpu_count']}"
    if terms["min_vram_gb"]:
        command += f" --vram {terms['min_vram_gb']}"
    if terms["region"] != "any":
        command += f" --region {terms['region']}"
    io = format(Decimal(price).scaleb(-IO_DECIMALS).normalize(), "f")  # as --max-price takes it: no commas
    return command + f" --max-price {io} --duration {duration}"


def quote(
    count: Annotated[int, typer.Option("--count", min=1, max=MAX_LEASE_GPUS, help="GPUs in all.")],
    duration: Annotated[str, typer.Option("--duration", help="How long, e.g. 90m, 2h, 1d: sizes the escrow.")],
    gpu: Annotated[
        str, typer.Option("--gpu", autocompletion=complete_gpu, help="GPU model (e.g. H100) or 'any'.")
    ] = "any",
    region: Annotated[
        str, typer.Option("--region", autocompletion=complete_region, help="Region name (e.g. eu-west) or 'any'.")
    ] = "any",
    vram: Annotated[int, typer.Option("--vram", min=0, max=65535, help="Least GiB per GPU.")] = 0,
    max_price: Annotated[
        str | None,
        typer.Option(
            "--max-price",
            help="Most IO per GPU-hour you would pay (default: none; the escrow is then sized at the "
            "dearest node chosen).",
        ),
    ] = None,
    gpus_per_node: Annotated[
        int | None,
        typer.Option("--gpus-per-node", min=1, max=MAX_GPUS_PER_NODE, help="Equal shares (a cluster shape)."),
    ] = None,
    coordinator: CoordinatorOpt = DEFAULT_COORDINATOR,
    json_output: JsonOpt = False,
) -> None:
    """Which nodes a lease would get now, and the escrow `gpunet lease open` needs for it.

    Asks the coordinator (--coordinator), which sees the nodes; nothing is sent on
    chain. It shows the matching nodes with their price, free GPUs (of those the
    node's worker runs: registered GPUs it lacks show as missing and are never
    placed), region, reliability, verification (verified, unverified or failed)
    and online state; the ones the coordinator would choose, or why none; the
    escrow `gpunet lease open` needs for the duration (at --max-price, else at the
    dearest chosen node's price); and the `gpunet lease open` command."""

    async def command(s: Session) -> None:
        model = "any" if gpu.strip().lower() == "any" else catalog.gpu_model(gpu.strip()).name
        place = "any" if region.strip().lower() == "any" else catalog.region_name(catalog.region(region.strip()))
        seconds = duration_arg(duration)
        price = parse_io(max_price) if max_price is not None else None
        if gpus_per_node is not None and count % gpus_per_node:
            raise BadInput(f"--gpus-per-node {gpus_per_node} does not divide --count {count}")
        with s.waiting("Asking the coordinator"):
            answer = await ask_quote(
                coordinator,
                count,
                gpu_model=model,
                region=place,
                min_vram_gb=vram,
                max_price_per_gpu_hour=price,
                gpus_per_node=gpus_per_node,
                duration_seconds=seconds,
            )

        def render() -> Group:
            terms, escrow = answer["terms"], answer.get("escrow") or {}
            wants = f"{terms['gpu_count']}x {terms['gpu_model']}" + (
                f" >= {terms['min_vram_gb']} GB" if terms["min_vram_gb"] else ""
            )
            t = Table(
                key_column("node"),
                "free",
                "GPU",
                "region",
                "price/GPU-h",
                "reliability",
                "verified",
                "state",
                "chosen",
                title=f"quote: {wants} in {terms['region']} for {clock.span(seconds)}",
            )
            for c in answer["candidates"]:
                t.add_row(
                    s.link("address", c["node_key"]),
                    _free(c),
                    f"{c['gpu_model']} {c['vram_gb']} GB",
                    c["region"],
                    format_io(parse_u64(c["price_per_gpu_hour"])),
                    f"{c['reliability']:.0%}",
                    _VERIFICATION[c["verification"]],
                    _state(c),
                    f"{c['chosen_gpus']} GPUs" if c["chosen_gpus"] else "",
                )
            lines: list[Any] = [t] if answer["candidates"] else ["no registered node matches these terms"]
            if answer["placeable"]:
                lines.append(
                    f"[green]placeable now[/] on {len(answer['shares'])} node(s), burning "
                    f"{format_io(parse_u64(answer['burn_per_hour']))}/hour"
                )
            else:
                lines.append(f"[yellow]not placeable now:[/] {escape(answer['reason'])}")
            if escrow.get("needed") is not None:
                at = format_io(parse_u64(escrow["max_price_per_gpu_hour"]))
                whose = "your maximum price" if price is not None else "the dearest chosen node's price"
                lines.append(
                    f"escrow needed for {clock.span(seconds)}: [bold]{format_io(parse_u64(escrow['needed']))}[/] "
                    f"(at {whose}, {at}/GPU-hour, as --max-price)"
                )
                if escrow.get("cost_at_quoted_prices") is not None:
                    lines.append(
                        f"at the chosen nodes' prices the whole duration costs "
                        f"{format_io(parse_u64(escrow['cost_at_quoted_prices']))} (the rest of the escrow comes back)"
                    )
                lines.append(
                    f"to open it: {_open_command(terms, parse_u64(escrow['max_price_per_gpu_hour']), duration)}"
                )
            else:
                lines.append("escrow: no node can take it now to size it; pass --max-price to size it at your price")
            return Group(*lines)

        s.show(answer, render)

    Session(None, json_output=json_output).run(command)
