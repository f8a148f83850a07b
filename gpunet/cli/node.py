"""`gpunet node register|update|deregister|release|list`: the GPU machines a supplier offers."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from gpunet import catalog
from gpunet import instructions as ix
from gpunet.accounts import fetch, fetch_config, program_accounts, resolve_provider
from gpunet.amounts import format_io, parse_io
from gpunet.cli import clock
from gpunet.cli.common import (
    DEFAULT_KEYPAIR,
    BadInput,
    CommitmentOpt,
    ExplorerOpt,
    JsonOpt,
    KeypairOpt,
    NotEnoughFunds,
    Session,
    UrlOpt,
    complete_gpu,
    complete_region,
    key_column,
    node_key_arg,
    node_keypair_arg,
    pubkey_arg,
)
from gpunet.cli.lease import DEFAULT_COORDINATOR, CoordinatorOpt
from gpunet.jobs import node_verifications
from gpunet.limits import MAX_GPUS_PER_NODE
from gpunet.pda import node_pda, provider_pda

app = typer.Typer(
    help="GPU nodes: register, update, drain, undrain, deregister, release, unjail, list, verifications.",
    no_args_is_help=True,
)
NodeKeyArg = Annotated[
    str,
    typer.Argument(
        help="The node: its public key (its worker signs with it), its name from `gpunet keys new-node`, or its "
        "keypair file. An unknown name, or a public key that is also the name of a node key file holding another "
        "key, is refused (exit 2)."
    ),
]
RegionOpt = Annotated[
    str | None,
    typer.Option("--region", autocompletion=complete_region, help=f"One of: {', '.join(catalog.REGIONS.values())}."),
]
PriceOpt = Annotated[str | None, typer.Option("--price", help="Asking price in IO per GPU-hour, e.g. 2.5.")]
HashOpt = Annotated[
    str | None,
    typer.Option("--inventory-hash", help="SHA-256 (hex) of the node's NVML inventory, as `gpunet worker` prints it."),
]


def _inventory_hash(text: str | None) -> bytes:
    if text is None:
        return bytes(32)
    try:
        value = bytes.fromhex(text)
    except ValueError:
        value = b""
    if len(value) != 32:
        raise BadInput(f"--inventory-hash must be 64 hex digits (a SHA-256), got {text!r}")
    return value


def deregistered_bond_seconds(config: Any) -> int:
    """How long a deregistered node's stake stays bonded (the program's `Config::deregistered_bond_seconds`):
    the unbonding period, at least the settlement window."""
    return max(config.unbonding_seconds, config.settle_window_seconds)


def node_row(address: Any, n: Any) -> dict[str, Any]:
    spec = n.spec
    return {
        "node": address,
        "node_key": n.node_key,
        "provider": n.provider,
        "gpu_model": catalog.gpu_model_name(spec.gpu_model),
        "gpu_count": spec.gpu_count,
        "gpus_leased": n.gpus_leased,
        "vram_gb": spec.vram_gb,
        "region": catalog.region_name(spec.region),
        "price_per_gpu_hour": spec.price_per_gpu_hour,
        "inventory_hash": bytes(spec.inventory_hash),
        "bonded_stake": n.bonded_stake,
        "jailed": n.jailed,
        "jail_ends_at": n.jail_ends_at,
        "draining": n.draining,
        "deregistered_at": n.deregistered_at or None,
        "verification_tier": n.verification_tier,
        "verified_until": n.verified_until,
    }


_TIERS = {ix.TIER_SIMULATED: "simulated", ix.TIER_GPU: "GPU", ix.TIER_CONFIDENTIAL: "confidential"}


def verification_state(row: dict[str, Any], required_tier: int, now: float | None = None) -> str:
    """'verified' (a tier recorded that has not run out), 'failed' or 'unverified'. A failed
    verification slashes the node, which jails it and clears its tier; where the config requires a
    tier, no unverified node holds a lease, so that is how it comes to be jailed with none."""
    now = time.time() if now is None else now
    if row["verification_tier"] and row["verified_until"] > now:
        return "verified"
    return "failed" if required_tier and row["jailed"] and not row["verification_tier"] else "unverified"


def verification_label(row: dict[str, Any], now: float | None = None) -> str:
    """'GPU until 2026-12-02 01:00:00 UTC (in 23h59m)', 'expired 2026-...', 'failed (jailed)' or 'unverified'."""
    if row.get("verification") == "failed":
        return "[red]failed[/] (jailed)"
    if not row["verification_tier"]:
        return "unverified"
    tier = _TIERS.get(row["verification_tier"], str(row["verification_tier"]))
    now = time.time() if now is None else now
    if row["verified_until"] <= now:
        return f"{tier}, expired {clock.at(row['verified_until'])}"
    return f"{tier} until {clock.until(row['verified_until'], now)}"


@app.command("register")
def register(
    node_keypair: Annotated[
        str,
        typer.Argument(
            help="The node's key: a name from `gpunet keys new-node` (under ~/.config/gpunet/nodes/) or a keypair file."
        ),
    ],
    gpu: Annotated[str, typer.Option("--gpu", autocompletion=complete_gpu, help="GPU model, e.g. H100, RTX4090.")],
    count: Annotated[int, typer.Option("--count", min=1, max=MAX_GPUS_PER_NODE, help="GPUs on the node.")],
    region: Annotated[
        str,
        typer.Option(
            "--region", autocompletion=complete_region, help=f"One of: {', '.join(catalog.REGIONS.values())}."
        ),
    ],
    price: Annotated[str, typer.Option("--price", help="IO per GPU-hour, e.g. 2.5.")],
    vram: Annotated[int | None, typer.Option("--vram", min=1, help="GiB per GPU (default: the model's).")] = None,
    inventory_hash: HashOpt = None,
    url: UrlOpt = None,
    keypair: KeypairOpt = DEFAULT_KEYPAIR,
    json_output: JsonOpt = False,
) -> None:
    """Register a node, offering its GPUs at a price.

    It bonds min-stake-per-GPU x GPUs of your free stake (`gpunet admin show`).
    Checked before anything is sent: too little free stake is refused (exit 4),
    and so is a node already registered, or deregistered and not released yet
    (exit 2)."""

    async def command(s: Session) -> None:
        model = catalog.gpu_model(gpu)
        spec = ix.NodeSpec(
            model.code,
            count,
            vram or model.vram_gb,
            catalog.region(region),
            parse_io(price),
            _inventory_hash(inventory_hash),
        )
        node_key = node_keypair_arg(node_keypair)
        me = s.wallet.pubkey()
        async with s.client() as client:
            config = await fetch_config(client)
            p = await fetch(client, provider_pda(me), "Provider")
            need = config.min_stake_per_gpu * count
            if p.staked - p.bonded < need:
                raise NotEnoughFunds(
                    f"{count} GPUs need {format_io(need)} of free stake, you have "
                    f"{format_io(p.staked - p.bonded)} (stake more with `gpunet provider stake`)"
                )
            if (await client.get_account_info(node_pda(node_key.pubkey()))).value is not None:
                # Registered, or deregistered and not released yet (its stake stays bonded a while).
                raise BadInput(
                    f"node {node_key.pubkey()} is already registered (`gpunet node list`); a deregistered node "
                    "is registered again only once released (`gpunet node release`)"
                )
            sig = await s.send(
                client, "Registering the node", [ix.register_node(me, node_key.pubkey(), spec)], [node_key]
            )
        s.done(
            f"node {node_key.pubkey()}: {count}x {model.name} {spec.vram_gb} GB in {catalog.region_name(spec.region)} "
            f"at {format_io(spec.price_per_gpu_hour)}/GPU-hour",
            sig,
            node=node_pda(node_key.pubkey()),
            node_key=node_key.pubkey(),
        )

    Session(url, keypair, json_output).run(command)


@app.command("update")
def update(
    node_key: NodeKeyArg,
    region: RegionOpt = None,
    price: PriceOpt = None,
    inventory_hash: HashOpt = None,
    url: UrlOpt = None,
    keypair: KeypairOpt = DEFAULT_KEYPAIR,
    json_output: JsonOpt = False,
) -> None:
    """Change a node's region, price or inventory hash."""

    async def command(s: Session) -> None:
        key = node_key_arg(node_key)
        if region is None and price is None and inventory_hash is None:
            raise BadInput("nothing to change: give --region, --price or --inventory-hash")
        async with s.client() as client:
            spec = (await fetch(client, node_pda(key), "Node")).spec
            new_region = catalog.region(region) if region is not None else spec.region
            new_price = parse_io(price) if price is not None else spec.price_per_gpu_hour
            new_hash = _inventory_hash(inventory_hash) if inventory_hash is not None else bytes(spec.inventory_hash)
            sig = await s.send(
                client, "Updating the node", [ix.update_node(s.wallet.pubkey(), key, new_region, new_price, new_hash)]
            )
        s.done(f"node {key} updated", sig)

    Session(url, keypair, json_output).run(command)


@app.command("deregister")
def deregister(
    node_key: NodeKeyArg, url: UrlOpt = None, keypair: KeypairOpt = DEFAULT_KEYPAIR, json_output: JsonOpt = False
) -> None:
    """Take an idle node off the market.

    Its bonded stake stays bonded, and slashable, for the unbonding period (at
    least the settlement window); `gpunet node release` frees it then. A node with
    GPUs on active leases is refused (exit 2)."""

    async def command(s: Session) -> None:
        key = node_key_arg(node_key)
        async with s.client() as client:
            n = await fetch(client, node_pda(key), "Node")
            if n.deregistered_at:
                raise BadInput(f"node {key} is already deregistered; `gpunet node release {key}` frees its stake")
            if n.gpus_leased:
                raise BadInput(f"node {key} has {n.gpus_leased} GPUs on active leases; deregister it once they end")
            sig = await s.send(client, "Deregistering the node", [ix.deregister_node(s.wallet.pubkey(), key)])
            n = await fetch(client, node_pda(key), "Node")
            bonded_until = n.deregistered_at + deregistered_bond_seconds(await fetch_config(client))
        s.done(
            f"node {key} deregistered: it takes no leases. Its {format_io(n.bonded_stake)} of stake stays bonded, "
            f"and slashable for faults found meanwhile, until {clock.until(bonded_until)}; then free it with "
            f"`gpunet node release {key}`",
            sig,
            bonded_stake=n.bonded_stake,
            bonded_until=bonded_until,
        )

    Session(url, keypair, json_output).run(command)


@app.command("release")
def release(
    node_key: NodeKeyArg, url: UrlOpt = None, keypair: KeypairOpt = DEFAULT_KEYPAIR, json_output: JsonOpt = False
) -> None:
    """Free a deregistered node's bonded stake and close its account.

    Only once the unbonding period since its deregistration has passed (before, it
    is refused, with the date: exit 2); a jailed node must be unjailed first."""

    async def command(s: Session) -> None:
        key = node_key_arg(node_key)
        async with s.client() as client:
            n = await fetch(client, node_pda(key), "Node")
            if not n.deregistered_at:
                raise BadInput(f"node {key} is registered; `gpunet node deregister {key}` first")
            bonded_until = n.deregistered_at + deregistered_bond_seconds(await fetch_config(client))
            if time.time() < bonded_until:
                raise BadInput(f"node {key}'s stake stays bonded until {clock.until(bonded_until)}; release it then")
            if n.jailed:
                raise BadInput(f"node {key} is jailed; `gpunet node unjail {key}` once its jail ends, then release it")
            sig = await s.send(client, "Releasing the node", [ix.release_node(s.wallet.pubkey(), key)])
        s.done(
            f"node {key} released; {format_io(n.bonded_stake)} of stake is free again",
            sig,
            released_stake=n.bonded_stake,
        )

    Session(url, keypair, json_output).run(command)


def _set_draining(node_key: str, draining: bool, url: str | None, keypair: Path | None, json_output: bool) -> None:
    async def command(s: Session) -> None:
        key = node_key_arg(node_key)
        async with s.client() as client:
            n = await fetch(client, node_pda(key), "Node")
            if n.provider != provider_pda(s.wallet.pubkey()):
                raise BadInput(f"node {key} belongs to provider {n.provider}, not to your wallet {s.wallet.pubkey()}")
            if n.draining == draining:
                raise BadInput(f"node {key} is {'already' if draining else 'not'} draining")
            sig = await s.send(
                client,
                "Draining the node" if draining else "Ending the node's maintenance",
                [ix.set_node_draining(s.wallet.pubkey(), key, draining)],
            )
        if draining:
            s.done(
                f"node {key} is draining: it gets no new leases and the coordinator moves the {n.gpus_leased} GPUs it "
                "holds to other nodes (no slash; what it delivered is paid); deregister it once it holds nothing",
                sig,
                gpus_leased=n.gpus_leased,
            )
        else:
            s.done(f"node {key} takes leases again", sig)

    Session(url, keypair, json_output).run(command)


@app.command("drain")
def drain(
    node_key: NodeKeyArg, url: UrlOpt = None, keypair: KeypairOpt = DEFAULT_KEYPAIR, json_output: JsonOpt = False
) -> None:
    """Announce a node's maintenance: it gets no new leases.

    The coordinator moves its running shares to spare nodes (resuming their jobs
    from the latest checkpoint) without any slash; what the node delivered is
    paid. Keep the worker running until `gpunet node list` shows it holds nothing.
    A share with no spare node stays where it is."""
    _set_draining(node_key, True, url, keypair, json_output)


@app.command("undrain")
def undrain(
    node_key: NodeKeyArg, url: UrlOpt = None, keypair: KeypairOpt = DEFAULT_KEYPAIR, json_output: JsonOpt = False
) -> None:
    """End a node's maintenance: it gets new leases again."""
    _set_draining(node_key, False, url, keypair, json_output)


@app.command("unjail")
def unjail(
    node_key: NodeKeyArg, url: UrlOpt = None, keypair: KeypairOpt = DEFAULT_KEYPAIR, json_output: JsonOpt = False
) -> None:
    """Take a node out of jail once its jail time has passed (it can then get leases again)."""

    async def command(s: Session) -> None:
        key = node_key_arg(node_key)
        async with s.client() as client:
            n = await fetch(client, node_pda(key), "Node")
            if not n.jailed:
                raise BadInput(f"node {key} is not jailed")
            if (wait := n.jail_ends_at - int(time.time())) > 0:
                raise BadInput(
                    f"node {key} stays jailed for {clock.span(wait)} more, until {clock.at(n.jail_ends_at)}; "
                    "unjail it then"
                )
            sig = await s.send(client, "Unjailing the node", [ix.unjail_node(s.wallet.pubkey(), key)])
        s.done(f"node {key} unjailed", sig)

    Session(url, keypair, json_output).run(command)


@app.command("list")
def list_nodes(
    provider: Annotated[
        str | None, typer.Option("--provider", help="Only this provider's nodes (its wallet or provider account).")
    ] = None,
    url: UrlOpt = None,
    commitment: CommitmentOpt = None,
    explorer: ExplorerOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Every registered node (or one provider's).

    Each with its GPUs, how many are leased, VRAM, region, price, state (ok,
    jailed, deregistered or draining) and verification: verified (its tier, and
    until when), unverified, or failed (jailed with its verification cleared,
    where the config requires a tier)."""

    async def command(s: Session) -> None:
        async with s.client() as client:
            of = (
                await resolve_provider(client, pubkey_arg(provider, "provider wallet or account")) if provider else None
            )
            where = {"provider": of.account} if of else {}
            rows = [node_row(a, n) for a, n in await program_accounts(client, "Node", **where)]
            required = (await fetch_config(client)).min_verification_tier
        for row in rows:
            row["verification"] = verification_state(row, required)

        def table() -> Table:
            t = Table(
                key_column("node key"),
                "GPUs",
                "leased",
                "VRAM",
                "region",
                "price/GPU-h",
                "state",
                "verified",
                title=f"{len(rows)} nodes" + (f" of {of.describe()}" if of else ""),
            )
            for r in rows:
                t.add_row(
                    s.link("address", r["node_key"]),
                    f"{r['gpu_count']}x {r['gpu_model']}",
                    str(r["gpus_leased"]),
                    f"{r['vram_gb']} GB",
                    r["region"],
                    format_io(r["price_per_gpu_hour"]),
                    "[red]jailed[/]"
                    if r["jailed"]
                    else "[dim]deregistered[/]"
                    if r["deregistered_at"]
                    else "[yellow]draining[/]"
                    if r["draining"]
                    else "ok",
                    verification_label(r),
                )
            return t

        s.show(rows, table)

    Session(url, json_output=json_output, commitment_flag=commitment, explorer_flag=explorer).run(command)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


@app.command("verifications")
def verifications(
    node: Annotated[str, typer.Argument(help="The node's key, its name (`gpunet keys new-node`) or its node account.")],
    coordinator: CoordinatorOpt = DEFAULT_COORDINATOR,
    json_output: JsonOpt = False,
) -> None:
    """A node's GPU verification history, newest first, as the coordinator keeps it.

    Each GPU's compute check and memory check (model it was sized for, the time
    expected of the model, deadline, how long the node took; for the memory check
    also the answer's deadline and time) and its verdict, with why. A real GPU of
    a model not calibrated yet that answers right after the deadline is too_slow:
    not slashed, not verified, checked again."""

    async def command(s: Session) -> None:
        key = node_key_arg(node)  # the coordinator takes the node account too
        found = await node_verifications(coordinator, key)
        rows = found["items"]

        def table() -> Table:
            t = Table("when", "GPU", "check", "model", "expected", "deadline", "took", "verdict", "why",
                      title=f"node {found['node_key']}")  # fmt: skip
            for r in rows:
                took = _seconds(r["committed_seconds"])
                deadline = _seconds(r["deadline_seconds"])
                if r.get("kind") == "memory" and r.get("answer_deadline_seconds") is not None:
                    took += f", answer {_seconds(r['answered_seconds'])}"  # the fill, then the answer
                    deadline += f", answer {_seconds(r['answer_deadline_seconds'])}"
                colour = {"passed": "green", "failed": "red"}.get(r["verdict"], "yellow")
                sim = " (simulated)" if r["simulated"] else ""
                t.add_row(r["at"], "-" if r["gpu_index"] is None else str(r["gpu_index"]), r.get("kind") or "node",
                          r["model"] + sim, _seconds(r.get("expected_seconds")), deadline, took,
                          f"[{colour}]{r['verdict']}[/]", r["reason"])  # fmt: skip
            return t

        s.show(rows, table)

    Session(None, json_output=json_output).run(command)
