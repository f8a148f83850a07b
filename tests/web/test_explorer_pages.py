"""The explorer's account pages on a real lease: the demo's job runs on two simulated nodes, one
worker is killed (its provider slashed, its share moved), the lease runs out and the coordinator
closes and finalizes it. The lease's and the slashed provider's figures on the pages equal the SDK's
chain-only audit to the base unit; every settlement is shown checked against the program's rule;
the node page shows the killed node's verification history with its evidence, its fault and its
slash. Screenshots of the three pages go to docs/screenshots/."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from playwright.async_api import Page
from solders.pubkey import Pubkey

from gpunet.accounts import fetch
from gpunet.amounts import parse_u64, settle
from gpunet.audit import ChainAuditReport, audit_lease, audit_provider
from gpunet.demo.story import PRICE
from gpunet.history import transactions_of
from tests.web.conftest import SCREENSHOTS, WebStack, until

FEE_BPS = 500  # the demo market's protocol fee (gpunet.testbed.Market.create)


async def _units(page: Page, field: str) -> int:
    return int(await page.locator(f"[data-field='{field}']").first.get_attribute("data-units") or "")


async def _shown_audit(page: Page) -> dict[str, tuple[int, int]]:
    """The audit table's checks as the page shows them, once it has loaded after the page: what ->
    (from the events, on chain)."""
    await page.wait_for_selector("[data-audit] [data-audit-ok]", timeout=60_000)
    shown = {}
    for row in await page.locator("[data-audit] tr[data-on-chain]").all():
        what = await row.get_attribute("data-check")
        shown[what] = (int(await row.get_attribute("data-from-events")), int(await row.get_attribute("data-on-chain")))
    return shown


async def _fits_a_phone(page: Page) -> bool:
    """Nothing on the page is wider than a 375 px screen (a wide table scrolls in its own box)."""
    await page.set_viewport_size({"width": 375, "height": 800})
    width = await page.evaluate("document.documentElement.scrollWidth")
    await page.set_viewport_size({"width": 1280, "height": 800})
    return width <= 375


def _audited(report: ChainAuditReport) -> dict[str, tuple[int, int]]:
    return {c.what: (c.from_events, c.on_chain) for c in report.checks}


async def _ledger(web_stack: WebStack, path: str, **params: str) -> Any:
    async with httpx.AsyncClient(base_url=web_stack.coordinator.api_url, timeout=10) as http:
        return (await http.get(path, params=params)).json()


async def _closed(web_stack: WebStack, lease: Pubkey) -> bool:
    row = await _ledger(web_stack, f"/leases/{lease}")
    events = await _ledger(web_stack, "/events", lease=str(lease), limit="500")
    return row["status"] == "closed" and any(e["name"] == "LeaseFinalized" for e in events["items"])


@pytest.mark.timeout(420)
async def test_lease_provider_and_node_pages_equal_the_chain_audit(web_stack: WebStack, browser) -> None:
    running = await web_stack.running_lease(gpus=2, seconds=30, settlements=2)
    lease, api = running.lease, web_stack.coordinator.api_url
    first = (await _ledger(web_stack, f"/leases/{lease}"))["assignments"][0]
    victim = next(s for s in web_stack.demo.suppliers if str(s.node_key.pubkey()) == first["node_key"])
    assert victim.worker is not None
    victim.worker.kill()  # its heartbeats stop: the coordinator slashes its provider and moves its share
    slash = await until(lambda: _slash(web_stack, lease), 90, "the killed node's slash")
    await until(lambda: _closed(web_stack, lease), 150, "the lease closed and finalized by the coordinator")

    page = await browser.new_page(viewport={"width": 1280, "height": 800})
    page.set_default_timeout(5_000)  # the page is served whole; only its audit comes later (waited for)
    response = await page.goto(f"{web_stack.url}leases/{lease}")
    assert response is not None and response.status == 200

    # The figures equal the SDK's chain-only audit, to the base unit (and the audit's verdict is shown).
    report = await audit_lease(web_stack.chain, lease, coordinator=api)
    assert report.ok and report.evidence_ok, report.differences()
    audited = _audited(report)
    for field in ("deposited", "paid", "fees", "fees_swept", "refunded", "donations"):
        assert await _units(page, field) == audited[field][1] == audited[field][0], field
    assert await _shown_audit(page) == audited
    assert await page.locator("[data-audit-ok]").get_attribute("data-audit-ok") == "true"
    assert await page.locator("[data-evidence='matches']").count() == len(report.evidence) == 1
    assert "recomputed from chain data" in await page.locator("[data-audit]").inner_text()

    # The whole timeline, every row linking its transaction; each settlement as the program's rule gives it.
    chain_events = [
        (str(tx.signature), e)
        for tx in await transactions_of(web_stack.chain, lease)
        for e in tx.events
        if getattr(e.data, "lease", None) == lease
    ]
    rows = page.locator("[data-timeline] tbody tr")
    shown = [(await r.get_attribute("data-signature"), await r.get_attribute("data-kind")) for r in await rows.all()]
    assert shown == [(s, e.name) for s, e in chain_events]
    for kind in ("LeaseOpened", "LeaseAssigned", "UsageSettled", "ProviderSlashed", "LeaseReassigned"):
        assert kind in [k for _, k in shown], kind
    assert [k for _, k in shown][-2:] == ["LeaseClosed", "LeaseFinalized"]
    for signature, _ in shown:
        assert await page.locator(f"[data-signature='{signature}'] a[href='/web/tx/{signature}']").count() >= 1
    settlements = [e.data for _, e in chain_events if e.name == "UsageSettled"]
    settled_rows = await page.locator("tr[data-kind='UsageSettled']").all()
    assert len(settled_rows) == len(settlements) >= 3
    paid_before: dict[tuple[Pubkey, int], int] = {}
    for row, d in zip(settled_rows, settlements, strict=True):
        shown_values = [
            int(await row.get_attribute(f"data-{k}") or "") for k in ("gpu-seconds", "price", "amount", "fee", "payout")
        ]
        before = paid_before.get((d.node, d.epoch), 0)
        rule = settle(PRICE, before, d.gpu_seconds, FEE_BPS, d.escrow_left + d.amount)
        assert (
            shown_values
            == [d.gpu_seconds, PRICE, rule.amount, rule.fee, rule.payout]
            == [d.gpu_seconds, PRICE, d.amount, d.fee, d.payout]
        )
        paid_before[(d.node, d.epoch)] = before + d.gpu_seconds
        assert await row.get_attribute("data-check") == "checked"
        assert "✓ checked" in await row.inner_text()
    assert await page.locator("[data-check='mismatch']").count() == 0
    assert await page.locator("tr[data-kind='ProviderSlashed'] [data-evidence]").count() == 1
    await page.screenshot(path=SCREENSHOTS / "lease.png", full_page=False)
    assert await _fits_a_phone(page)

    # The slashed provider: stake and earnings equal its chain-only audit.
    provider = Pubkey.from_string(slash["provider"])
    await page.goto(f"{web_stack.url}providers/{victim.wallet.pubkey()}")  # by its supplier's wallet
    assert await page.locator("[data-provider]").inner_text() == str(provider)
    report = await audit_provider(web_stack.chain, provider, coordinator=api)
    assert report.ok and report.evidence_ok, report.differences()
    account = await fetch(web_stack.chain, provider, "Provider")
    audited = _audited(report)
    assert await _units(page, "slashed") == audited["slashed"][0] == account.slashed == parse_u64(slash["amount"]) > 0
    assert await _units(page, "staked") + await _units(page, "unbonding") == audited["staked + unbonding"][0]
    assert (await _units(page, "staked"), await _units(page, "bonded"), await _units(page, "unbonding")) == (
        account.staked,
        account.bonded,
        account.unbonding,
    )
    assert await _units(page, "earned") == report.earned > 0
    assert (
        sum(
            [
                int(p)
                for p in await page.locator("[data-earnings] tr[data-payout]").evaluate_all(
                    "rs => rs.map(r => r.dataset.payout)"
                )
            ]
        )
        == report.earned
    )
    assert await _shown_audit(page) == audited
    assert await page.locator("[data-audit-ok]").get_attribute("data-audit-ok") == "true"
    assert await page.locator(f"[data-slash='{slash['signature']}']").count() == 1
    await page.screenshot(path=SCREENSHOTS / "provider.png", full_page=False)
    assert await _fits_a_phone(page)

    # The killed node: its verification history with the evidence, its fault and its slash.
    await page.goto(f"{web_stack.url}nodes/{victim.node_key.pubkey()}")  # by its node key
    assert await page.locator("[data-node]").inner_text() == slash["node"]
    assert await page.locator("[data-verifications] tr[data-verdict='passed']").count() >= 1
    assert await page.locator("[data-verifications] [data-simulated]").count() >= 1
    assert await page.locator("[data-spec] [data-simulated]").count() == 1
    fault = page.locator("[data-faults] tr[data-fault]")
    assert await fault.count() == 1
    assert await fault.locator(f"a[href='/web/tx/{slash['signature']}']").count() == 1
    assert await page.locator(f"[data-slashes] [data-slash='{slash['signature']}']").count() == 1
    assert await page.locator("[data-status]").get_attribute("data-status") in ("jailed", "offline")
    assert await page.locator("[data-telemetry]").count() == 1  # its last heartbeat, kept after it died
    await page.screenshot(path=SCREENSHOTS / "node.png", full_page=False)
    assert await _fits_a_phone(page)

    # A bad address is a clear error, not a crash.
    response = await page.goto(f"{web_stack.url}leases/not-an-address")
    assert response is not None and response.status == 400
    assert "is not a lease address" in await page.locator("[data-error]").inner_text()


async def _slash(web_stack: WebStack, lease: Pubkey) -> Any:
    items = (await _ledger(web_stack, "/slashes", lease=str(lease)))["items"]
    return items[0] if items else None
