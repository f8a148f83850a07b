"""An in-place upgrade of the worker and the coordinator loses nothing. The Python code of an earlier
commit (BASE) runs the coordinator and the worker as processes on a gpunet-localnet node, a
PostgreSQL database and a worker state directory; a lease runs its checkpointing job on the node
while the old coordinator settles nothing (its receipts pending in its ledger and the worker's
journal). Both are stopped the way a service is stopped (SIGTERM), and this checkout's coordinator
and worker start on the same database, state directory, node key and ports: the pending receipts
are settled, the lease goes on with its job resumed from the checkpoint the old run wrote, and at
its end the lease is finalized with every GPU-second the worker's journal says it held paid, no
more, and every unit of the escrow accounted for.

The chain is not upgraded: the program, its IDL and the node are the same at BASE and here (the
test checks it), so one node serves both. BASE must be in the history (a shallow clone skips)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solders.pubkey import Pubkey

from gpunet.accounts import fetch
from gpunet.audit import audit_lease
from gpunet.jobs import job_view
from gpunet.keys import create_keypair_file
from gpunet.localnet import LocalnetProcess, free_ports
from tests.coordinator.conftest import eventually
from tests.coordinator.world import (
    PERIOD,
    PRICE,
    World,
    all_running,
    closed,
    cluster_env,
    placed_lease,
    settlement_events,
    steps_job,
)
from tests.worker.sandboxes import HOST_JOBS_ENV
from worker.journal import Journal

REPO = Path(__file__).resolve().parents[2]
# The install upgraded from: a commit whose program, IDL and node are this checkout's. Bump it to a
# commit after the last change of CHAIN when the test says so.
BASE = "0578dd90f63744c0eb61d77db5b47bfc6182d7be"
CHAIN = ("programs", "localnet", "gpunet/idl", "Cargo.toml", "Cargo.lock")
LEASE_SECONDS = 60  # from its start: the upgrade is done within half of it
# Every process of an install starts here: it says which code it loaded, then runs `gpunet ...`.
LAUNCH = (
    "import json, sys, coordinator, gpunet, worker; "
    "print('loaded ' + json.dumps({m.__name__: m.__file__ for m in (coordinator, gpunet, worker)}), flush=True); "
    "from gpunet.cli import main; sys.argv[0] = 'gpunet'; main()"
)


def _git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True)


@pytest.fixture
def old_tree(tmp_path: Path) -> Path:
    """BASE's tree (`git archive`: no worktree state left behind)."""
    if _git("cat-file", "-e", f"{BASE}^{{commit}}").returncode != 0:
        pytest.skip(f"needs the commit BASE ({BASE[:12]}) in the history (git fetch --unshallow)")
    changed = _git("diff", "--name-only", BASE, "--", *CHAIN)
    assert changed.returncode == 0, changed.stderr
    assert not changed.stdout.strip(), (
        f"the program, IDL or node changed since BASE {BASE[:12]}: {changed.stdout.split()}; this test runs BASE's "
        "install on this checkout's chain, so bump BASE to a commit after the last change of " + " ".join(CHAIN)
    )
    tree = tmp_path / "base"
    tree.mkdir()
    archive = subprocess.run(["git", "archive", BASE, "coordinator", "gpunet", "worker"], cwd=REPO, capture_output=True)
    assert archive.returncode == 0, archive.stderr.decode()
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    return tree


@pytest.fixture
async def chain(node: LocalnetProcess) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(node.url, commitment=Confirmed) as client:
        yield client


class Install:
    """One commit's Python code (`tree`) run as the coordinator and the worker: the venv's Python
    with the tree first on the path (before the venv's editable install of this checkout) and as
    the working directory."""

    def __init__(self, tree: Path, home: Path, name: str) -> None:
        self.tree, self.home, self.name = tree, home, name

    def start(self, args: list[str], env: dict[str, str], log: str) -> subprocess.Popen[bytes]:
        clean = {k: v for k, v in os.environ.items() if not k.startswith("GPUNET_")}
        with (self.home / f"{self.name}-{log}.log").open("ab") as out:
            return subprocess.Popen(
                [sys.executable, "-c", LAUNCH, *args],
                cwd=self.tree,
                env={**clean, "PYTHONPATH": str(self.tree), "PYTHONDONTWRITEBYTECODE": "1", **env},
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    async def start_market(
        self, api: str, coordinator_env: dict[str, str], worker_args: list[str], worker_env: dict[str, str]
    ) -> tuple[subprocess.Popen[bytes], subprocess.Popen[bytes]]:
        """The coordinator, once its API answers, then the worker (as a supplier's machine restarts)."""
        coordinator = self.start(["coordinator", "run"], coordinator_env, "coordinator")
        try:
            await eventually(
                lambda: asyncio.to_thread(_ready, api, coordinator), timeout=90, what=f"the {self.name} coordinator"
            )
        except BaseException:
            coordinator.kill()
            raise
        return coordinator, self.start(worker_args, worker_env, "worker")

    def loaded(self, log: str) -> dict[str, str]:
        """Where the process's coordinator, gpunet and worker packages came from (its first line)."""
        text = (self.home / f"{self.name}-{log}.log").read_text()
        line = next(line for line in text.splitlines() if line.startswith("loaded "))
        return json.loads(line.removeprefix("loaded "))


def _ready(api: str, proc: subprocess.Popen[bytes]) -> bool:
    assert proc.poll() is None, f"the coordinator exited with {proc.returncode}"
    try:
        with urllib.request.urlopen(f"{api}/health", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


async def _stop(proc: subprocess.Popen[bytes], what: str) -> None:
    """SIGTERM, as a service manager stops a service for an upgrade; it must exit by itself."""
    proc.send_signal(signal.SIGTERM)
    code = await asyncio.to_thread(proc.wait, 60)
    assert code == 0, f"the {what} exited with {code} on SIGTERM"


async def _share(chain: AsyncClient, lease: Pubkey) -> tuple[Any, Any]:
    """The lease account and its one share (decoded accounts: no static type)."""
    account = await fetch(chain, lease, "Lease")
    assert account.node_count == 1
    return account, account.assignments[0]


async def _pending(database_url: str, lease: Pubkey) -> int:
    """The GPU-seconds of the share's newest receipt the coordinator holds unsettled (0: none)."""
    conn = await asyncpg.connect(database_url)
    try:
        value = await conn.fetchval(
            "SELECT gpu_seconds FROM usage_receipts WHERE lease = $1 AND status = 'pending'", str(lease)
        )
    finally:
        await conn.close()
    return int(value or 0)


async def _at_least(value: Awaitable[int], least: int) -> bool:
    return await value >= least


async def _line(api: str, world: World, lease: Pubkey, prefix: str) -> str | None:
    after = 0
    while logs := (await job_view(api, world.client, lease, after))["logs"]:
        for line in logs:
            if (line["line"] or "").startswith(prefix):
                return line["line"]
        after = logs[-1]["id"]
    return None


@pytest.mark.timeout(240)
async def test_an_upgrade_in_place_settles_the_pending_receipts_and_the_lease_goes_on(
    node: LocalnetProcess,
    chain: AsyncClient,
    database_url: str,
    old_tree: Path,
    tmp_path: Path,
    spawned: list[subprocess.Popen[bytes]],
) -> None:
    world = await World().build(chain, tmp_path, nodes=1)  # one 2-GPU node: the lease has nowhere else to go
    [node_key] = world.node_keys()
    attester = tmp_path / "attester.json"
    create_keypair_file(attester, world.admin)
    api_port, gateway_port = free_ports(2)
    api = f"http://127.0.0.1:{api_port}"
    coordinator_env = {
        "GPUNET_RPC_URL": node.url,
        "GPUNET_WS_URL": node.ws_url,
        "GPUNET_DATABASE_URL": database_url,
        "GPUNET_STATE_DIR": str(tmp_path / "coordinator"),
        "GPUNET_API_PORT": str(api_port),
        "GPUNET_GATEWAY_PORT": str(gateway_port),
        "GPUNET_ATTESTER_KEYPAIR": str(attester),
        "GPUNET_POLL_SECONDS": "1",
        "GPUNET_HEARTBEAT_SECONDS": "0.5",
        "GPUNET_RECONNECT_GRACE_SECONDS": "15",
        "GPUNET_CLOSE_GRACE_SECONDS": "4",
    }
    # The old coordinator settles nothing (production settles hourly); the new one every receipt.
    old_settling = {"GPUNET_SETTLE_SECONDS": "3600", "GPUNET_SETTLE_INTERVAL_SECONDS": "43200"}
    new_settling = {
        "GPUNET_SETTLE_SECONDS": "1",
        "GPUNET_SETTLE_INTERVAL_SECONDS": "0",
        "GPUNET_SETTLE_MIN_AMOUNT": "0",
    }
    worker_args = [
        "worker",
        "run",
        "--keypair",
        str(tmp_path / "node0.json"),
        "--simulate-gpus",
        "H100:2:80",
        "--gateway",
        f"ws://127.0.0.1:{gateway_port}/worker",
        "--state-dir",
        str(tmp_path / "worker0"),
    ]
    worker_env = {
        "GPUNET_WORKER_STOP_GRACE_SECONDS": "2",
        "GPUNET_WORKER_RECONNECT_CAP_SECONDS": "1",
        **HOST_JOBS_ENV,
        **cluster_env(0),
    }
    journal = tmp_path / "worker0" / "usage.jsonl"

    # --- the old install: a lease, its job checkpointing, receipts journaled and none settled
    old = Install(old_tree, tmp_path, "old")
    coordinator, worker = await old.start_market(api, coordinator_env | old_settling, worker_args, worker_env)
    spawned += [coordinator, worker]
    lease, placed = await placed_lease(world, api, chain, LEASE_SECONDS, steps_job(), gpus=2)
    assert placed == [node_key]
    await eventually(lambda: all_running(api, world.client, lease, placed), what="the job running")
    # two usage periods' receipts (the second superseding the first) pending at the old coordinator
    await eventually(
        lambda: _at_least(_pending(database_url, lease), 2 * PERIOD * 2), what="receipts pending at the old coordinator"
    )
    step_file = tmp_path / "worker0" / "jobs" / str(lease) / "checkpoints" / "step"
    await eventually(lambda: asyncio.to_thread(step_file.exists), what="the job's checkpoint")
    # the old code ran (its packages from BASE's tree, not this checkout's)
    for process in ("coordinator", "worker"):
        for package, file in old.loaded(process).items():
            assert Path(file).is_relative_to(old_tree), f"the old {process} loaded {package} from {file}"

    # --- the upgrade: the coordinator stops first (the worker journals on without it), then the worker
    await _stop(coordinator, "old coordinator")
    await _stop(worker, "old worker")
    account, share = await _share(chain, lease)
    assert type(account.status).__name__ == "Active" and account.paid == 0
    assert share.receipt_gpu_seconds == share.gpu_seconds == 0  # nothing settled by the old install
    at_stop = Journal(journal, read_only=True).newest(str(lease), share.epoch)
    assert at_stop is not None and not at_stop.final and at_stop.gpu_seconds > 0  # pending, in the journal
    assert at_stop.gpu_seconds >= await _pending(database_url, lease) > 0  # and at the coordinator
    checkpointed = int(step_file.read_text())
    assert checkpointed > 0

    # --- the new install (this checkout) on the same database, state directory, node key and ports
    new = Install(REPO, tmp_path, "new")
    coordinator, worker = await new.start_market(api, coordinator_env | new_settling, worker_args, worker_env)
    spawned += [coordinator, worker]

    # The lease goes on: the same share, its job resumed from the old run's checkpoint...
    resumed = await eventually(lambda: _line(api, world, lease, "resumed from"), what="the job resumed")
    assert resumed == f"resumed from {checkpointed}"
    for process in ("coordinator", "worker"):  # (this checkout's code, this time)
        for package, file in new.loaded(process).items():
            assert Path(file).is_relative_to(REPO), f"the new {process} loaded {package} from {file}"
    await eventually(lambda: all_running(api, world.client, lease, placed), what="the job running again")

    # ...and what the old install left pending is settled by the new one while the lease is active.
    async def settled_past_the_stop() -> bool:
        account, now = await _share(chain, lease)
        assert type(account.status).__name__ == "Active", "the lease ended before the pending receipts were settled"
        assert now.epoch == share.epoch and now.assigned_at == share.assigned_at  # never reassigned
        return now.receipt_gpu_seconds >= at_stop.gpu_seconds

    await eventually(settled_past_the_stop, what="the pending receipts settled")

    # --- the lease's end: closed, the last receipts settled, finalized
    await eventually(lambda: closed(chain, lease), timeout=120, what="the lease finalized")
    final, share = await _share(chain, lease)
    newest = Journal(journal, read_only=True).newest(str(lease), share.epoch)
    assert newest is not None and newest.final
    # paid every GPU-second the worker's journal says it held, before and after the upgrade, no more
    assert share.gpu_seconds == share.receipt_gpu_seconds == newest.gpu_seconds > at_stop.gpu_seconds
    settled = await settlement_events(chain, lease)
    assert sum(e.gpu_seconds for e in settled) == share.gpu_seconds
    assert sum(e.payout for e in settled) == final.paid and sum(e.fee for e in settled) == final.fees
    assert all(e.payout + e.fee == e.gpu_seconds * PRICE // 3600 for e in settled)
    assert final.deposited == final.paid + final.fees + final.refunded  # conservation, to the base unit
    report = await audit_lease(chain, lease)
    assert report.ok, report.differences()
    async with httpx.AsyncClient(timeout=30) as http:
        ledger = (await http.get(f"{api}/audit/leases/{lease}")).json()
    assert ledger.get("ok") is True, ledger
    await _stop(worker, "new worker")
    await _stop(coordinator, "new coordinator")
