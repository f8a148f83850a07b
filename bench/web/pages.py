"""The explorer in a real browser (Debian's Chromium, headless, driven by Playwright, launched as the
tests launch it): each page's load (navigation start to the end of its load event) and first
contentful paint, over repeated loads, each in a fresh browser context (a first visit: nothing cached).
A page the coordinator does not serve yet answers 404 and is reported so, not measured."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from playwright.async_api import Browser, async_playwright

from coordinator.web.browser import CHROMIUM_ARGS, MISSING, chromium_executable

VIEWPORT = {"width": 1280, "height": 800}

# The navigation's timing once its load event has ended, and its first contentful paint (which
# Chromium may report a moment after the load event: wait for it up to a second).
TIMING = """async () => {
  const nav = performance.getEntriesByType('navigation')[0];
  while (nav.loadEventEnd === 0) await new Promise(r => setTimeout(r, 5));
  const paint = () => performance.getEntriesByName('first-contentful-paint')[0];
  for (let i = 0; !paint() && i < 200; i++) await new Promise(r => setTimeout(r, 5));
  return {load: nav.loadEventEnd - nav.startTime, fcp: paint() ? paint().startTime : null};
}"""


@dataclass
class Loads:
    """A page's repeated loads: milliseconds each, or the HTTP status that stopped the measure."""

    loads_ms: list[float] = field(default_factory=list)
    paints_ms: list[float] = field(default_factory=list)
    status: int = 200


@asynccontextmanager
async def chromium() -> AsyncIterator[Browser]:
    executable = chromium_executable()
    if executable is None:
        raise SystemExit(MISSING)
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            await browser.close()


async def measure_loads(browser: Browser, url: str, samples: int) -> Loads:
    loads = Loads()
    for _ in range(samples):
        context = await browser.new_context(viewport=VIEWPORT)  # type: ignore[arg-type]
        try:
            page = await context.new_page()
            response = await page.goto(url, wait_until="load")
            if response is None or response.status != 200:
                loads.status = response.status if response else 0
                return loads
            timing = await page.evaluate(TIMING)
        finally:
            await context.close()
        loads.loads_ms.append(timing["load"])
        if timing["fcp"] is not None:
            loads.paints_ms.append(timing["fcp"])
    return loads
