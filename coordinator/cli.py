"""`gpunet coordinator run|index|api|migrate|audit|calibrate|...` (also `python -m coordinator ...`)."""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import json
import signal
import socket
from collections.abc import Awaitable, Callable

import asyncpg
import httpx
import typer
import uvicorn
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table
from solana.exceptions import SolanaRpcException
from solana.rpc.async_api import AsyncClient
from solders.keypair import Keypair

from coordinator.api import create_app
from coordinator.api.params import BadRequest, parse_pubkey
from coordinator.api.work import work_routes
from coordinator.attester import require_listed
from coordinator.audit import NotFound, audit_lease, audit_provider
from coordinator.calibration import (
    MIN_MEASUREMENTS,
    MIN_NODES,
    MIN_SUPPLIERS,
    PER_NODE,
    PERCENTILE,
    Proposal,
    percentile,
    propose,
)
from coordinator.db import SchemaTooNew, calibrations, open_database
from coordinator.indexer import Indexer
from coordinator.indexer.rpc import ChainRpc, RpcError
from coordinator.indexer.service import ChainMismatch
from coordinator.payers import balances, fee_payer_keys
from coordinator.service import Coordinator, DatabaseLost
from coordinator.settings import Settings, settings_help
from gpunet import logs
from gpunet.accounts import AccountError, fetch_config
from gpunet.catalog import CatalogError, gpu_model
from gpunet.exits import Exit
from gpunet.jobs import CoordinatorError, resume_slashing
from gpunet.keys import KeypairFileError, load_keypair
from gpunet.logs import get_logger

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="The coordinator: chain indexer, PostgreSQL ledger, worker gateway, scheduler, settlement and API "
    "(settings: GPUNET_* variables).",
)


log = get_logger("gpunet.coordinator")

# `--help` of each command that runs the service lists every setting, generated from Settings.
_SETTINGS_EPILOG = "Settings (environment variables, all optional):\n\n" + settings_help()


def _rpc_unreachable(e: BaseException) -> bool:
    """The chain's RPC node did not answer (connection refused, timed out, DNS), as opposed to an answer."""
    if isinstance(e, (SolanaRpcException, httpx.HTTPError)):
        return True
    return isinstance(e, RpcError) and isinstance(e.__cause__, httpx.HTTPError)


_LOG_FORMAT = typer.Option(None, "--log-format", metavar="json|human", help=logs.FORMAT_HELP)


def _serve(main: Callable[[Settings], Awaitable[object]], log_format: str | None = None) -> None:
    """Runs `main` until it ends or SIGTERM/SIGINT, then shuts down (the embedded PostgreSQL too)."""
    try:
        logs.configure(log_format)
    except ValueError as e:
        typer.echo(f"coordinator: {e}", err=True)
        raise typer.Exit(int(Exit.BAD_INPUT)) from None
    try:
        settings = Settings()
    except ValidationError as e:
        problems = "; ".join(f"GPUNET_{'_'.join(map(str, err['loc'])).upper()}: {err['msg']}" for err in e.errors())
        typer.echo(f"coordinator: bad setting: {problems}", err=True)
        raise typer.Exit(int(Exit.BAD_INPUT)) from None

    async def guarded() -> None:
        task = asyncio.ensure_future(main(settings))
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, task.cancel)
        try:
            await task
        except asyncio.CancelledError:
            pass

    try:
        asyncio.run(guarded())
    except (SchemaTooNew, ChainMismatch, AccountError) as e:
        typer.echo(f"coordinator: {e}", err=True)
        raise typer.Exit(int(Exit.BAD_INPUT)) from None
    except DatabaseLost as e:
        typer.echo(f"coordinator: {e}", err=True)
        raise typer.Exit(int(Exit.UNREACHABLE)) from None
    except NotFound as e:
        typer.echo(f"coordinator: {e}", err=True)
        raise typer.Exit(int(Exit.NOT_FOUND)) from None
    except (SolanaRpcException, httpx.HTTPError, RpcError) as e:
        if not _rpc_unreachable(e):
            raise
        cause = e.__cause__ or e
        typer.echo(
            f"coordinator: cannot reach the chain's RPC node at {settings.rpc_url} (GPUNET_RPC_URL): "
            f"{type(cause).__name__}: {cause}. Start a local node (`gpunet localnet`) or set GPUNET_RPC_URL "
            "and GPUNET_WS_URL to a node that answers.",
            err=True,
        )
        raise typer.Exit(int(Exit.UNREACHABLE)) from None


async def _api_server(settings: Settings, pool: asyncpg.Pool, coordinator: Coordinator | None = None) -> None:
    rpc = ChainRpc(settings.rpc_url, settings.commitment)
    app = create_app(pool, rpc, settings, work_routes(coordinator) if coordinator else (), coordinator)
    # log_config=None: uvicorn's records go to the root handler (gpunet.logs), rendered as ours are.
    config = uvicorn.Config(
        app, host=settings.api_host, port=settings.api_port, log_level="warning", lifespan="off", log_config=None
    )
    log.info("api.serving", url=f"http://{settings.api_host}:{settings.api_port}")
    try:
        await uvicorn.Server(config).serve()
    finally:
        await rpc.close()


async def _check_attester(settings: Settings, attester: Keypair) -> None:
    """Before anything starts: the attester key must be listed in the config. The hint adds it to the
    others (`--add-attester`): replacing the list would cut off a coordinator already running."""
    try:
        async with AsyncClient(settings.rpc_url) as client:
            config = await fetch_config(client)
    except (SolanaRpcException, httpx.HTTPError, OSError):
        return  # the coordinator reports an unreachable node itself, as it always has
    require_listed(config, attester.pubkey(), settings.attester_keypair)


@app.command(epilog=_SETTINGS_EPILOG)
def run(log_format: str = _LOG_FORMAT) -> None:
    """The whole coordinator: indexer, worker gateway, scheduler, failover, settlement and the API."""
    settings_path = Settings().attester_keypair.expanduser()
    try:
        attester = load_keypair(settings_path)
    except KeypairFileError as e:
        typer.echo(f"coordinator: the attester keypair: {e} (set GPUNET_ATTESTER_KEYPAIR)", err=True)
        raise typer.Exit(int(Exit.KEYPAIR)) from None

    async def main(settings: Settings) -> None:
        await _check_attester(settings, attester)
        async with open_database(settings) as pool:
            coordinator = await Coordinator(settings, pool, attester).start()
            api = asyncio.ensure_future(_api_server(settings, pool, coordinator))
            try:
                await asyncio.wait([api, coordinator.fatal], return_when=asyncio.FIRST_COMPLETED)
                if coordinator.fatal.done():
                    coordinator.fatal.result()  # raises what stopped it
            finally:
                api.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await api
                await coordinator.stop()

    _serve(main, log_format)


@app.command(epilog=_SETTINGS_EPILOG)
def index(log_format: str = _LOG_FORMAT) -> None:
    """Index the chain into the ledger only (no placement, no settlement)."""

    async def main(settings: Settings) -> None:
        async with open_database(settings) as pool:
            await Indexer(settings, pool).run()

    _serve(main, log_format)


@app.command(epilog=_SETTINGS_EPILOG)
def api(log_format: str = _LOG_FORMAT) -> None:
    """Serve the read API only (over a ledger another process indexes)."""

    async def main(settings: Settings) -> None:
        async with open_database(settings) as pool:
            await _api_server(settings, pool)

    _serve(main, log_format)


@app.command(epilog=_SETTINGS_EPILOG)
def migrate() -> None:
    """Apply the schema migrations and exit."""

    async def main(settings: Settings) -> None:
        async with open_database(settings):
            pass

    _serve(main)


@app.command()
def audit(
    lease: str = typer.Option(None, help="lease account"),
    provider: str = typer.Option(None, help="provider: its supplier's wallet or its provider account"),
) -> None:
    """Check a lease or a provider against the chain; exit 1 on any difference, 6 when neither the
    ledger nor the chain knows it."""
    if (lease is None) == (provider is None):
        typer.echo("coordinator audit: give exactly one of --lease or --provider", err=True)
        raise typer.Exit(int(Exit.BAD_INPUT))
    try:
        subject = parse_pubkey("lease" if lease else "provider", lease or provider)
    except BadRequest as e:
        typer.echo(f"coordinator audit: {e}", err=True)
        raise typer.Exit(int(Exit.BAD_INPUT)) from None
    result: dict[str, object] = {}

    async def main(settings: Settings) -> None:
        rpc = ChainRpc(settings.rpc_url, settings.commitment)
        try:
            async with open_database(settings) as pool, pool.acquire() as conn:
                check = audit_lease if lease else audit_provider
                result.update((await check(conn, rpc, settings.program, subject)).to_json())
        finally:
            await rpc.close()

    _serve(main)
    typer.echo(json.dumps(result, indent=2))
    if not result.get("ok"):
        raise typer.Exit(1)


@app.command("fee-payers", epilog=_SETTINGS_EPILOG)
def fee_payers(json_output: bool = typer.Option(False, "--json", help="JSON instead of a table.")) -> None:
    """The pool of keys that pays the coordinator's transaction fees (GPUNET_FEE_PAYERS of them, in
    GPUNET_FEE_PAYER_DIR, made when missing): each address and its SOL balance, to fund them before
    (and while) the coordinator runs. A payer under GPUNET_FEE_PAYER_MIN_LAMPORTS is skipped."""
    settings = Settings()
    keys = fee_payer_keys(settings.fee_payer_path, settings.fee_payers)

    async def read() -> list[tuple[str, int]]:
        async with AsyncClient(settings.rpc_url) as client:
            return [(str(k), v) for k, v in await balances(client, keys)]

    try:
        rows = asyncio.run(read())
    except (SolanaRpcException, httpx.HTTPError, OSError) as e:
        typer.echo(f"coordinator fee-payers: cannot reach the RPC node at {settings.rpc_url}: {e}", err=True)
        raise typer.Exit(int(Exit.UNREACHABLE)) from None
    low = settings.fee_payer_min_lamports
    if json_output:
        payers = [{"address": a, "lamports": v, "funded": v >= low} for a, v in rows]
        typer.echo(json.dumps({"directory": str(settings.fee_payer_path), "min_lamports": low, "payers": payers}))
        return
    if not rows:
        typer.echo("no fee-payer pool (GPUNET_FEE_PAYERS=0): the attester pays the coordinator's fees")
        return
    typer.echo(f"fee payers in {settings.fee_payer_path} (each needs {low / 1e9:g} SOL or more to be used):")
    for address, lamports in rows:
        typer.echo(f"  {address}  {lamports / 1e9:>14.9f} SOL{'' if lamports >= low else '  (skipped: fund it)'}")


@app.command("resume-slashing")
def resume_slashing_command(
    region: str = typer.Option(None, help="only this region's pause (default: the fleet-wide one)"),
    coordinator_url: str = typer.Option(
        None, "--coordinator", help="the coordinator's API (default: http://127.0.0.1:$GPUNET_API_PORT)"
    ),
) -> None:
    """End a correlated-outage pause of slashing: you confirm the silent nodes are really lost, so
    they are judged now (signed with the coordinator's attester key, GPUNET_ATTESTER_KEYPAIR)."""
    settings = Settings()
    try:
        attester = load_keypair(settings.attester_keypair.expanduser())
    except KeypairFileError as e:
        typer.echo(f"coordinator resume-slashing: the attester keypair: {e} (set GPUNET_ATTESTER_KEYPAIR)", err=True)
        raise typer.Exit(int(Exit.KEYPAIR)) from None
    url = coordinator_url or f"http://127.0.0.1:{settings.api_port}"
    try:
        result = asyncio.run(resume_slashing(url, attester, region))
    except CoordinatorError as e:
        typer.echo(f"coordinator resume-slashing: {e}", err=True)
        raise typer.Exit(int(Exit.UNREACHABLE if "cannot reach" in str(e) else Exit.REFUSED)) from None
    typer.echo(f"slashing resumed for {result['resumed']}: its silent nodes are judged now")


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def _step(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 1e3:.3g} ms" if value >= 1e-3 else f"{value * 1e6:.3g} µs"


def _report(p: Proposal) -> Table:
    m = p.model
    t = Table(
        "check", "measured", "count", "nodes", "suppliers", "median", f"p{PERCENTILE}", f"p{100 - PERCENTILE}",
        "catalog's assumption", "in force", "would set",
        title=f"calibration of the {m.name} from its real GPUs' honest answers",
        caption=f"each node's latest {PER_NODE} of each check count ({p.ignored} older ones left out); "
        f"the value set is the slow end: the {PERCENTILE}th percentile efficiency, the {100 - PERCENTILE}th "
        "percentile step time",
    )  # fmt: skip
    for check, what, show in (
        (p.compute, f"efficiency (share of {m.fp16_tflops:g} TFLOP/s)", _share),
        (p.memory, "step time (per block of a lane)", _step),
    ):
        t.add_row(
            check.kind, what, str(len(check.measurements)), str(check.nodes), str(check.suppliers),
            show(check.at(50)), show(check.at(PERCENTILE)), show(check.at(100 - PERCENTILE)), show(check.assumed),
            show(check.current), "-" if check.problem else f"[bold]{show(check.proposed)}[/]",
        )  # fmt: skip
    return t


def _by_node(p: Proposal) -> Table:
    t = Table("node key", "supplier", "compute", "median efficiency", "memory", "median step", title="by node")
    for n in p.nodes:
        t.add_row(
            n.node_key, n.supplier, str(len(n.compute)), _share(percentile(n.compute, 50) if n.compute else None),
            str(len(n.memory)), _step(percentile(n.memory, 50) if n.memory else None),
        )  # fmt: skip
    return t


@app.command()
def calibrate(
    model: str = typer.Argument(..., help="the GPU model, by name (H100) or code"),
    apply: bool = typer.Option(
        False, "--apply", help="record the calibration, with who, when and the measurements (else: the report only)"
    ),
    by: str = typer.Option(None, "--by", help="who sets it, recorded with it (default: USER@HOST)"),
) -> None:
    """Calibrate a GPU model's verification deadlines from its real GPUs' recorded honest answers.

    Honest answers are checks passed or too slow, never failed; each node counts
    with its latest 5 of each check. The report gives, for the compute check's
    efficiency and the memory check's step time: how many measurements, of how
    many nodes and suppliers, their median, 10th and 90th percentile, the
    catalog's assumption, the value in force and the value it would set, at the
    slow end of the measurements (the 10th percentile efficiency, the 90th
    percentile step time); then, for each node, its supplier, how many
    measurements of each check it has and their medians.

    It records the calibration only with --apply, with who set it (--by), when and
    the measurements; it is in force from the next check of a GPU of the model.
    Refused (exit 1, nothing written) with too few measurements: at least 5 of
    each check are needed, from 2 nodes of 2 suppliers."""
    try:
        gpu = gpu_model(model)
    except CatalogError as e:
        typer.echo(f"coordinator calibrate: {e}", err=True)
        raise typer.Exit(int(Exit.BAD_INPUT)) from None
    found: list[Proposal] = []
    applied: list[calibrations.Calibration] = []
    set_by = by or f"{getpass.getuser()}@{socket.gethostname()}"

    async def main(settings: Settings) -> None:
        async with open_database(settings) as pool, pool.acquire() as conn:
            current = await calibrations.current(conn, gpu.name)
            proposal = propose(
                gpu,
                await calibrations.measurements(conn, gpu.name),
                None if current is None else current.efficiency,
                None if current is None else current.step_seconds,
            )
            found.append(proposal)
            if apply and not proposal.problems:
                assert proposal.compute.proposed is not None and proposal.memory.proposed is not None
                calibration = await calibrations.record(
                    conn, gpu.name, efficiency=proposal.compute.proposed, step_seconds=proposal.memory.proposed,
                    percentile=PERCENTILE, compute_samples=len(proposal.compute.measurements),
                    memory_samples=len(proposal.memory.measurements), nodes=proposal.node_count,
                    suppliers=proposal.supplier_count, sample=proposal.sample, set_by=set_by,
                )  # fmt: skip
                applied.append(calibration)

    _serve(main)
    [proposal] = found
    out = Console()
    out.print(_report(proposal))
    if proposal.nodes:
        out.print(_by_node(proposal))
    if proposal.problems:
        typer.echo(
            f"coordinator calibrate: the {gpu.name} cannot be calibrated yet: " + "; ".join(proposal.problems)
            + f". A calibration needs {MIN_MEASUREMENTS} measurements of each check or more, of {MIN_NODES} nodes "
            f"of {MIN_SUPPLIERS} suppliers or more (each node counts with its latest {PER_NODE}); meanwhile the "
            f"{gpu.name}'s right but late answers stay too slow, never failed.",
            err=True,
        )  # fmt: skip
        raise typer.Exit(int(Exit.REFUSED))
    if applied:
        c = applied[0]
        out.print(
            f"applied: calibration {c.id} of the {gpu.name} (efficiency {c.efficiency:.3g}, step time "
            f"{_step(c.step_seconds)}, from {len(c.sample)} measurements of {c.nodes} nodes), set by {c.set_by}: "
            f"in force from the next check of a {gpu.name}, whose missed deadline then fails."
        )
        return
    out.print(f"not applied: `gpunet coordinator calibrate {gpu.name} --apply` records it.")
