"""The explorer's network page, search and transaction page, against a running gpunet with a live
lease: the page's figures are the ledger's and the workers' (as the read API serves them), search
finds each kind of address and a signature (and says clearly what is wrong with anything else), and a
settlement's transaction page shows its event's amounts to the base unit."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest
from playwright.async_api import Page
from solders.keypair import Keypair

from gpunet.amounts import format_io
from gpunet.catalog import gpu_model_name, region_name
from tests.web.conftest import SCREENSHOTS


async def _figure(page: Page, name: str) -> str:
    return (await page.locator(f'[data-figure="{name}"]').inner_text()).strip()


@pytest.mark.timeout(300)
async def test_network_page_search_and_transaction_page(web_stack, browser) -> None:
    running = await web_stack.running_lease(gpus=2, seconds=30, settlements=1)
    lease = str(running.lease)
    async with httpx.AsyncClient(base_url=web_stack.coordinator.api_url, timeout=10) as api:
        nodes: list[dict[str, Any]] = (await api.get("/nodes", params={"registered": "true"})).json()["items"]
        workers = {w["node_key"]: w for w in (await api.get("/workers")).json()["items"]}
        settled = (await api.get("/settlements", params={"lease": lease})).json()["items"]

        page = await browser.new_page(viewport={"width": 1280, "height": 800})
        response = await page.goto(web_stack.url)
        assert response is not None and response.status == 200

        # The totals are the ledger's nodes (offer, GPUs leased, verification) and the workers' state.
        now = time.time()
        gpus = sum(n["gpu_count"] for n in nodes)
        assert (len(nodes), gpus) == (3, 8)  # the demo's suppliers: 2 + 2 + 4 simulated H100s
        assert await _figure(page, "nodes") == str(len(nodes))
        assert await _figure(page, "gpus") == str(gpus)
        verified = sum(n["gpu_count"] for n in nodes if n["verification_tier"] > 0 and n["verified_until"] > now)
        assert verified == 8 and await _figure(page, "verified") == str(verified)
        online = sum(n["gpu_count"] for n in nodes if workers[n["node_key"]]["online"])
        assert online == 8 and await _figure(page, "online") == str(online)
        leased = sum(n["gpus_leased"] for n in nodes)
        assert leased == 2 and await _figure(page, "leased") == str(leased)
        simulated = sum(n["gpu_count"] for n in nodes if workers[n["node_key"]]["simulated"])
        assert simulated == 8 and await _figure(page, "simulated") == f"{simulated} simulated"
        prices = {int(n["price_per_gpu_hour"]) for n in nodes}
        assert await _figure(page, "price") == format_io(prices.pop()) and not prices
        assert await page.locator("[data-table=nodes] [data-simulated]").count() == len(nodes)

        # By model and region: the one group the demo has, in the accessible table the charts draw.
        (group,) = {f"{gpu_model_name(n['gpu_model'])} · {region_name(n['region'])}" for n in nodes}
        row = page.locator(f'[data-table=groups] tr[data-group="{group}"]')
        figures = [await row.locator(f"[data-{c}]").inner_text() for c in ("nodes", "gpus", "verified", "online")]
        assert figures == ["3", "8", "8", "8"]
        assert await row.locator("[data-leased]").inner_text() == "2"
        assert await page.locator("svg[role=img] rect.bar.leased").count() == 2  # by model and by region
        for n in nodes:
            node_row = page.locator(f'[data-table=nodes] tr[data-node="{n["node"]}"]')
            assert await node_row.locator("[data-leased]").inner_text() == str(n["gpus_leased"])
            assert await node_row.locator("[data-verification]").inner_text() == "verified"
        await page.screenshot(path=SCREENSHOTS / "network.png", full_page=False)

        # Search from the box on every page: a lease goes to its page.
        await page.fill("#q", lease)
        async with page.expect_navigation():
            await page.press("#q", "Enter")
        assert page.url.endswith(f"/web/leases/{lease}"), page.url

        # Each kind of address goes to its page (a node's key to its node account's page).
        node = nodes[0]
        provider = next(p for p in (await api.get("/providers")).json()["items"] if p["provider"] == node["provider"])
        signature = settled[0]["signature"]
        for q, target in (
            (node["node"], f"/web/nodes/{node['node']}"),
            (node["node_key"], f"/web/nodes/{node['node']}"),
            (provider["provider"], f"/web/providers/{provider['provider']}"),
            (provider["authority"], f"/web/providers/{provider['provider']}"),
            (str(running.client.wallet.pubkey()), f"/web/leases/{lease}"),
            (signature, f"/web/tx/{signature}"),
        ):
            answer = await api.get("/web/search", params={"q": q})
            assert (answer.status_code, answer.headers.get("location")) == (303, target), q

        # Anything else: a clear message, and nothing is pretended found.
        for q, status, says in (
            ("0OIl-not-an-address", 400, "is not base58"),
            ("3yZe7d", 400, "decodes to 4 bytes: an address is 32 bytes, a transaction signature 64"),
            ("", 400, "type an address"),
            (str(Keypair().pubkey()), 404, "Nothing found"),
        ):
            response = await page.goto(f"{web_stack.url}search?q={q}")
            assert response is not None and response.status == status, q
            assert says in await page.locator("[data-error]").inner_text(), q

        # The settlement's transaction page: its UsageSettled event, every amount to the base unit.
        response = await page.goto(f"{web_stack.url}tx/{signature}")
        assert response is not None and response.status == 200
        events = page.locator('[data-event="UsageSettled"]')
        assert await events.count() == sum(1 for s in settled if s["signature"] == signature)
        event = page.locator(f'[data-event="UsageSettled"][data-event-index="{settled[0]["event_index"]}"]')
        for field in ("amount", "fee", "payout", "escrow_left"):
            cell = event.locator(f"dt:text-is('{field}') + dd .io")
            assert await cell.get_attribute("data-units") == str(int(settled[0][field])), field
            assert await cell.inner_text() == format_io(int(settled[0][field]))
        assert await event.locator(f'a[href="/web/leases/{lease}"]').count() == 1
        raw = await api.get(f"/web/tx/{signature}/raw")
        assert raw.status_code == 200 and raw.json()["transaction"]["signatures"] == [signature]
        response = await page.goto(f"{web_stack.url}tx/{Keypair().sign_message(b'x')}")
        assert response is not None and response.status == 404
