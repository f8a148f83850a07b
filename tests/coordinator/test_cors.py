"""CORS by configuration (GPUNET_API_CORS_ORIGINS): the origins it names may call the API from a
browser, GET and the client routes' POST with the signed-request headers; any other origin, and every
origin by default, gets no CORS header at all, so a browser keeps its pages from reading the answers."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pydantic
import pytest

from coordinator.api import create_app
from coordinator.indexer.rpc import ChainRpc
from coordinator.settings import Settings
from gpunet.protocol import REQUEST_AT_HEADER, REQUEST_NONCE_HEADER, REQUEST_SIGNATURE_HEADER, REQUEST_WALLET_HEADER

ALLOWED = "https://explorer.example"
SIGNED = ", ".join([REQUEST_AT_HEADER, REQUEST_WALLET_HEADER, REQUEST_NONCE_HEADER, REQUEST_SIGNATURE_HEADER])


def _api(pool, origins: str) -> httpx.AsyncClient:
    """The API app over the test's database; no route asked here reads the chain."""
    app = create_app(pool, ChainRpc("http://127.0.0.1:9"), Settings(api_cors_origins=origins))
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api")


@pytest.fixture
async def configured(pool) -> AsyncIterator[httpx.AsyncClient]:
    async with _api(pool, f"{ALLOWED}, http://127.0.0.1:5173") as http:
        yield http


def _preflight(origin: str, method: str = "POST", headers: str = SIGNED) -> dict[str, str]:
    return {"Origin": origin, "Access-Control-Request-Method": method, "Access-Control-Request-Headers": headers}


async def test_an_allowed_origin_gets_the_headers(configured: httpx.AsyncClient) -> None:
    read = await configured.get("/healthz", headers={"Origin": ALLOWED})
    assert read.status_code == 200 and read.headers["access-control-allow-origin"] == ALLOWED
    assert "access-control-allow-credentials" not in read.headers  # signed in headers, never by a cookie
    # an error answer too, so that the page can show why
    refused = await configured.get("/settlements?limit=0", headers={"Origin": "http://127.0.0.1:5173"})
    assert refused.status_code == 400 and refused.headers["access-control-allow-origin"] == "http://127.0.0.1:5173"
    # a signed client request's preflight: POST with the X-Gpunet-* headers
    lease = "11111111111111111111111111111111"
    preflight = await configured.options(f"/leases/{lease}/job", headers=_preflight(ALLOWED))
    assert preflight.status_code == 200, preflight.text
    assert preflight.headers["access-control-allow-origin"] == ALLOWED
    allowed = {h.strip().lower() for h in preflight.headers["access-control-allow-headers"].split(",")}
    assert {h.lower() for h in SIGNED.split(", ")} | {"content-type"} <= allowed
    # DELETE: a page revokes a lease's endpoint token (DELETE /leases/{key}/endpoint-tokens/{id})
    assert {m.strip() for m in preflight.headers["access-control-allow-methods"].split(",")} == {
        "GET",
        "POST",
        "DELETE",
    }


async def test_another_origin_method_or_header_gets_none(configured: httpx.AsyncClient) -> None:
    read = await configured.get("/healthz", headers={"Origin": "https://phish.example"})
    assert read.status_code == 200 and "access-control-allow-origin" not in read.headers
    # a prefix, another scheme or port is another origin
    for origin in ("https://explorer.example.phish.example", "http://explorer.example", "http://127.0.0.1:5174"):
        assert (
            "access-control-allow-origin" not in (await configured.get("/healthz", headers={"Origin": origin})).headers
        )
    preflight = await configured.options("/healthz", headers=_preflight("https://phish.example", "GET", ""))
    assert preflight.status_code == 400 and "access-control-allow-origin" not in preflight.headers
    # the checkpoint store's PUT is for nodes, not pages; nor is any header but the signed request's
    assert (await configured.options("/healthz", headers=_preflight(ALLOWED, "PUT", ""))).status_code == 400
    assert (await configured.options("/healthz", headers=_preflight(ALLOWED, "GET", "X-Other"))).status_code == 400


async def test_by_default_no_origin_gets_any_header(pool) -> None:
    async with _api(pool, "") as http:
        read = await http.get("/healthz", headers={"Origin": ALLOWED})
        assert read.status_code == 200 and not [h for h in read.headers if h.startswith("access-control-")]
        preflight = await http.options("/healthz", headers=_preflight(ALLOWED, "GET", ""))
        assert not [h for h in preflight.headers if h.startswith("access-control-")]


@pytest.mark.parametrize(
    "origin", ["https://explorer.example/", "explorer.example", "https://x.example/app", "ftp://x"]
)
def test_a_setting_that_is_no_origin_is_refused(origin: str) -> None:
    """A path or a trailing slash would never match a browser's Origin header: refused at start, not silently."""
    with pytest.raises(pydantic.ValidationError, match="not a web origin"):
        Settings(api_cors_origins=f"{ALLOWED},{origin}")
    assert Settings(api_cors_origins=f" {ALLOWED} ,*").cors_origins == [ALLOWED, "*"]
