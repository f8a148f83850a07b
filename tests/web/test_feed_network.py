"""The explorer's network page, search and transaction page, against a running gpunet with a live
lease: the page's figures are the ledger's and the workers' (as the read API serves them), search
finds each kind of address and a signature (and says clearly what is wrong with anything else), and a
settlement's transaction page shows its event's amounts to the base unit."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest
from playwright.async_api import Page
from solders.keypair import Keypair

from gpunet import instructions as ix
from gpunet.amounts import IO, format_io
from gpunet.catalog import gpu_model, gpu_model_name, region_name
from gpunet.demo.story import MAX_PRICE
from gpunet.pda import lease_pda
from tests.web.conftest import SCREENSHOTS, until


async def _registered(api: httpx.AsyncClient, count: int) -> list[dict[str, Any]] | None:
    nodes = (await api.get("/nodes", params={"registered": "true"})).json()["items"]
    return nodes if len(nodes) >= count else None


async def _offline(api: httpx.AsyncClient, node_key: str) -> dict[str, dict[str, Any]] | None:
    """The workers by node key, once `node_key`'s is no longer online."""
    workers = {w["node_key"]: w for w in (await api.get("/workers")).json()["items"]}
    return None if workers[node_key]["online"] else workers


async def _indexed(api: httpx.AsyncClient, lease: str) -> bool:
    return (await api.get(f"/leases/{lease}")).status_code == 200


async def _figure(page: Page, name: str) -> str:
    return (await page.locator(f'[data-figure="{name}"]').inner_text()).strip()


@pytest.mark.timeout(300)
async def test_network_page_search_and_transaction_page(web_stack, browser) -> None:
    running = await web_stack.running_lease(gpus=2, seconds=30, settlements=1)
    lease = str(running.lease)
    page = await browser.new_page(viewport={"width": 1280, "height": 800})
    await page.goto(web_stack.url)  # the README's picture: the demo's network, all of it up
    await page.screenshot(path=SCREENSHOTS / "network.png", full_page=False)
    # The controls: a fourth supplier's node that no worker runs (unverified, offline, not simulated,
    # cheaper), and the demo's node that holds no share of the lease taken offline.
    await web_stack.market.supplier(gpus=2, price_per_gpu_hour=2 * IO, stake=300 * IO)
    async with httpx.AsyncClient(base_url=web_stack.coordinator.api_url, timeout=10) as api:
        nodes = await until(lambda: _registered(api, 4), 30, "the fourth node indexed")
        free = next(n for n in nodes if n["gpus_leased"] == 0 and n["verification_tier"] > 0)
        (idle,) = [s for s in web_stack.demo.suppliers if str(s.node_key.pubkey()) == free["node_key"]]
        assert idle.worker is not None
        await asyncio.to_thread(idle.worker.stop)
        workers = await until(lambda: _offline(api, free["node_key"]), 30, "the idle node's worker offline")
        settled = (await api.get("/settlements", params={"lease": lease})).json()["items"]

        response = await page.goto(web_stack.url)
        assert response is not None and response.status == 200

        # The totals are the ledger's nodes (offer, GPUs leased, verification) and the workers' state.
        now = time.time()
        gpus = sum(n["gpu_count"] for n in nodes)
        assert (len(nodes), gpus) == (4, 10)  # the demo's suppliers' 2 + 2 + 4 simulated H100s, and 2 more
        assert await _figure(page, "nodes") == str(len(nodes))
        assert await _figure(page, "gpus") == str(gpus)
        verified = sum(n["gpu_count"] for n in nodes if n["verification_tier"] > 0 and n["verified_until"] > now)
        assert verified == 8 and await _figure(page, "verified") == str(verified)
        online = sum(n["gpu_count"] for n in nodes if n["node_key"] in workers and workers[n["node_key"]]["online"])
        assert online == 8 - free["gpu_count"] and await _figure(page, "online") == str(online)
        leased = sum(n["gpus_leased"] for n in nodes)
        assert leased == 2 and await _figure(page, "leased") == str(leased)
        simulated = sum(
            n["gpu_count"] for n in nodes if n["node_key"] in workers and workers[n["node_key"]]["simulated"]
        )
        assert simulated == 8 and await _figure(page, "simulated") == f"{simulated} simulated"
        prices = [int(n["price_per_gpu_hour"]) for n in nodes]
        price = page.locator('[data-figure="price"]')
        assert [await price.get_attribute(f"data-{m}") for m in ("min", "max")] == [str(min(prices)), str(max(prices))]
        assert await _figure(page, "price") == f"{format_io(min(prices))} \u2013 {format_io(max(prices))}"
        assert await page.locator("[data-table=nodes] [data-simulated]").count() == 3

        # By model and region: the one group the demo has, in the accessible table the charts draw.
        (group,) = {f"{gpu_model_name(n['gpu_model'])} · {region_name(n['region'])}" for n in nodes}
        row = page.locator(f'[data-table=groups] tr[data-group="{group}"]')
        columns = ("nodes", "gpus", "verified", "simulated", "online", "leased")
        figures = [await row.locator(f"[data-{c}]").inner_text() for c in columns]
        assert figures == ["4", "10", "8", "8", str(online), "2"]
        assert await page.locator("svg[role=img] rect.bar.leased").count() == 2  # by model and by region
        for n in nodes:
            node_row = page.locator(f'[data-table=nodes] tr[data-node="{n["node"]}"]')
            assert await node_row.locator("[data-leased]").inner_text() == str(n["gpus_leased"])
            shown = await node_row.locator("[data-verification]").inner_text()
            assert shown == ("verified" if n["verification_tier"] > 0 and n["verified_until"] > now else "unverified")
            online_text = await node_row.locator("[data-online]").inner_text()
            assert online_text.strip() == ("online" if workers.get(n["node_key"], {}).get("online") else "offline")

        # Search from the box on every page: a lease goes to its page.
        await page.fill("#q", lease)
        async with page.expect_navigation():
            await page.press("#q", "Enter")
        assert page.url.endswith(f"/web/leases/{lease}"), page.url

        # Each kind of address goes to its page (a node's key to its node account's page).
        node = free
        provider = next(p for p in (await api.get("/providers")).json()["items"] if p["provider"] == node["provider"])
        signature = settled[0]["signature"]
        for q, target in (
            (node["node"], f"/web/nodes/{node['node']}"),
            (node["node_key"], f"/web/nodes/{node['node']}"),
            (provider["provider"], f"/web/providers/{provider['provider']}"),
            (provider["authority"], f"/web/providers/{provider['provider']}"),
            (signature, f"/web/tx/{signature}"),
        ):
            answer = await api.get("/web/search", params={"q": q})
            assert (answer.status_code, answer.headers.get("location")) == (303, target), q
        # A wallet found twice (the client of two leases): both listed, each linking its page.
        client = running.client
        terms = ix.LeaseTerms(gpu_model("H100").code, 80, 1, ix.ANY, MAX_PRICE, 30)
        await web_stack.market.send(
            client.wallet, [ix.open_lease(client.wallet.pubkey(), client.tokens, web_stack.market.mint, 2, terms)]
        )
        second = str(lease_pda(client.wallet.pubkey(), 2))
        await until(lambda: _indexed(api, second), 30, "the second lease indexed")
        response = await page.goto(f"{web_stack.url}search?q={client.wallet.pubkey()}")
        assert response is not None and response.status == 200
        links = page.locator("[data-matches] a")
        assert sorted([str(await a.get_attribute("href")) for a in await links.all()]) == sorted(
            [f"/web/leases/{lease}", f"/web/leases/{second}"]
        )
        # The demo's explorer links (`--explorer`'s {kind} is "address" or "tx") land on the same pages.
        answer = await api.get(f"/web/address/{node['node_key']}")
        assert (answer.status_code, answer.headers.get("location")) == (303, f"/web/nodes/{node['node']}")

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
        # the transaction's own signature first (its fee payer's; the attester co-signs after a pool key)
        assert raw.status_code == 200 and raw.json()["transaction"]["signatures"][0] == signature
        unknown = Keypair().sign_message(b"not a gpunet transaction")
        response = await page.goto(f"{web_stack.url}tx/{unknown}")
        assert response is not None and response.status == 404
        assert (await api.get(f"/web/tx/{unknown}/raw")).status_code == 404  # no open door to the node's RPC

        # At phone width the pages fit: wide tables scroll in their frame, the page itself does not.
        await page.set_viewport_size({"width": 375, "height": 800})
        for path in ("", "settlements", f"tx/{signature}"):
            await page.goto(f"{web_stack.url}{path}")
            assert await page.evaluate("document.documentElement.scrollWidth") <= 375, path
