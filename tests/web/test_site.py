"""The site as served: every asset from the coordinator itself (no CDN), and the anti-phishing facts on
every page (the program ID, the wallet bundle's SHA-256) true of what is served."""

from __future__ import annotations

import hashlib
from urllib.parse import urlsplit

import httpx
import pytest

from gpunet.idl import PROGRAM_ID


@pytest.mark.timeout(300)
async def test_pages_load_only_local_assets_and_publish_the_true_bundle_hash(web_stack, browser) -> None:
    page = await browser.new_page()
    origins: set[str] = set()
    page.on("request", lambda request: origins.add(urlsplit(request.url).netloc))
    response = await page.goto(web_stack.url)
    assert response is not None and response.status == 200
    await page.wait_for_load_state("networkidle")
    assert origins == {urlsplit(web_stack.url).netloc}, origins

    async with httpx.AsyncClient(base_url=web_stack.coordinator.api_url) as http:
        served = (await http.get("/web/static/wallet.js")).content
        published = (await http.get("/web/bundle")).json()
    assert await page.locator("[data-bundle-sha256]").inner_text() == hashlib.sha256(served).hexdigest()
    assert published["sha256"] == hashlib.sha256(served).hexdigest()
    assert await page.locator("[data-program]").inner_text() == str(PROGRAM_ID) == published["program"]


# What each page must give a screen reader and a keyboard: the page's language, one top heading, a
# name for every control and chart; the names come from the DOM as the browser exposes it.
_UNNAMED = """() => {
    const named = (el) => (el.labels && el.labels.length > 0) || el.getAttribute('aria-label')
        || el.getAttribute('aria-labelledby') || (el.tagName === 'BUTTON' && el.textContent.trim())
        || (el.tagName === 'A' && el.textContent.trim());
    const controls = [...document.querySelectorAll('input:not([type=hidden]), select, textarea, button, a[href]')];
    const unnamed = controls.filter((el) => !named(el)).map((el) => el.outerHTML.slice(0, 120));
    const charts = [...document.querySelectorAll('svg:not([aria-hidden=true])')]
        .filter((svg) => svg.getAttribute('role') !== 'img' || !(svg.getAttribute('aria-label')
            || (svg.getAttribute('aria-labelledby') && document.getElementById(svg.getAttribute('aria-labelledby')))))
        .map((svg) => svg.outerHTML.slice(0, 120));
    return {lang: document.documentElement.lang, h1: document.querySelectorAll('h1').length, unnamed, charts};
}"""


@pytest.mark.timeout(300)
async def test_every_page_names_its_controls_and_charts_and_starts_with_a_skip_link(web_stack, browser) -> None:
    await web_stack.running_lease()
    context = await browser.new_context(viewport={"width": 1280, "height": 800})
    page = await context.new_page()
    lease = (await (await page.request.get(f"{web_stack.coordinator.api_url}/leases")).json())["items"][0]
    paths = [
        "",
        "settlements",
        f"leases/{lease['lease']}",
        f"providers/{web_stack.demo.suppliers[0].wallet.pubkey()}",
        f"nodes/{web_stack.demo.suppliers[0].node_key.pubkey()}",
        "app",
        "app/supplier",
        "app/stake",
        "search?q=not-an-address",
    ]
    for path in paths:
        await page.goto(web_stack.url + path)
        await page.wait_for_load_state("networkidle")
        found = await page.evaluate(_UNNAMED)
        assert found == {"lang": "en", "h1": 1, "unnamed": [], "charts": []}, (path, found)
        # The first Tab lands on the skip link, which leads to the page's content.
        await page.keyboard.press("Tab")
        assert await page.evaluate("document.activeElement.getAttribute('href')") == "#main", path
    await context.close()
