"""The read API, served by uvicorn on a real port over the ledger the indexer writes."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from urllib.parse import quote

import httpx
import pytest
import uvicorn
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families
from solana.rpc.async_api import AsyncClient
from solders.keypair import Keypair
from typer.testing import CliRunner

from coordinator.api import app as api_app
from coordinator.api import create_app
from coordinator.db import connect_pool, nodes
from coordinator.db.migrate import migrate
from coordinator.indexer.rpc import ChainRpc
from coordinator.settings import Settings
from gpunet.amounts import U64_MAX, parse_u64
from gpunet.audit import audit_lease, audit_provider, evidence_hash
from gpunet.cli import app as gpunet_app
from gpunet.exits import Exit
from gpunet.localnet import free_ports
from gpunet.testbed import Market

from .conftest import chain_events, eventually


@pytest.fixture
def api_url(node, database_url):
    """The API in its own thread and event loop, as `python -m coordinator api` runs it."""
    [port] = free_ports(1)
    settings = Settings(rpc_url=node.url, ws_url=node.ws_url, database_url=database_url)
    holder: dict[str, uvicorn.Server] = {}

    async def main() -> None:
        pool = await connect_pool(database_url)
        async with pool.acquire() as conn:
            await migrate(conn)
        rpc = ChainRpc(node.url)
        server = uvicorn.Server(
            uvicorn.Config(
                create_app(pool, rpc, settings), host="127.0.0.1", port=port, log_level="warning", lifespan="off"
            )
        )
        holder["server"] = server
        try:
            await server.serve()
        finally:
            await rpc.close()
            await pool.close()

    thread = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, "the API did not come up"
        time.sleep(0.1)
    yield url
    holder["server"].should_exit = True
    thread.join(timeout=30)


async def test_resources_filters_and_pagination(node, market: Market, indexer, pool, api_url, monkeypatch):
    ada, bob = await market.supplier(), await market.supplier()
    dev = await market.client()
    lease = await market.open_lease(dev, U64_MAX, gpus=4)  # an id JavaScript's numbers cannot hold
    await market.assign(lease, [(ada, 2), (bob, 2)])
    await market.settle(lease, ada)
    expected = await chain_events(node, market.signatures)

    async with httpx.AsyncClient(base_url=api_url, timeout=30) as http:

        async def caught_up() -> bool:
            return (await http.get("/events", params={"limit": 500})).json()["items"].__len__() == len(expected)

        await eventually(caught_up, what="the API to show every event")

        assert (await http.get("/health")).json()["status"] == "ok"
        # the API alone (no coordinator, so no attester): ready when its database and RPC answer
        ready = await http.get("/readyz")
        assert ready.status_code == 200
        assert ready.json() == {"status": "ready", "checks": {"database": "ok", "rpc": "ok"}}
        providers = (await http.get("/providers")).json()
        assert len(providers["items"]) == 2 and providers["next_offset"] is None
        page = (await http.get("/providers", params={"limit": 1})).json()
        assert len(page["items"]) == 1 and page["next_offset"] == 1
        rest = (await http.get("/providers", params={"limit": 1, "offset": 1})).json()
        assert rest["items"][0]["provider"] != page["items"][0]["provider"] and rest["next_offset"] is None
        mine = (await http.get("/providers", params={"authority": str(ada.wallet.pubkey())})).json()["items"]
        assert [p["provider"] for p in mine] == [str(ada.provider)] and parse_u64(mine[0]["earned"]) > 0

        # every u64 is a string of digits (a JavaScript client would round one above 2**53), other integers not
        item = (await http.get(f"/leases/{lease}")).json()
        assert item["status"] == "active" and item["deposited"] == "12000000" and item["lease_id"] == str(U64_MAX)
        assert sorted(a["node"] for a in item["assignments"]) == sorted([str(ada.node), str(bob.node)])
        assert item["assignments_next_offset"] is None and type(item["gpu_count"]) is int
        settlements = (await http.get("/settlements", params={"lease": str(lease)})).json()["items"]
        assert [(s["node"], s["epoch"]) for s in settlements] == [(str(ada.node), "1")]
        [settled] = (await http.get("/events", params={"name": "UsageSettled"})).json()["items"]
        assert settled["data"]["payout"] == settlements[0]["payout"] and settled["data"]["epoch"] == "1"
        assert type(settled["data"]["through"]) is int and type(settled["slot"]) is int  # i64 and slot: numbers
        [opened] = (await http.get("/events", params={"name": "LeaseOpened"})).json()["items"]
        assert (opened["data"]["lease_id"], opened["data"]["deposit"]) == (str(U64_MAX), "12000000")
        assert type(opened["data"]["terms"]["max_price_per_gpu_hour"]) is str  # a nested u64 too
        assert type(opened["data"]["terms"]["gpu_count"]) is int

        # a lease's assignments page on at /assignments, in the order its item lists them
        shares = [(a["node"], a["active"]) for a in item["assignments"]]
        first = (await http.get("/assignments", params={"lease": str(lease), "limit": 1})).json()
        second = (await http.get("/assignments", params={"lease": str(lease), "limit": 1, "offset": 1})).json()
        assert (first["next_offset"], second["next_offset"]) == (1, None)
        assert [(a["node"], a["active"]) for a in first["items"] + second["items"]] == shares
        assert (await http.get("/assignments", params={"node": str(bob.node)})).json()["items"][0]["gpus"] == 2
        # a lease item lists one page of them at most, and says where the rest are
        monkeypatch.setattr(api_app, "LEASE_ASSIGNMENTS", 1)
        short = (await http.get(f"/leases/{lease}")).json()
        assert short["assignments"] == first["items"] and short["assignments_next_offset"] == 1
        assert (await http.get("/settlements", params={"node": str(bob.node)})).json()["items"] == []
        assert (
            len((await http.get("/nodes", params={"provider": str(bob.provider), "jailed": "false"})).json()["items"])
            == 1
        )
        assert (await http.get("/leases", params={"status": "closed"})).json()["items"] == []
        names = [e["name"] for e in (await http.get("/events", params={"name": "UsageSettled"})).json()["items"]]
        assert names == ["UsageSettled"]

        audit = (await http.get(f"/audit/leases/{lease}")).json()
        assert audit["ok"] and audit["events"] == 3
        by_wallet = (await http.get(f"/audit/providers/{ada.wallet.pubkey()}")).json()
        assert (by_wallet["subject"], by_wallet["given"], by_wallet["ok"]) == (str(ada.provider), "wallet", True)
        by_account = (await http.get(f"/audit/providers/{ada.provider}")).json()
        assert (by_account["given"], by_account["events"]) == ("provider account", by_wallet["events"])
        metrics = {
            f.name: f.samples[0].value for f in text_string_to_metric_families((await http.get("/metrics")).text)
        }
        assert metrics["gpunet_indexer_events_indexed"] == len(expected)  # counters lose "_total" in the parser
        assert metrics["gpunet_indexer_backfill_runs"] >= 1 and metrics["gpunet_indexer_lines_skipped"] == 0
        assert 0 <= metrics["gpunet_indexer_lag_slots"] < 10_000 and metrics["gpunet_indexer_lag_seconds"] >= 0
        doc = (await http.get("/openapi.json")).json()
        assert doc["openapi"].startswith("3.") and "/settlements" in doc["paths"]


async def test_each_slash_serves_its_evidence_and_the_audit_checks_it_against_the_chain(
    node, market: Market, indexer, pool, api_url
):
    ada = await market.supplier()
    dev = await market.client()
    lease = await market.open_lease(dev, 5, gpus=2)
    await market.assign(lease, [(ada, 2)])
    evidence = {"fault": "MissedHeartbeats", "node_key": str(ada.node_key.pubkey()), "silent_seconds": 12.5}
    digest = evidence_hash(evidence)
    slash = str(await market.slash(ada, victim=(lease, dev), evidence_hash=digest))
    async with pool.acquire() as conn:
        fault = await nodes.record_fault(conn, ada.node_key.pubkey(), str(lease), "MissedHeartbeats", evidence, digest)
        await nodes.set_slash_signature(conn, fault, slash)

    async with httpx.AsyncClient(base_url=api_url, timeout=30) as http:

        async def indexed() -> bool:
            return bool((await http.get("/slashes", params={"provider": str(ada.provider)})).json()["items"])

        await eventually(indexed, what="the slash indexed")
        served = (await http.get(f"/slashes/{slash}/evidence")).json()
        assert served["signature"] == slash
        [item] = served["items"]
        assert (item["evidence"], item["evidence_hash"], item["node"]) == (evidence, digest.hex(), str(ada.node))
        unknown = await http.get(f"/slashes/{Keypair().sign_message(b'x')}/evidence")
        assert unknown.status_code == 404 and "no slash in transaction" in unknown.json()["error"]
        assert (await http.get("/slashes/nope/evidence")).status_code == 400

    async def audited() -> tuple[list[tuple[str, str]], bool, bool]:
        async with AsyncClient(node.url) as client:
            reports = [
                await audit_provider(client, ada.wallet.pubkey(), api_url),
                await audit_lease(client, lease, api_url),
            ]
        [statuses] = {tuple((str(e.signature), e.status) for e in r.evidence) for r in reports}
        return list(statuses), all(r.ok for r in reports), all(r.evidence_ok for r in reports)

    assert await audited() == ([(slash, "matches")], True, True)
    async with AsyncClient(node.url) as client:
        unchecked = await audit_provider(client, ada.wallet.pubkey())  # no coordinator: nothing to fetch
    assert [e.status for e in unchecked.evidence] == ["unchecked"] and unchecked.evidence_ok

    def cli_audit() -> tuple[int, dict]:
        args = ["audit", "--provider", str(ada.wallet.pubkey()), "--coordinator", api_url, "--url", node.url, "--json"]
        result = CliRunner().invoke(gpunet_app, args)
        return result.exit_code, json.loads(result.stdout)

    code, shown = await asyncio.to_thread(cli_audit)
    assert (code, shown["ok"], shown["evidence"][0]["status"]) == (0, True, "matches")
    assert (shown["evidence"][0]["fault"], shown["evidence"][0]["node_key"]) == (
        "MissedHeartbeats",
        str(ada.node_key.pubkey()),
    )

    # Evidence that does not hash to the chain's value: the payments still agree, the evidence does not.
    async with pool.acquire() as conn:
        await conn.execute("UPDATE faults SET evidence = jsonb_set(evidence, '{silent_seconds}', '3')")
    assert await audited() == ([(slash, "differs")], True, False)
    code, shown = await asyncio.to_thread(cli_audit)
    assert (code, shown["ok"], shown["evidence_ok"]) == (Exit.EVIDENCE, True, False)
    assert shown["evidence"][0]["served_hash"] != shown["evidence"][0]["on_chain"] == digest.hex()

    # No evidence at all for the slash: missing, not a failed payment check.
    async with pool.acquire() as conn:
        await conn.execute("DELETE FROM faults")
    assert await audited() == ([(slash, "missing")], True, False)


@pytest.mark.parametrize(
    ("path", "status", "message"),
    [
        ("/leases?status=bogus", 400, "status: 'bogus' is not one of open, active, closing, closed"),
        ("/settlements?limit=0", 400, "limit: 0 is out of range [1, 500]"),
        ("/settlements?limit=ten", 400, "limit: 'ten' is not an integer"),
        ("/settlements?offset=-1", 400, "offset: -1 is out of range"),
        ("/nodes?jailed=maybe", 400, "jailed: expected true or false"),
        ("/nodes?provider=not-a-key", 400, "provider: 'not-a-key' is not a base58 public key"),
        ("/providers?colour=blue", 400, "unknown parameter 'colour'"),
        ("/providers?limit=1&limit=2", 400, "limit: given more than once"),
        ("/events?signature=abc", 400, "signature: 'abc' is not a base58 transaction signature"),
        ("/slashes?from_slot=9223372036854775808", 400, "from_slot: 9223372036854775808 is out of range"),
        ("/leases/xyz", 400, "lease: 'xyz' is not a base58 public key"),
        ("/audit/providers/0OIl", 400, "provider: '0OIl' is not a base58 public key"),
        (f"/leases/{Keypair().pubkey()}", 404, "no lease"),
        # not found is no failed audit ("ok": false): a 404 that says so
        (f"/audit/leases/{Keypair().pubkey()}", 404, "neither the ledger nor the chain has it"),
        (f"/audit/providers/{Keypair().pubkey()}", 404, "is neither a provider account nor the wallet"),
        ("/no-such-thing", 404, "Not Found"),
        # every list pages, within the same limits
        ("/assignments?limit=501", 400, "limit: 501 is out of range [1, 500]"),
        (f"/nodes/{Keypair().pubkey()}/verifications?limit=0", 400, "limit: 0 is out of range [1, 500]"),
        (f"/nodes/{Keypair().pubkey()}/verifications?limit=501", 400, "limit: 501 is out of range [1, 500]"),
        (f"/slashes/{Keypair().sign_message(b'x')}/evidence?limit=0", 400, "limit: 0 is out of range [1, 500]"),
        (f"/slashes/{Keypair().sign_message(b'x')}/evidence?offset=-1", 400, "offset: -1 is out of range"),
    ],
)
def test_bad_parameters_get_a_4xx_with_a_message(api_url, path, status, message):
    response = httpx.get(api_url + path, timeout=30)
    assert response.status_code == status
    assert message in response.json()["error"]


def _value(schema: dict) -> st.SearchStrategy:
    """Values for one parameter: mostly what its schema allows, often anything at all."""
    anything = st.text(max_size=90)
    if schema.get("type") == "integer":
        valid = st.integers(schema.get("minimum", -(2**70)), schema.get("maximum", 2**70)).map(str)
        return st.one_of(valid, st.integers(-(2**70), 2**70).map(str), anything)
    if schema.get("format") == "u64":
        digits = st.integers(0, 2**70).map(str)
        return st.one_of(digits, st.integers(-(2**70), 2**70).map(str), anything)
    if schema.get("type") == "boolean":
        return st.one_of(st.sampled_from(["true", "false"]), anything)
    if "enum" in schema:
        return st.one_of(st.sampled_from(schema["enum"]), anything)
    keys = st.builds(lambda: str(Keypair().pubkey()))
    base58 = st.text("123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz", min_size=1, max_size=90)
    return st.one_of(keys, base58, anything)


def test_the_openapi_document_runs_without_a_server_error(api_url):
    """Hypothesis walks every operation of /openapi.json with generated parameters: nothing is a 5xx."""
    doc = httpx.get(f"{api_url}/openapi.json", timeout=30).json()
    # every read (the signed writes, job submission and the operator's resume, have their own tests)
    operations = [(path, op["get"]["parameters"]) for path, op in doc["paths"].items() if "get" in op]

    @st.composite
    def requests(draw):
        path, parameters = draw(st.sampled_from(operations))
        query = {}
        for p in parameters:
            if p["in"] == "path":
                key = draw(_value(p["schema"]).filter(lambda v: v.strip(".") != ""))
                path = path.replace("{" + p["name"] + "}", quote(key, safe=""))
            elif draw(st.booleans()):
                query[p["name"]] = draw(_value(p["schema"]))
        return path, query

    with httpx.Client(base_url=api_url, timeout=30) as http:

        @hypothesis_settings(max_examples=300, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(requests())
        def run(request) -> None:
            path, query = request
            response = http.get(path, params=query)
            assert response.status_code < 500, (path, query, response.text)
            if response.status_code >= 400:
                assert response.json()["error"]

        run()


def test_schemathesis_finds_no_server_error_or_contract_violation(api_url):
    """Schemathesis, through its Python API: every operation of /openapi.json, its checks."""
    import schemathesis

    schemathesis.openapi.format("base58-pubkey", st.builds(lambda: str(Keypair().pubkey())))
    schemathesis.openapi.format("base58-signature", st.builds(lambda: str(Keypair().sign_message(b"x"))))
    schemathesis.openapi.format("u64", st.integers(0, 2**64 - 1).map(str))
    schema = schemathesis.openapi.from_url(f"{api_url}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    paths = httpx.get(f"{api_url}/openapi.json", timeout=30).json()["paths"]
    assert len(operations) == sum(len(methods) for methods in paths.values())
    for operation in operations:

        @hypothesis_settings(max_examples=25, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(operation.as_strategy())
        def run(case) -> None:
            case.call_and_validate()

        run()
