"""The browser tests' parts: Debian's Chromium driven by Playwright (never a downloaded browser), and
a running gpunet (gpunet-localnet, the coordinator with embedded PostgreSQL serving /web/, and
suppliers' workers with simulated GPUs, verified), set up as the demo sets it up."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.async_api import Browser, async_playwright
from rich.console import Console
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed

from coordinator.web.browser import CHROMIUM_ARGS, MISSING, chromium_executable
from gpunet.demo.processes import CoordinatorProcess
from gpunet.demo.story import Demo
from gpunet.localnet import LocalnetProcess
from gpunet.testbed import Market
from tests.conftest import SLOT_MS

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
