"""A gpunet deployment for the coordinator benchmarks, made of the same processes a user runs:
gpunet-localnet, `gpunet coordinator run` (embedded PostgreSQL) and `gpunet worker run
--simulate-gpus` per node, driven through the SDK and the coordinator's client API."""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from gpunet import instructions as ix
from gpunet.amounts import IO
from gpunet.client import send_and_confirm
from gpunet.demo.processes import CoordinatorProcess, WorkerProcess
from gpunet.jobs import CoordinatorError, job_view, submit_job
from gpunet.keys import create_keypair_file
from gpunet.localnet import LocalnetProcess
from gpunet.pda import lease_pda
from gpunet.protocol import JobSpec
from gpunet.testbed import Market, funded_deployer

PRICE = 360 * IO
JOB = str(Path(__file__).resolve().parents[2] / "gpunet" / "demo" / "train.py")


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))]


def summary(values: list[float]) -> str:
    return (
        f"n={len(values)} p50 {statistics.median(values):.3f} s  p99 {percentile(values, 99):.3f} s  "
        f"max {max(values):.3f} s"
    )


MIN_TRIALS_FOR_P99 = 100  # fewer, and the "p99" is the slowest trial or near it: no tail is measured


def trials_summary(values: list[float]) -> str:
    """`summary` of a few trials: the p99 only from MIN_TRIALS_FOR_P99 on, else why it is missing."""
    if not values:
        return "n=0: no trial measured"
    if len(values) >= MIN_TRIALS_FOR_P99:
        return summary(values)
    return (
        f"n={len(values)} p50 {statistics.median(values):.3f} s  max {max(values):.3f} s; "
        f"p99: not reported (n={len(values)} < {MIN_TRIALS_FOR_P99} trials)"
    )


@dataclass
class Node:
    name: str
    wallet: Keypair
    key: Keypair
    worker: WorkerProcess


class Deployment:
    def __init__(self, chain: AsyncClient, workdir: Path, coordinator: CoordinatorProcess) -> None:
        self.chain, self.workdir, self.coordinator = chain, workdir, coordinator
        self.localnet: LocalnetProcess | None = None
        self.nodes: list[Node] = []
        self.next_lease_id = 1

    async def initialise(self, admin: Keypair) -> None:
        self.market = await Market.create(self.chain, admin=admin)
        self.admin, self.mint = admin, self.market.mint
        client = await self.market.client(1_000_000 * IO)
        self.client, self.client_tokens = client.wallet, client.tokens

    async def add_nodes(self, count: int, gpus: int, *, store: bool = False) -> None:
        """`count` registered nodes with running workers; with `store`, they use the coordinator's
        checkpoint store (worker --api)."""
        for _ in range(count):
            name = f"n{len(self.nodes)}"
            s = await self.market.supplier(gpus, PRICE, 500 * IO)
            keyfile = self.workdir / f"node-{name}.json"
            create_keypair_file(keyfile, s.node_key)
            api = self.coordinator.api_url if store else None
            worker = WorkerProcess(
                self.workdir,
                name,
                keyfile,
                f"H100:{gpus}:80",
                self.coordinator.gateway_url,
                api,
                number=len(self.nodes),
            )
            worker.start()
            self.nodes.append(Node(name, s.wallet, s.node_key, worker))
        await until(lambda: self.online(len(self.nodes)), 120, "the workers online")

    async def online(self, count: int) -> bool:
        async with httpx.AsyncClient(timeout=5) as http:
            items = (await http.get(f"{self.coordinator.api_url}/workers", params={"limit": 500})).json()["items"]
        return sum(1 for w in items if w["online"]) >= count

    async def open(self, gpus: int, seconds: int, spec: JobSpec, gpus_per_node: int | None) -> tuple[Pubkey, float]:
        """Opens a lease and attaches its job; returns the lease and when the open was confirmed."""
        lease_id = self.next_lease_id
        self.next_lease_id += 1
        terms = ix.LeaseTerms(1, 80, gpus, ix.ANY, 2 * PRICE, seconds)
        await send_and_confirm(
            self.chain,
            self.client,
            [ix.open_lease(self.client.pubkey(), self.client_tokens, self.mint, lease_id, terms)],
        )
        opened = time.monotonic()
        lease = lease_pda(self.client.pubkey(), lease_id)

        async def submitted() -> bool:
            try:
                await submit_job(self.coordinator.api_url, self.client, lease, spec, gpus_per_node)
            except CoordinatorError as e:
                if "not indexed" in str(e):
                    return False
                raise
            return True

        await until(submitted, 60, "the job accepted", every=0.02)
        return lease, opened

    async def close(self, lease: Pubkey) -> None:
        from gpunet.accounts import fetch

        account = await fetch(self.chain, lease, "Lease")
        nodes = [a.node for a in list(account.assignments)[: account.node_count]]
        await send_and_confirm(
            self.chain,
            self.client,
            [ix.close_lease(self.client.pubkey(), self.client.pubkey(), self.client_tokens, lease, nodes)],
        )

    async def states(self, lease: Pubkey) -> dict[str, str]:
        return {
            n["node_key"]: n["state"] for n in (await job_view(self.coordinator.api_url, self.client, lease))["nodes"]
        }

    async def placement(self, lease: Pubkey) -> dict[str, Any] | None:
        return (await job_view(self.coordinator.api_url, self.client, lease))["placement"]

    def node(self, node_key: str) -> Node:
        return next(n for n in self.nodes if str(n.key.pubkey()) == node_key)


async def until(check: Any, timeout: float, what: str, every: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        if value := await check():
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        await asyncio.sleep(every)


@contextlib.asynccontextmanager
async def deployment(
    *, slot_ms: int = 100, confirm_slots: int = 0, **coordinator_settings: object
) -> AsyncIterator[Deployment]:
    """The deployment on a node of `slot_ms` slots confirming `confirm_slots` after a transaction's
    own (400 and 2: like a real cluster; the default: fast blocks, confirmed at once)."""
    workdir = Path(tempfile.mkdtemp(prefix="gpunet-bench-"))
    node = LocalnetProcess(workdir / "localnet.log", slot_ms=slot_ms, confirm_slots=confirm_slots).start()
    coordinator: CoordinatorProcess | None = None
    dep: Deployment | None = None
    try:
        async with AsyncClient(node.url, commitment=Confirmed) as chain:
            admin = await funded_deployer(chain)
            attester = workdir / "attester.json"
            create_keypair_file(attester, admin)
            settings = {
                "heartbeat_seconds": 0.5,
                "lost_after_seconds": 3,
                "reconnect_grace_seconds": 6,
                "settle_seconds": 1,
                "close_grace_seconds": 3,
                "poll_seconds": 1,
            } | coordinator_settings
            # The chain must be initialised before the coordinator starts (it reads the config).
            dep = Deployment(chain, workdir, None)  # type: ignore[arg-type]
            dep.localnet = node
            await dep.initialise(admin)
            coordinator = CoordinatorProcess(workdir, node.url, node.ws_url, attester, **settings)
            coordinator.start()
            await asyncio.to_thread(coordinator.wait_ready)
            dep.coordinator = coordinator
            print(f"deployment in {workdir} (logs there)", file=sys.stderr)
            yield dep
    finally:
        for n in dep.nodes if dep else []:
            n.worker.stop()
        if coordinator:
            coordinator.stop(60)
        node.stop()
