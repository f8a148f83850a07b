"""The browser tests' parts: Debian's Chromium driven by Playwright (never a downloaded browser), and
a running gpunet (gpunet-localnet, the coordinator with embedded PostgreSQL serving /web/, and
suppliers' workers with simulated GPUs, verified), set up as the demo sets it up."""

from __future__ import annotations

import asyncio
import io
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from playwright.async_api import Browser, async_playwright
from rich.console import Console
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solders.pubkey import Pubkey

from coordinator.web.browser import CHROMIUM_ARGS, MISSING, chromium_executable
from gpunet import instructions as ix
from gpunet.amounts import IO
from gpunet.catalog import gpu_model
from gpunet.demo.processes import CoordinatorProcess
from gpunet.demo.story import MAX_PRICE, TRAIN, Demo
from gpunet.jobs import CoordinatorError, job_view, seal_missing_checkpoint_key, submit_job
from gpunet.localnet import LocalnetProcess
from gpunet.pda import lease_pda
from gpunet.protocol import JobSpec
from gpunet.testbed import Client, Market
from tests.conftest import SLOT_MS

T = TypeVar("T")
SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"


def chromium_path() -> str:
    path = chromium_executable()
    if path is None:
        pytest.fail(MISSING)
    return path


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            await browser.close()


@dataclass
class WebStack:
    """A running gpunet whose coordinator serves the web app at `url`."""

    node: LocalnetProcess
    chain: AsyncClient
    coordinator: CoordinatorProcess
    demo: Demo  # its market (admin, mint, suppliers) and its suppliers' workers

    @property
    def url(self) -> str:
        return f"{self.coordinator.api_url}/web/"

    @property
    def market(self) -> Market:
        return self.demo.market

    async def running_lease(self, gpus: int = 2, seconds: int = 30, settlements: int = 1) -> RunningLease:
        """A client's lease of `gpus` simulated H100s for `seconds`, opened on chain, its job (the
        demo's training script, 1 GPU per node) placed by the coordinator and running, once the ledger
        holds `settlements` settlements of it."""
        client = await self.market.client(100 * IO)
        lease = lease_pda(client.wallet.pubkey(), 1)
        terms = ix.LeaseTerms(gpu_model("H100").code, 80, gpus, ix.ANY, MAX_PRICE, seconds)
        await self.market.send(
            client.wallet, [ix.open_lease(client.wallet.pubkey(), client.tokens, self.market.mint, 1, terms)]
        )
        spec = JobSpec(command=[sys.executable, TRAIN], env={"STEPS": "100000", "STEP_SECONDS": "0.1"})
        api = self.coordinator.api_url
        await until(lambda: _submitted(api, client, lease, spec), 60, "the job accepted")
        view = await until(lambda: _placed(api, client, lease), 60, "the lease placed")
        await seal_missing_checkpoint_key(api, self.chain, client.wallet, lease, view)
        await until(lambda: _settled(api, lease, settlements), 90, f"{settlements} settlement(s) in the ledger")
        return RunningLease(client, lease)


@dataclass(frozen=True)
class RunningLease:
    client: Client
    lease: Pubkey


async def until(check: Callable[[], Awaitable[T | None]], timeout: float, what: str) -> T:
    """`check()`'s first truthy answer, polled every 0.3 s; fails the test after `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if answer := await check():
            return answer
        await asyncio.sleep(0.3)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")


async def _submitted(api: str, client: Client, lease: Pubkey, spec: JobSpec) -> bool:
    try:
        await submit_job(api, client.wallet, lease, spec, gpus_per_node=1)
    except CoordinatorError as e:
        if "not indexed" in str(e):
            return False  # the indexer has not seen the lease yet
        raise
    return True


async def _placed(api: str, client: Client, lease: Pubkey) -> Any:
    view = await job_view(api, client.wallet, lease)
    return view if view["placement"] and view["placement"]["state"] == "placed" else None


async def _settled(api: str, lease: Pubkey, count: int) -> bool:
    async with httpx.AsyncClient(base_url=api, timeout=10) as http:
        items = (await http.get("/settlements", params={"lease": str(lease)})).json()["items"]
    return len(items) >= count


@pytest.fixture
async def web_stack(localnet_bin, tmp_path) -> AsyncIterator[WebStack]:
    """gpunet-localnet, the coordinator (API and web app) and the demo's three suppliers, each with a
    worker of simulated H100s, connected and verified."""
    node = LocalnetProcess(tmp_path / "localnet.log", slot_ms=SLOT_MS, binary=localnet_bin)
    node.start()
    demo = Demo(tmp_path, Console(file=io.StringIO(), width=200))
    coordinator: CoordinatorProcess | None = None
    try:
        async with AsyncClient(node.url, commitment=Confirmed) as chain:
            demo.chain = chain
            await demo.initialise()
            coordinator = await demo.start_coordinator(node)
            await demo.start_suppliers(coordinator)
            yield WebStack(node, chain, coordinator, demo)
    finally:
        for supplier in demo.suppliers:
            if supplier.worker:
                supplier.worker.stop()
        if coordinator:
            coordinator.stop(timeout=60)
        node.stop()
