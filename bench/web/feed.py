"""The live settlements feed: /web/settlements open in the browser (its EventSource on
/web/settlements/live), settlements confirmed at a steady rate; for each, the delay from the moment
the benchmark saw it confirmed (RPC status, polled every 5 ms) to the moment its row entered the
page (a MutationObserver's Date.now(): the same machine's wall clock as the benchmark's time.time()).

A row is recognised by the settlement's signature anywhere in its HTML (every row links its
transaction, /web/tx/{signature})."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from playwright.async_api import Browser

from bench.web.ledger import Share, settle_live
from bench.web.pages import VIEWPORT
from gpunet.testbed import Market

# Installed before the page's own scripts: the first time each signature-shaped string (64 bytes in
# base58: 86 to 88 characters) enters the document, in epoch milliseconds.
OBSERVER = """
window.__seen = {};
new MutationObserver((records) => {
  const at = Date.now();
  for (const record of records) for (const added of record.addedNodes) {
    const html = added.nodeType === Node.ELEMENT_NODE ? added.outerHTML : (added.textContent || '');
    for (const m of html.matchAll(/[1-9A-HJ-NP-Za-km-z]{86,88}/g)) {
      if (!(m[0] in window.__seen)) window.__seen[m[0]] = at;
    }
  }
}).observe(document, {childList: true, subtree: true, characterData: false});
"""
ROW_TIMEOUT_S = 10.0  # a row not on the page this long after its confirmation counts as missing


@dataclass
class Feed:
    delays_s: list[float] = field(default_factory=list)
    sent: int = 0
    status: int = 200


async def measure_feed(
    browser: Browser, url: str, market: Market, shares: list[Share], rate: float, seconds: float
) -> Feed:
    feed = Feed()
    context = await browser.new_context(viewport=VIEWPORT)  # type: ignore[arg-type]
    try:
        await context.add_init_script(OBSERVER)
        page = await context.new_page()
        response = await page.goto(url, wait_until="load")
        if response is None or response.status != 200:
            feed.status = response.status if response else 0
            return feed
        await asyncio.sleep(1.0)  # the page's EventSource connected
        confirmed: dict[str, float] = {}

        async def one(share: Share) -> None:
            signature, at = await settle_live(market, share)
            confirmed[str(signature)] = at

        tasks, start, n = [], time.monotonic(), 0
        while time.monotonic() - start < seconds:
            tasks.append(asyncio.create_task(one(shares[n % len(shares)])))  # a new share each time
            n += 1
            await asyncio.sleep(max(0.0, start + n / rate - time.monotonic()))
        await asyncio.gather(*tasks)
        feed.sent = len(confirmed)
        deadline = time.monotonic() + ROW_TIMEOUT_S
        while True:
            seen: dict[str, float] = await page.evaluate("window.__seen")
            if all(s in seen for s in confirmed) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
        # A 5 ms status poll may see the confirmation after the row: such a delay counts as 0.
        feed.delays_s = [max(0.0, seen[s] / 1000 - at) for s, at in confirmed.items() if s in seen]
    finally:
        await context.close()
    return feed
