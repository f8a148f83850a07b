"""The settlements feed and its CSV export, against a running gpunet with a lease settling every few
seconds: a settlement that lands while the page is open appears on top without a reload, in the
ledger's order with none skipped or doubled; the pages' older and newer links walk the ledger's
order a page at a time while new rows land; and the export's rows are the ledger's settlements of a
provider and period, summing to them to the base unit."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from playwright.async_api import Page

from tests.web.conftest import SCREENSHOTS, until

SUMMED = ("gpu_seconds", "amount", "fee", "payout")


async def _ledger(api: httpx.AsyncClient, **params: Any) -> list[dict[str, Any]]:
    """The ledger's settlements under `params`, in chain order, every page of them (the read API)."""
    items: list[dict[str, Any]] = []
    offset: int | None = 0
    while offset is not None:
        body = (await api.get("/settlements", params={**params, "limit": 500, "offset": offset})).json()
        items += body["items"]
        offset = body["next_offset"]
    return items


def _key(s: dict[str, Any]) -> tuple[str, int]:
    return s["signature"], int(s["event_index"])


async def _shown(page: Page) -> list[tuple[str, int]]:
    """The feed page's rows, top to bottom."""
    rows = page.locator("table[data-table=settlements] tbody tr")
    return [
        (str(await r.get_attribute("data-signature")), int(str(await r.get_attribute("data-event-index"))))
        for r in await rows.all()
    ]


def _aligned(shown: list[tuple[str, int]], newest_first: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """The ledger's rows (newest first) from the one shown on top, as many as shown."""
    start = newest_first.index(shown[0])
    return newest_first[start : start + len(shown)]


@pytest.mark.timeout(300)
async def test_settlements_feed_is_live_paged_and_exported(web_stack, browser) -> None:
    running = await web_stack.running_lease(gpus=2, seconds=30, settlements=1)
    lease = str(running.lease)
    async with httpx.AsyncClient(base_url=web_stack.coordinator.api_url, timeout=10) as api:
        page = await browser.new_page(viewport={"width": 1280, "height": 800})
        response = await page.goto(f"{web_stack.url}settlements")
        assert response is not None and response.status == 200
        before = await _shown(page)
        assert before, "the lease's first settlement is on the page"
        await page.evaluate("window.stayed = true")  # gone if the page reloads

        # A settlement lands while the page is open: it appears on top, without a reload.
        await page.wait_for_function(
            "n => document.querySelectorAll('table[data-table=settlements] tbody tr').length > n",
            arg=len(before),
            timeout=30_000,
        )
        assert await page.evaluate("window.stayed") is True
        shown = await _shown(page)
        ledger = [_key(s) for s in reversed(await _ledger(api))]
        assert shown[len(shown) - len(before) :] == before  # the old rows stay, below the new ones
        assert shown == _aligned(shown, ledger)  # in the ledger's order: none skipped, none doubled
        marks = page.locator("table[data-table=settlements] tbody tr [data-simulated]")
        assert await marks.count() == len(shown)  # the demo's nodes run simulated GPUs, and every row says so

        # A page at a time: older, then newer again, while settlements go on landing on top.
        await until(lambda: _count_at_least(api, 6), 60, "six settlements in the ledger")
        await page.goto(f"{web_stack.url}settlements")
        await page.screenshot(path=SCREENSHOTS / "settlements.png", full_page=False)
        await page.goto(f"{web_stack.url}settlements?limit=2")
        first = await _shown(page)
        assert len(first) == 2
        await page.click("a[rel=next]")
        second = await _shown(page)
        ledger = [_key(s) for s in reversed(await _ledger(api))]
        assert _aligned(first, ledger) == first and len(second) == 2
        assert ledger.index(second[0]) == ledger.index(first[-1]) + 1  # right after the first page
        await page.click("a[rel=next]")
        third = await _shown(page)
        assert ledger.index(third[0]) == ledger.index(second[-1]) + 1
        await page.click("a[rel=prev]")
        assert await _shown(page) == second
        await page.click("a[rel=prev]")
        assert await _shown(page) == first  # the same rows, however many landed on top since
        response = await page.goto(f"{web_stack.url}settlements?limit=0")
        assert response is not None and response.status == 400
        assert "limit: 0 is out of range" in await page.locator("[data-error]").inner_text()

        # CSV: a provider's settlements within slots, and from a date up to a slot, are the ledger's.
        everything = await _ledger(api)
        provider = everything[0]["provider"]
        mine = [s for s in everything if s["provider"] == provider]
        assert len(mine) >= 3
        low, high = int(mine[1]["slot"]), int(mine[-2]["slot"])
        today = datetime.now(UTC).date()
        for query, expected in (
            (
                {"provider": provider, "from": str(low), "to": str(high)},
                await _ledger(api, provider=provider, from_slot=low, to_slot=high),
            ),
            (
                {"provider": provider, "from": today.isoformat(), "to": str(high)},
                await _ledger(api, provider=provider, to_slot=high),
            ),
            ({"lease": lease, "to": str(high)}, await _ledger(api, lease=lease, to_slot=high)),
            ({"provider": provider, "to": (today - timedelta(days=1)).isoformat()}, []),
        ):
            answer = await api.get("/web/settlements.csv", params=query)
            assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/csv")
            rows = list(csv.DictReader(io.StringIO(answer.text)))
            assert {r["simulated"] for r in rows} <= {"true"}
            assert [_key(r) for r in rows] == [_key(s) for s in expected], query
            for column in SUMMED:  # integers in base units, summing to the ledger's exactly
                assert sum(int(r[column]) for r in rows) == sum(int(s[column]) for s in expected), (query, column)
        assert 0 < len(await _ledger(api, provider=provider, from_slot=low, to_slot=high)) < len(mine)
        bad = await api.get("/web/settlements.csv", params={"from": "last tuesday"})
        assert bad.status_code == 400 and "neither a slot (digits) nor an ISO 8601" in bad.text


async def _count_at_least(api: httpx.AsyncClient, count: int) -> bool:
    return len(await _ledger(api)) >= count
