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
