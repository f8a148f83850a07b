"""`gpunet worker run|status|inventory|check|install|uninstall`: the supplier's side of a node."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import typer
from pydantic import ValidationError
from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from solana.exceptions import SolanaRpcException
from solana.rpc.async_api import AsyncClient
from solders.keypair import Keypair

from gpunet import logs
from gpunet.amounts import format_io
from gpunet.catalog import gpu_model, gpu_model_name, region_name
from gpunet.cluster import ClusterError, resolve_cluster
from gpunet.exits import Exit
from gpunet.json_input import NotJson, parse_json
from gpunet.keys import KeypairFileError, load_node_keypair, node_keypair_path
from gpunet.protocol import GpuTelemetry, Inventory
from worker.agent import Agent, SandboxUnavailable, StateDirUnusable, WorkerSettings
from worker.chain import fetch_node, fetch_node_leases
from worker.gpus import GpuBackend, GpusUnavailable, open_gpus
from worker.inventory_check import inventory_check
from worker.journal import Journal, JournalError
from worker.service import STATE_DIR, UNIT, UNIT_NAME, Service, ServiceError
from worker.service import install as install_service
from worker.service import uninstall as uninstall_service
from worker.session import NodeNotRegistered
from worker.simulate import SimulationSpecError
from worker.verify import Prover

__all__ = ["app"]

app = typer.Typer(help="Run a worker node and read its status.", no_args_is_help=True)
console = Console()
errors = Console(stderr=True)


KeypairOption = typer.Option(
    Path("~/.config/gpunet/node.json"),
    "--keypair",
    "-k",
    help="The node keypair file, or a name from `gpunet keys new-node` (~/.config/gpunet/nodes/NAME.json).",
)
SimulateOption = typer.Option(
    None,
    "--simulate-gpus",
    metavar="MODEL:COUNT:VRAM_GB",
    help="Simulated GPUs for a machine without an NVIDIA driver (marked simulated everywhere).",
)
StateDirOption = typer.Option(
    None, "--state-dir", help="Journal, job and checkpoint directories (default: ~/.local/state/gpunet-worker)."
)
UrlOption = typer.Option(
    None,
    "--url",
    "-u",
    envvar="GPUNET_RPC_URL",
    show_envvar=True,
    help="RPC URL or cluster name (localnet, devnet, testnet, mainnet), as for every gpunet command.",
)


def _fail(code: Exit, message: str) -> typer.Exit:
    errors.print(f"[red]error:[/] {message}")
    return typer.Exit(int(code))


def _node(keypair: Path) -> Keypair:
    try:
        return load_node_keypair(keypair)
    except KeypairFileError as e:
        raise _fail(Exit.KEYPAIR, str(e)) from None


def _gpus(simulate: str | None, node: Keypair) -> GpuBackend:
    try:
        return open_gpus(simulate, str(node.pubkey()))
    except SimulationSpecError as e:
        raise _fail(Exit.BAD_INPUT, str(e)) from None
    except GpusUnavailable as e:
        raise _fail(Exit.NO_GPUS, f"cannot start the worker: {e}") from None


def _rpc_url(url: str | None) -> str:
    try:
        return resolve_cluster(url).rpc_url
    except ClusterError as e:
        raise _fail(Exit.BAD_INPUT, str(e)) from None


def _settings(**overrides: Any) -> WorkerSettings:
    """Options given on the command line over GPUNET_WORKER_* variables over defaults."""
    try:
        return WorkerSettings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(map(str, err['loc']))}: {err['msg']}" for err in e.errors())
        raise _fail(Exit.BAD_INPUT, f"bad worker settings: {problems}") from None


@app.command("run")
def run(
    keypair: Path = KeypairOption,
    gateway: str = typer.Option(
        None,
        "--gateway",
        help="The coordinator's worker gateway (ws:// or wss://); with replicas, each replica's, comma-separated.",
    ),
    simulate_gpus: str = SimulateOption,
    state_dir: Path = StateDirOption,
    url: str = typer.Option(
        None,
        "--url",
        "-u",
        envvar="GPUNET_RPC_URL",
        show_envvar=True,
        help="RPC URL or cluster name: check the node's registration at start-up, and read a lease's client on "
        "chain before letting anyone into its job (shells, forwards: without it nobody is let in) "
        "[GPUNET_WORKER_RPC_URL too].",
    ),
    usage_period: int = typer.Option(
        None, "--usage-period", help="Seconds between the usage receipts sent, until the coordinator says."
    ),
    api: str = typer.Option(
        None,
        "--api",
        help="The coordinator's API (http:// or https://): checkpoints of any size go to its checkpoint store, "
        "encrypted under the lease's key the client seals to this node (GPUNET_WORKER_API_URL); without it only "
        "checkpoints up to 512 KiB of leases whose client sealed no key move between nodes.",
    ),
    allow_host_jobs: bool = typer.Option(
        None,
        "--allow-host-jobs",
        help="Run jobs without an image (and no --default-image) as host processes inside bubblewrap "
        "[GPUNET_WORKER_ALLOW_HOST_JOBS; default: containers only].",
    ),
    default_image: str = typer.Option(
        None, "--default-image", help="The container image of a job that names none [GPUNET_WORKER_DEFAULT_IMAGE]."
    ),
    network: str = typer.Option(
        None,
        "--network",
        metavar="none|egress|cluster",
        help="The jobs' network: none; egress (outbound to the internet: a container job cannot reach "
        "private or link-local addresses, the cloud metadata endpoint among them, nor this machine); cluster "
        "(only multi-node leases' jobs get the network) [GPUNET_WORKER_NETWORK; default egress].",
    ),
    egress_allow: list[str] = typer.Option(
        None,
        "--egress-allow",
        metavar="CIDR",
        help="A private address or CIDR egress container jobs may reach nevertheless, e.g. your LAN's dataset "
        "server (repeatable) [GPUNET_WORKER_EGRESS_ALLOW, a JSON list].",
    ),
    egress_unfiltered: bool = typer.Option(
        None,
        "--egress-unfiltered",
        help="Do not filter egress: jobs reach everything this machine reaches, your LAN, the machine itself "
        "and a cloud machine's metadata endpoint (its credentials) included; only where the filter cannot be "
        "installed (it needs root, rootful podman and nftables) [GPUNET_WORKER_EGRESS_UNFILTERED].",
    ),
    host_job_path: list[Path] = typer.Option(
        None,
        "--host-job-path",
        help="A path host jobs may read (repeatable; besides the system directories and Python) "
        "[GPUNET_WORKER_HOST_JOB_PATHS, a JSON list].",
    ),
    advertise_addr: str = typer.Option(
        None,
        "--advertise-addr",
        help="The address this node's cluster peers reach it at (MASTER_ADDR, the Ray head's) "
        "[GPUNET_WORKER_ADVERTISE_ADDR; default: the address of the interface that routes to the gateway].",
    ),
    tunnel_port: int = typer.Option(
        None,
        "--tunnel-port",
        help="The port at the advertised address where clients reach this node's jobs directly (shells, "
        "forwards; 0: any free port), before they try the coordinator's relay [GPUNET_WORKER_TUNNEL_PORT; "
        "default: through the relay only].",
    ),
    cluster_ports: str = typer.Option(
        None,
        "--cluster-ports",
        metavar="FIRST-LAST",
        help="The ports this node opens to its cluster peers (MASTER_PORT is the first; a Ray node uses "
        "them all) [GPUNET_WORKER_CLUSTER_PORTS; default 29500-29599].",
    ),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Debug logging."),
    log_format: str = typer.Option(None, "--log-format", metavar="json|human", help=logs.FORMAT_HELP),
) -> None:
    """Run the agent: inventory the GPUs, connect to the coordinator, run jobs, report usage."""
    try:
        logs.configure(log_format, logging.DEBUG if verbose else logging.INFO)
    except ValueError as e:
        raise _fail(Exit.BAD_INPUT, str(e)) from None
    settings = _settings(
        gateway_url=gateway,
        state_dir=state_dir,
        usage_period_seconds=usage_period,
        api_url=api,
        allow_host_jobs=allow_host_jobs,
        default_image=default_image,
        network=network,
        egress_allow=egress_allow or None,
        egress_unfiltered=egress_unfiltered,
        host_job_paths=host_job_path or None,
        advertise_addr=advertise_addr,
        cluster_ports=cluster_ports,
        tunnel_port=tunnel_port,
    )
    rpc_url = _rpc_url(url) if url else settings.rpc_url
    settings.rpc_url = rpc_url
    node = _node(keypair)
    gpus = _gpus(simulate_gpus, node)
    if rpc_url:
        asyncio.run(_check_registration(rpc_url, node, gpus.inventory(), settings.state_dir))
    try:
        agent = Agent(settings, node, gpus)
    except (JournalError, StateDirUnusable) as e:
        raise _fail(Exit.WORKER_STATE, str(e)) from None
    except SandboxUnavailable as e:
        raise _fail(Exit.NO_SANDBOX, f"cannot start the worker: {e}") from None
    kind = "simulated" if gpus.simulated else "NVML"
    errors.print(f"worker {node.pubkey()}: {len(gpus.inventory().gpus)} {kind} GPU(s), gateway {settings.gateway_url}")
    asyncio.run(_run_until_signalled(agent))


async def _run_until_signalled(agent: Agent) -> None:
    task = asyncio.create_task(agent.run())
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)  # jobs get SIGTERM and their grace period
    try:
        await task
    except asyncio.CancelledError:
        pass
    except NodeNotRegistered as e:
        raise _fail(Exit.NOT_REGISTERED, str(e)) from None
    finally:
        agent.close()
        agent.gpus.close()


async def _check_registration(rpc_url: str, node: Keypair, inventory: Inventory, state_dir: Path) -> None:
    """Compares the inventory with the node's on-chain registration and says what differs."""
    state_dir.mkdir(parents=True, exist_ok=True)
    (state_dir / "inventory.json").write_text(inventory.model_dump_json(indent=2))
    try:
        async with AsyncClient(rpc_url) as client:
            record = await fetch_node(client, node.pubkey())
    except (SolanaRpcException, OSError, ValueError) as e:  # an RPC node we cannot read is never fatal here
        errors.print(f"[yellow]warning:[/] cannot read the node's registration from {rpc_url}: {e}")
        return
    if record is None:
        errors.print(
            f"[yellow]warning:[/] node key {node.pubkey()} is not registered on chain "
            "(`gpunet node register`); the coordinator will not admit it"
        )
        return
    registered = bytes(record.node.spec.inventory_hash)
    saved = state_dir / "inventory.registered.json"
    if registered == inventory.hash():
        saved.write_text(inventory.model_dump_json(indent=2))
        return
    errors.print(
        f"[yellow]warning:[/] inventory hash {inventory.hash().hex()} differs from the registered {registered.hex()}"
    )
    if saved.exists() and (old := Inventory.model_validate_json(saved.read_text())).hash() == registered:
        for line in inventory.differences(old):
            errors.print(f"  {line}")
    elif registered == bytes(32):
        errors.print("  the node was registered without an inventory hash")
    else:
        errors.print(
            "  (no copy of the registered inventory here to compare fields; `gpunet worker inventory` "
            "prints the current one)"
        )


@app.command("install")
def install(
    keypair: Path = KeypairOption,
    gateway: str = typer.Option(
        ..., "--gateway", help="The coordinator's worker gateway (ws:// or wss://; replicas' comma-separated)."
    ),
    url: str = UrlOption,
    simulate_gpus: str = SimulateOption,
    setting: list[str] = typer.Option(
        None,
        "--set",
        metavar="GPUNET_WORKER_NAME=VALUE",
        help="Any other worker setting for the service's environment file (repeatable), e.g. "
        "GPUNET_WORKER_API_URL=https://coordinator.example.",
    ),
    root: Path = typer.Option(
        Path("/"), "--root", help="Write the files under this directory instead of / (they are not started then)."
    ),
    start: bool = typer.Option(True, "--start/--no-start", help="Enable and start the service with systemctl."),
) -> None:
    """Install the worker as a systemd service: the unit gpunet-worker.service and its environment
    file /etc/gpunet/worker.env, enabled and started (restarted on failure, started at boot)."""
    node = _node(keypair)  # a bad key is refused before anything is written
    settings = {"GPUNET_WORKER_GATEWAY_URL": gateway}
    if url:
        settings["GPUNET_RPC_URL"] = _rpc_url(url)
    for item in setting or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise _fail(Exit.BAD_INPUT, f"--set {item!r}: expected GPUNET_WORKER_NAME=VALUE")
        settings[key] = value
    try:
        # the key's file, as `worker run -k` finds it (a name from `gpunet keys new-node`, or a path)
        service = Service(node_keypair_path(keypair).resolve(), settings, simulate_gpus)
    except ServiceError as e:
        raise _fail(Exit.BAD_INPUT, str(e)) from None
    written = install_service(service, root)
    for path in written:
        errors.print(f"wrote {path}")
    errors.print(f"node {node.pubkey()}: key {service.keypair}, journal and checkpoints in {STATE_DIR}")
    if root != Path("/") or not start:
        errors.print("not started: enable it with `systemctl daemon-reload && systemctl enable --now gpunet-worker`")
        return
    _systemctl(["daemon-reload"], ["enable", "--now", UNIT_NAME])
    errors.print("started: `systemctl status gpunet-worker`, its log with `journalctl -u gpunet-worker -f`")


@app.command("uninstall")
def uninstall(
    root: Path = typer.Option(Path("/"), "--root", help="Remove the files under this directory instead of /."),
) -> None:
    """Stop and remove the worker's systemd service; the node key, the journal and the checkpoints stay."""
    if root == Path("/") and (root / UNIT).exists():
        _systemctl(["disable", "--now", UNIT_NAME])
    removed = uninstall_service(root)
    if root == Path("/") and removed:
        _systemctl(["daemon-reload"])
    for path in removed:
        errors.print(f"removed {path}")
    if not removed:
        errors.print(f"no worker service under {root}: nothing removed")
    errors.print(f"kept: the node key and {STATE_DIR} (the usage journal, checkpoints)")


def _systemctl(*commands: list[str]) -> None:
    for command in commands:
        try:
            done = subprocess.run(["systemctl", *command], capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise _fail(Exit.SERVICE, f"systemctl {' '.join(command)}: {e} (does this machine run systemd?)") from None
        if done.returncode:
            raise _fail(
                Exit.SERVICE,
                f"systemctl {' '.join(command)} failed: {done.stderr.strip() or done.stdout.strip()} "
                "(the files are written; run it again as root, or see `journalctl -u gpunet-worker`)",
            )


@app.command("inventory")
def inventory(keypair: Path = KeypairOption, simulate_gpus: str = SimulateOption) -> None:
    """Print the GPU inventory and its hash (the value to register with `gpunet node register`)."""
    node = _node(keypair)
    gpus = _gpus(simulate_gpus, node)
    try:
        inv = gpus.inventory()
        print(json.dumps({"inventory_hash": inv.hash().hex(), "inventory": inv.model_dump(mode="json")}, indent=2))
    finally:
        gpus.close()


@app.command("check")
def check(
    keypair: Path = KeypairOption,
    simulate_gpus: str = SimulateOption,
    run_checks: bool = typer.Option(
        False, "--run", help="Answer a compute and a memory check on each GPU here and check the answers."
    ),
) -> None:
    """Say which verification backend each GPU would use; with --run, time its checks against the deadlines."""
    from worker.gpu.selfcheck import check_gpu

    node = _node(keypair)
    gpus = _gpus(simulate_gpus, node)
    try:
        inv = gpus.inventory()
    finally:
        gpus.close()
    prover = Prover(inv)
    table = Table(
        "GPU",
        "model",
        "verification backend",
        *(("check", "took", "expected", "deadline", "verdict") if run_checks else ()),
    )
    failed = False
    for gpu, backend in zip(inv.gpus, prover.backends, strict=True):
        name = backend.name or f"[red]none[/]: {escape(backend.refusal or '')}"
        if not run_checks or backend.name is None or not gpu.model:
            table.add_row(str(gpu.index), gpu.model or f"[yellow]not listed[/] ({escape(gpu.name)})", name)
            continue
        for i, found in enumerate(asyncio.run(check_gpu(prover, gpu.index, gpu_model(gpu.model)))):
            head = (str(gpu.index), gpu.model, name) if i == 0 else ("", "", "")
            if isinstance(found, str):
                failed = True
                table.add_row(*head, "", "", "", "", f"[red]refused[/]: {escape(found)}")
                continue
            late = found.seconds > found.deadline_seconds
            failed |= late or found.problem is not None
            verdict = (f"[red]wrong[/]: {escape(found.problem)}" if found.problem
                       else "[yellow]too slow[/]" if late else "[green]passes[/]")  # fmt: skip
            table.add_row(*head, found.check, f"{found.seconds:.2f} s", f"{found.expected_seconds:.2f} s",
                          f"{found.deadline_seconds:.2f} s", verdict)  # fmt: skip
    console.print(table)
    if failed:
        raise typer.Exit(int(Exit.CHECK_FAILED))


@app.command("status")
def status(
    keypair: Path = KeypairOption,
    simulate_gpus: str = SimulateOption,
    state_dir: Path = StateDirOption,
    url: str = UrlOption,
    json_output: bool = typer.Option(False, "--json", help="Print everything as one JSON object."),
    api: str = typer.Option(
        None,
        "--api",
        help="The coordinator's API: also show the GPU telemetry it last received from this node's agent "
        "(with its Xid error counts, which only the running agent keeps) [GPUNET_WORKER_API_URL].",
    ),
    watch: float = typer.Option(
        None,
        "--watch",
        metavar="SECONDS",
        min=0.2,
        help="Show the GPUs' telemetry live (and, with --api, the coordinator's), read again every SECONDS, "
        "until Ctrl-C.",
    ),
) -> None:
    """What the node sees, its registration and stake, its leases and its earnings."""
    node = _node(keypair)
    settings = _settings(state_dir=state_dir, api_url=api)
    if watch is not None:
        if json_output:
            raise _fail(Exit.BAD_INPUT, "--watch shows a live table; --json prints one report (choose one)")
        _watch(node, simulate_gpus, settings.api_url, watch)
        return
    _rpc_url(url)  # a bad --url is reported before anything else
    report: dict[str, Any] = {"node_key": str(node.pubkey())}
    inv: Inventory | None = None
    if settings.api_url is not None:
        report["coordinator_telemetry"] = _coordinator_telemetry(settings.api_url, node)
    try:
        # a one-off reading: no Xid count (the running agent's is in the coordinator's telemetry)
        gpus = open_gpus(simulate_gpus, str(node.pubkey()), watch_xids=False)
        inv = gpus.inventory()
        # read now, as a heartbeat would send it (the coordinator keeps the last one it received)
        report["telemetry"] = [sample.model_dump(mode="json") for sample in gpus.sample()]
        gpus.close()
        report["inventory"] = {"hash": inv.hash().hex(), **inv.model_dump(mode="json")}
    except (GpusUnavailable, SimulationSpecError) as e:
        report["inventory"] = {"error": str(e)}
    journal_path = settings.state_dir / "usage.jsonl"
    leases: dict[str, dict[str, Any]] = {}
    if journal_path.exists():
        try:
            journal = Journal(journal_path, read_only=True)  # the agent may be writing it right now
        except JournalError as e:
            raise _fail(Exit.WORKER_STATE, str(e)) from None
        for (lease, epoch), message in journal.receipts.items():  # the newest receipt of each share
            entry = leases.setdefault(lease, {"receipts": 0, "acked": 0, "receipt_gpu_seconds": 0})
            entry["receipts"] += 1
            entry["acked"] += (lease, epoch) in journal.acked
            entry["receipt_gpu_seconds"] += message.gpu_seconds
    report["leases"] = leases
    report["chain"] = asyncio.run(_chain_status(_rpc_url(url), node, leases))
    if report["chain"].get("registered"):
        report["inventory_check"] = inventory_check(
            str(node.pubkey()),
            inv,
            report["inventory"].get("error"),
            report["chain"],
            _registered_copy(settings.state_dir),
        )
    if json_output:
        print(json.dumps(report, indent=2))
    else:
        _print_status(report)


async def _chain_status(rpc_url: str, node: Keypair, leases: dict[str, dict[str, Any]]) -> dict[str, Any]:
    try:
        async with AsyncClient(rpc_url) as client:
            record = await fetch_node(client, node.pubkey())
            if record is None:
                return {"registered": False}
            spec, provider = record.node.spec, record.provider
            # every lease listing this node on chain joins those it journaled usage for
            for share in await fetch_node_leases(client, node.pubkey()):
                entry = leases.setdefault(share.lease, {"receipts": 0, "acked": 0, "receipt_gpu_seconds": 0})
                entry |= {
                    "status": share.status,
                    "gpus": share.gpus,
                    "price_per_gpu_hour": share.price_per_gpu_hour,
                    "epoch": share.epoch,
                    "settled_until": share.settled_until,
                    "settled_gpu_seconds": share.settled_gpu_seconds,
                    "settled_gross": share.settled_gpu_seconds * share.price_per_gpu_hour // 3600,
                }
    except (SolanaRpcException, OSError, ValueError) as e:  # shown: the local half is still worth printing
        return {"error": f"cannot read {rpc_url}: {e}"}
    return {
        "registered": True,
        "gpu_model": gpu_model_name(spec.gpu_model),
        "gpu_count": spec.gpu_count,
        "vram_gb": spec.vram_gb,
        "region": region_name(spec.region),
        "price_per_gpu_hour": spec.price_per_gpu_hour,
        "inventory_hash": bytes(spec.inventory_hash).hex(),
        "gpus_leased": record.node.gpus_leased,
        "jailed": record.node.jailed,
        "bonded_stake": record.node.bonded_stake,
        "provider": {
            "staked": provider.staked,
            "bonded": provider.bonded,
            "unbonding": provider.unbonding,
            "slashed": provider.slashed,
        },
    }


def _registered_copy(state_dir: Path) -> Inventory | None:
    """The inventory the agent saved when it last matched the chain (see _check_registration)."""
    try:
        return Inventory.model_validate_json((state_dir / "inventory.registered.json").read_text())
    except (OSError, ValueError):
        return None


def _coordinator_telemetry(api_url: str, node: Keypair) -> dict[str, Any]:
    """The coordinator's last heartbeat of this node (GET /nodes/{key}/telemetry), or why there is none."""
    url = f"{api_url.rstrip('/')}/nodes/{node.pubkey()}/telemetry"
    try:
        answer = httpx.get(url, timeout=10)
    except httpx.HTTPError as e:
        return {"error": f"cannot reach the coordinator at {api_url}: {type(e).__name__}: {e}"}
    try:
        body = parse_json(answer.content)
    except NotJson:
        body = {}
    if answer.status_code != 200 or not isinstance(body, dict) or not isinstance(body.get("gpus"), list):
        why = body.get("error") if isinstance(body, dict) else None
        return {"error": f"the coordinator answered {answer.status_code}: {why or answer.text[:200]}"}
    return body


def _telemetry_line(t: dict[str, Any]) -> str:
    """One GPU's telemetry sample for a terminal; a figure the GPU does not report is left out."""
    parts = [
        f"{t[field]}{unit}"
        for field, unit in (
            ("utilization_pct", "% busy"),
            ("memory_used_mib", " MiB used"),
            ("temperature_c", " C"),
            ("power_w", " W"),
            ("ecc_uncorrected", " uncorrected ECC errors"),
            ("ecc_corrected", " corrected"),
        )
        if t.get(field) is not None
    ]
    if t.get("ecc_uncorrected_aggregate") is not None:
        parts.append(
            f"lifetime {t['ecc_uncorrected_aggregate']} uncorrected, {t.get('ecc_corrected_aggregate')} corrected"
        )
    if t.get("xid_errors") is not None:
        last = f" (last: Xid {t['last_xid']})" if t.get("last_xid") is not None else ""
        parts.append(f"{t['xid_errors']} Xid errors{last}")
    health = "[green]healthy[/]" if t["healthy"] else f"[red]unhealthy[/] ({escape('; '.join(t['problems']))})"
    throttled = f", throttled: {', '.join(t['throttle_reasons'])}" if t["throttle_reasons"] else ""
    return f"{health}, {', '.join(parts)}{throttled}"


def _print_status(report: dict[str, Any]) -> None:
    console.print(f"[bold]node[/] {report['node_key']}")
    inv = report["inventory"]
    if "error" in inv:
        console.print(f"  GPUs: [red]{inv['error']}[/]")
    else:
        tag = " [yellow](simulated)[/]" if inv["simulated"] else ""
        console.print(
            f"  driver {inv['driver_version']}, CUDA {inv['cuda_version']}{tag}; inventory hash {inv['hash']}"
        )
        for g in inv["gpus"]:
            console.print(
                f"  GPU {g['index']}: {g['name']} ({g['model'] or 'not listed'}), {g['vram_mib']} MiB, "
                f"cc {g['compute_capability']}, PCIe gen {g['pcie_gen']} x{g['pcie_width']}, {g['power_limit_w']} W  "
                f"[dim]{g['uuid']}[/]"
            )
        for i, t in enumerate(report.get("telemetry", [])):
            console.print(f"  GPU {i} now: {_telemetry_line(t)}")
    if (heard := report.get("coordinator_telemetry")) is not None:
        if "error" in heard:
            console.print(f"  coordinator: [red]{escape(heard['error'])}[/]")
        else:
            state = "connected" if heard["connected"] else "[red]not connected[/]"
            console.print(f"  coordinator: {state}, last heartbeat at {_when(heard['received_at'])}")
            for i, t in enumerate(heard["gpus"]):
                console.print(f"  GPU {i} as the coordinator heard it: {_telemetry_line(t)}")
    chain = report["chain"]
    if "error" in chain:
        console.print(f"  registration: [red]{chain['error']}[/]")
    elif not chain["registered"]:
        console.print("  registration: [red]not registered[/] (`gpunet node register`)")
    else:
        check = report["inventory_check"]
        verdict = {
            "unread": "[yellow]not checked[/]",
            "no_hash_registered": "[yellow]no hash registered[/]",
            "matches": "[green]matches[/]",
            "differs": "[red]differs[/]",
        }[check["state"]]
        console.print(
            f"  registered: {chain['gpu_count']}x {chain['gpu_model']} {chain['vram_gb']} GB in {chain['region']} at "
            f"{format_io(chain['price_per_gpu_hour'])}/GPU-hour; {chain['gpus_leased']} GPU(s) leased"
            f"{'; [red]JAILED[/]' if chain['jailed'] else ''}; inventory {verdict}"
        )
        for line in check["detail"]:
            console.print(f"    {escape(line)}", soft_wrap=True)
        p = chain["provider"]
        console.print(
            f"  stake: {format_io(p['staked'])} ({format_io(p['bonded'])} bonded, "
            f"{format_io(p['unbonding'])} unbonding, "
            f"{format_io(p['slashed'])} slashed)"
        )
    table = Table(title="leases (newest receipts from the usage journal; settled figures from the chain)")
    for column in ("lease", "status", "GPUs", "receipts", "acked", "GPU-s signed", "GPU-s settled", "settled (gross)"):
        table.add_column(column, justify="left" if column == "lease" else "right")
    for lease, e in report["leases"].items():
        table.add_row(
            lease,
            e.get("status", "-"),
            str(e.get("gpus", "-")),
            str(e["receipts"]),
            str(e["acked"]),
            str(e["receipt_gpu_seconds"]),
            str(e.get("settled_gpu_seconds", "-")),
            format_io(e["settled_gross"]) if "settled_gross" in e else "-",
        )
    console.print(table)


def _when(unix: float) -> str:
    return datetime.fromtimestamp(unix, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _gpu_table(node: Keypair, samples: list[GpuTelemetry], heard: dict[str, Any] | None) -> Table:
    """The live view: each GPU read now, with the Xid counts of the coordinator's last heartbeat (the
    running agent's) when there is one."""
    xids = {g["uuid"]: g for g in heard.get("gpus", [])} if heard and "error" not in heard else {}
    if heard is None:
        caption = "Xid errors: give --api (the running agent counts them, the coordinator shows them)"
    elif "error" in heard:
        caption = escape(heard["error"])
    else:
        caption = f"coordinator's last heartbeat: {_when(heard['received_at'])}"
    table = Table(title=f"node {node.pubkey()}: GPUs now ({datetime.now(UTC):%H:%M:%S} UTC)", caption=caption)
    for column in ("GPU", "health", "busy", "memory", "temp", "power", "ECC uncorr.", "ECC corr.", "Xid", "last Xid"):
        table.add_column(column, justify="left" if column in ("GPU", "health") else "right")

    def figure(value: Any, unit: str = "") -> str:
        return "-" if value is None else f"{value}{unit}"

    for i, t in enumerate(samples):
        xid = xids.get(t.uuid, {})
        table.add_row(
            str(i),
            "[green]healthy[/]" if t.healthy else f"[red]{escape('; '.join(t.problems) or 'unhealthy')}[/]",
            figure(t.utilization_pct, "%"),
            figure(t.memory_used_mib, " MiB"),
            figure(t.temperature_c, " C"),
            figure(t.power_w, " W"),
            f"{figure(t.ecc_uncorrected)} / {figure(t.ecc_uncorrected_aggregate)}",
            f"{figure(t.ecc_corrected)} / {figure(t.ecc_corrected_aggregate)}",
            figure(xid.get("xid_errors")),
            figure(xid.get("last_xid")),
        )
    return table


def _watch(node: Keypair, simulate: str | None, api_url: str | None, every: float) -> None:
    """`status --watch`: the GPU table, read again every `every` seconds until Ctrl-C (or SIGTERM)."""
    gpus = _gpus(simulate, node)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # stopped like Ctrl-C: the last table stays

    def table() -> Table:
        heard = _coordinator_telemetry(api_url, node) if api_url is not None else None
        return _gpu_table(node, gpus.sample(), heard)

    try:
        with Live(table(), console=console, auto_refresh=False) as live:
            try:  # from the line that says so: a stop right after it still ends cleanly
                errors.print(f"watching node {node.pubkey()}'s GPUs every {every:g} s; Ctrl-C to stop")
                while True:
                    time.sleep(every)
                    live.update(table(), refresh=True)
            except KeyboardInterrupt:
                live.update(table(), refresh=True)  # the state as it stopped
    finally:
        gpus.close()
