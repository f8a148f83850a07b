"""The OpenAPI document holds to what the API sends: every route's real answers (over a ledger with
every kind of event, and a running coordinator's client routes) validate against the schema the
document gives for that status, every GET route of the document is exercised, and required
parameters are marked required."""

from __future__ import annotations

import asyncio
import contextlib
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import jsonschema_rs
import pytest
import uvicorn
from solders.keypair import Keypair
from starlette.applications import Starlette

from coordinator.api import create_app
from coordinator.api.schemas import TABLE_COLUMNS
from coordinator.api.work import work_routes
from coordinator.checkpoints import CheckpointStore, DiskBlobs, checkpoint_routes
from coordinator.db import nodes, rewards, verifications
from coordinator.db.verifications import Verdict
from coordinator.indexer.rpc import ChainRpc
from coordinator.service import Coordinator
from coordinator.state import Telemetry
from gpunet.checkpoint import (
    FileEntry,
    Manifest,
    chunk_id,
    lease_key,
    seal_chunk,
    seal_key,
    sign_manifest,
    signed_headers,
)
from gpunet.idl import idl_json
from gpunet.protocol import (
    CheckpointFile,
    Expose,
    GpuTelemetry,
    Heartbeat,
    JobSpec,
    job_message,
    sign_request,
)
from gpunet.reward_epoch import DEFAULT_MULTIPLIERS, EpochInputs, NodeUptime, PoolStake
from gpunet.secrets import seal
from gpunet.testbed import Market

from .conftest import eventually
from .world import live_settings

_PAGES = ("/providers", "/nodes", "/leases", "/assignments", "/settlements", "/slashes", "/stake_changes", "/events")


@pytest.fixture
async def served(node, market: Market, pool, database_url):
    """A running coordinator's API over a ledger holding every kind of event, a recorded slash evidence
    and an open lease with a job (no worker online: it waits)."""
    world = await market.every_event_kind()
    client = await market.client()
    waiting = await market.open_lease(client, 2, gpus=2)
    settings = live_settings(node, database_url)
    coordinator = await Coordinator(settings, pool, market.attester).start()
    rpc = ChainRpc(settings.rpc_url, settings.commitment)
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(pool, rpc, settings, work_routes(coordinator), coordinator),
            host="127.0.0.1",
            port=settings.api_port,
            log_level="warning",
            lifespan="off",
        )
    )
    task = asyncio.create_task(server.serve())
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{settings.api_port}", timeout=30) as http:

            async def indexed() -> bool:
                with contextlib.suppress(httpx.HTTPError):
                    return (await http.get(f"/leases/{waiting}")).status_code == 200
                return False

            await eventually(indexed, what="the ledger indexed")
            [slash] = (await http.get("/slashes")).json()["items"]
            bob = world["suppliers"][1]
            async with pool.acquire() as conn:
                await nodes.record_fault(
                    conn, bob.node_key.pubkey(), str(world["lease"]), "MissedHeartbeats", {"x": 1}, bytes(range(32))
                )
            # bob's node's last heartbeat, as worker messages keep it (no worker runs here)
            coordinator.shared.telemetry[bob.node_key.pubkey()] = Telemetry(
                time.time(),
                Heartbeat(simulated=True, healthy=True, gpus=[GpuTelemetry(uuid="GPU-sim-1", healthy=True,
                          utilization_pct=50, memory_used_mib=1024, temperature_c=61, power_w=300.5)]),
            )  # fmt: skip
            yield http, world, {"lease": waiting, "client": client, "slash": slash["signature"]}
    finally:
        server.should_exit = True
        await task
        await rpc.close()
        await coordinator.stop()


def _check(doc: dict[str, Any], path: str, method: str, response: httpx.Response) -> None:
    """The answer validates against the document's schema for its status (which must be documented)."""
    documented = doc["paths"][path][method]["responses"]
    assert str(response.status_code) in documented, (path, response.status_code, response.text)
    content = documented[str(response.status_code)]["content"]
    if "text/plain" in content:
        assert response.headers["content-type"].startswith("text/plain")
        return
    if "application/octet-stream" in content:
        assert response.headers["content-type"].startswith("application/octet-stream")
        return
    schema = content["application/json"]["schema"]
    errors = [
        f"{'/'.join(map(str, e.instance_path))}: {e.message}"
        for e in jsonschema_rs.Draft202012Validator(schema).iter_errors(response.json())
    ]
    assert not errors, (path, response.status_code, errors[:5])


async def test_every_answer_holds_to_the_documented_schema(served, pool) -> None:
    http, world, extra = served
    doc = (await http.get("/openapi.json")).json()
    ada, bob, _ = world["suppliers"]
    lease, waiting = str(world["lease"]), str(extra["lease"])

    # The waiting lease gets a job: the POST's answer is documented too.
    client = extra["client"]
    spec = JobSpec(command=["python", "train.py"], secrets=["TOKEN"], expose=[Expose(name="api", port=8000)])
    signature = client.wallet.sign_message(job_message(extra["lease"], spec, None, 1))
    body = {"job": spec.model_dump(mode="json"), "gpus_per_node": None, "job_number": 1, "signature": str(signature)}
    accepted = await http.post(f"/leases/{waiting}/job", json=body)
    assert accepted.status_code == 201
    _check(doc, "/leases/{key}/job", "post", accepted)

    # GPU verification's evidence for bob's node: a compute check passed, a memory check failed, a
    # verdict on its inventory, and a real GPU's compute check too slow for an uncalibrated model.
    challenge = Verdict(bob.node_key.pubkey(), "H100", True, "passed", gpu_index=0, gpu_uuid="GPU-sim-1",
                        challenge="ab" * 16, seed="01" * 16, n=64, depth=256, products=15, expected_seconds=1.5,
                        deadline_seconds=2.9, committed_seconds=1.6, kind="compute")  # fmt: skip
    memory = Verdict(bob.node_key.pubkey(), "H100", True, "failed", "GPU 0 memory check: too late", gpu_index=0,
                     gpu_uuid="GPU-sim-1", challenge="cd" * 16, seed="02" * 16, expected_seconds=10.0,
                     deadline_seconds=13.5, committed_seconds=10.1, kind="memory", lanes=4, blocks=256,
                     block_bytes=1024, answer_deadline_seconds=1.0)  # fmt: skip
    async with pool.acquire() as conn:
        await verifications.record(conn, challenge)
        await verifications.record(conn, memory)
        await verifications.record(conn, Verdict(bob.node_key.pubkey(), "H100", True, "unfit", "its GPUs differ"))
        await verifications.record(conn, Verdict(
            bob.node_key.pubkey(), "H100", False, "too_slow", "GPU 0 too slow (uncalibrated): committed in 12.3 s",
            gpu_index=0, gpu_uuid="GPU-real-1", challenge="ef" * 16, seed="03" * 16, n=4096, depth=8192, products=15,
            expected_seconds=8.3, deadline_seconds=12.4, committed_seconds=12.5, kind="compute",
            flops=2 * 15 * 4096 * 4096 * 8192,
        ))  # fmt: skip
    # four records page as two and two, newest first, as the whole list has them
    checks = f"/nodes/{bob.node}/verifications"
    whole = (await http.get(checks)).json()
    pages = [(await http.get(checks, params={"limit": 2, "offset": at})).json() for at in (0, 2)]
    assert [p["next_offset"] for p in pages] == [2, None] and whole["next_offset"] is None
    assert (
        [r["id"] for p in pages for r in p["items"]]
        == [r["id"] for r in whole["items"]]
        == sorted((r["id"] for r in whole["items"]), reverse=True)
    )
    assert [r["verdict"] for r in whole["items"]] == ["too_slow", "unfit", "failed", "passed"]
    # a page past one transaction's slashes is empty, not a 404
    evidence = f"/slashes/{extra['slash']}/evidence"
    assert (await http.get(evidence, params={"limit": 1})).json()["next_offset"] is None
    past = await http.get(evidence, params={"offset": 1})
    assert past.status_code == 200 and past.json()["items"] == []

    # The waiting lease's latest checkpoint, read by its client (a signed GET) and refused unsigned.
    async with pool.acquire() as conn:
        await conn.execute(
            "INSERT INTO checkpoints (lease, node_key, files) VALUES ($1, $2, $3)",
            waiting, str(bob.node_key.pubkey()), json.dumps([CheckpointFile.of("step", b"7").model_dump()]),
        )  # fmt: skip
    signed = sign_request(client.wallet, "GET", f"/leases/{waiting}/files")
    files = await http.get(f"/leases/{waiting}/files", headers=signed)
    assert files.status_code == 200, files.text
    _check(doc, "/leases/{key}/files", "get", files)
    _check(doc, "/leases/{key}/files", "get", await http.get(f"/leases/{waiting}/files"))

    stranger_lease = str(Keypair().pubkey())
    # Its job's secret sealed to bob's node (a signed POST), then its job view, signed, and refused unsigned.
    sealed = json.dumps({"job_number": 1, "nodes": {str(bob.node_key.pubkey()): {"TOKEN": seal(bob.node_key.pubkey(),
        "s3cret")}}}).encode()  # fmt: skip
    secrets_path = f"/leases/{waiting}/secrets"
    given = await http.post(secrets_path, content=sealed, headers=sign_request(client.wallet, "POST", secrets_path,
        sealed))  # fmt: skip
    assert given.status_code == 201, given.text
    _check(doc, "/leases/{key}/secrets", "post", given)
    _check(doc, "/leases/{key}/secrets", "post", await http.post(secrets_path, content=sealed))  # unsigned: 401
    for url, status in [
        (f"/leases/{waiting}/job", 200),
        (f"/leases/{waiting}/job?tail=5", 200),
        (f"/leases/{stranger_lease}/job", 404),
    ]:
        response = await http.get(url, headers=sign_request(client.wallet, "GET", url))
        assert response.status_code == status, (url, response.text)
        _check(doc, "/leases/{key}/job", "get", response)
        if status == 200:
            assert response.json()["secrets_sealed_to"] == [str(bob.node_key.pubkey())]
    unsigned = await http.get(f"/leases/{waiting}/job")
    assert unsigned.status_code == 401 and "job" not in unsigned.json()
    _check(doc, "/leases/{key}/job", "get", unsigned)

    # The lease's checkpoint key sealed to bob's node (a signed POST); the job view lists the node.
    key = lease_key(client.wallet, waiting)
    keyed = json.dumps({"nodes": {str(bob.node_key.pubkey()): seal_key(bob.node_key.pubkey(), key)}}).encode()
    key_path = f"/leases/{waiting}/checkpoint-key"
    given = await http.post(key_path, content=keyed, headers=sign_request(client.wallet, "POST", key_path, keyed))
    assert given.status_code == 201, given.text
    _check(doc, "/leases/{key}/checkpoint-key", "post", given)
    _check(doc, "/leases/{key}/checkpoint-key", "post", await http.post(key_path, content=keyed))  # unsigned: 401
    view_path = f"/leases/{waiting}/job"
    view = await http.get(view_path, headers=sign_request(client.wallet, "GET", view_path))
    assert view.json()["checkpoint_key_sealed_to"] == [str(bob.node_key.pubkey())]

    # The checkpoint store's routes: on the coordinator, a node without a share of the lease (403) and
    # an unsigned request (401); every other answer from the same routes over a store that lets bob's node in.
    checkpoint_gets = await _checkpoint_answers(doc, http, waiting, bob.node_key, key)
    endpoint_gets = await _endpoint_answers(doc, http, client.wallet, waiting, lease)

    # An epoch's reward tree as the coordinator keeps it (its rewards loop builds them from samples).
    inputs = EpochInputs(900, 10**19, 24, 1, 5_000, DEFAULT_MULTIPLIERS,
                         [NodeUptime(str(ada.node), str(ada.provider), 1, 2, 24, True)],
                         [PoolStake(str(ada.provider), 100 * 10**6, 0)])  # fmt: skip
    async with pool.acquire() as conn:
        await rewards.record_epoch(conn, inputs, bytes(32), 10**19, 1)

    stranger = str(Keypair().pubkey())
    requests: list[tuple[str, str, dict[str, Any], int]] = [  # (document path, URL, query, expected status)
        ("/rewards/epochs", "/rewards/epochs", {}, 200),
        ("/rewards/epochs", "/rewards/epochs", {"limit": 0}, 400),
        ("/rewards/epochs/{epoch}", "/rewards/epochs/900", {}, 200),
        ("/rewards/epochs/{epoch}", "/rewards/epochs/901", {}, 404),
        ("/rewards/epochs/{epoch}", "/rewards/epochs/-1", {}, 400),
        ("/rewards/epochs/{epoch}", "/rewards/epochs/900", {"x": 1}, 400),
        ("/health", "/health", {}, 200),
        ("/healthz", "/healthz", {}, 200),
        ("/readyz", "/readyz", {}, 200),
        ("/nodes/{key}/telemetry", f"/nodes/{bob.node_key.pubkey()}/telemetry", {}, 200),
        ("/nodes/{key}/telemetry", f"/nodes/{bob.node}/telemetry", {}, 200),
        ("/nodes/{key}/telemetry", f"/nodes/{stranger}/telemetry", {}, 404),
        ("/metrics", "/metrics", {}, 200),
        ("/providers/{key}", f"/providers/{ada.provider}", {}, 200),
        ("/providers/{key}", f"/providers/{stranger}", {}, 404),
        ("/nodes/{key}", f"/nodes/{bob.node}", {}, 200),
        ("/nodes/{key}/verifications", f"/nodes/{bob.node}/verifications", {}, 200),
        ("/nodes/{key}/verifications", f"/nodes/{bob.node}/verifications", {"limit": 2}, 200),
        ("/nodes/{key}/verifications", f"/nodes/{bob.node}/verifications", {"limit": 0}, 400),
        ("/nodes/{key}/verifications", f"/nodes/{bob.node_key.pubkey()}/verifications", {}, 200),
        ("/nodes/{key}/verifications", f"/nodes/{stranger}/verifications", {}, 404),
        ("/leases/{key}", f"/leases/{lease}", {}, 200),
        ("/leases/{key}", "/leases/nope", {}, 400),
        ("/slashes/{signature}/evidence", f"/slashes/{extra['slash']}/evidence", {}, 200),
        ("/slashes/{signature}/evidence", f"/slashes/{extra['slash']}/evidence", {"offset": 1}, 200),
        ("/slashes/{signature}/evidence", f"/slashes/{Keypair().sign_message(b'x')}/evidence", {}, 404),
        ("/audit/leases/{key}", f"/audit/leases/{lease}", {}, 200),
        ("/audit/providers/{key}", f"/audit/providers/{ada.wallet.pubkey()}", {}, 200),
        ("/audit/providers/{key}", f"/audit/providers/{stranger}", {}, 404),
        ("/quote", "/quote", {"gpu_count": 1, "max_price_per_gpu_hour": 10**9}, 200),
        ("/quote", "/quote", {"max_price_per_gpu_hour": 10**9}, 400),
        ("/quote", "/quote", {"gpu_count": 1, "max_price_per_gpu_hour": "1e9"}, 400),
        ("/quote", "/quote", {"gpu_count": 1, "duration_seconds": 60}, 200),
        ("/workers", "/workers", {}, 200),
        ("/workers", "/workers", {"limit": 1, "offset": 1}, 200),
        ("/workers", "/workers", {"limit": 501}, 400),
    ]
    for path in _PAGES:
        requests += [(path, path, {}, 200), (path, path, {"limit": 1}, 200)]
    requests.append(("/events", "/events", {"colour": "blue"}, 400))

    for path, url, query, status in requests:
        response = await http.get(url, params=query)
        assert response.status_code == status, (url, query, response.text)
        _check(doc, path, "get", response)
        if path in _PAGES and status == 200:
            assert response.json()["items"], f"{path} served no rows: its row schema went unchecked"

    exercised = {path for path, *_ in requests} | {"/leases/{key}/files", "/leases/{key}/job"}
    exercised |= checkpoint_gets | endpoint_gets
    gets = {path for path, operations in doc["paths"].items() if "get" in operations}
    assert gets <= exercised, f"GET routes no answer of which is checked: {sorted(gets - exercised)}"


async def _endpoint_answers(
    doc: dict[str, Any], http: httpx.AsyncClient, wallet: Keypair, waiting: str, other: str
) -> set[str]:
    """The endpoint routes' answers for the waiting lease (its job exposes `api`; not placed yet),
    checked against the document; the GET paths exercised."""

    async def signed(method: str, url: str, body: bytes = b"") -> httpx.Response:
        return await http.request(method, url, content=body or None, headers=sign_request(wallet, method, url, body))

    created = await signed("POST", f"/leases/{waiting}/endpoint-tokens", b'{"label": "ci"}')
    assert created.status_code == 201, created.text
    _check(doc, "/leases/{key}/endpoint-tokens", "post", created)
    _check(doc, "/leases/{key}/endpoint-tokens", "post", await http.post(f"/leases/{waiting}/endpoint-tokens"))
    token = created.json()
    bearer = {"Authorization": f"Bearer {token['token']}"}
    served = "/endpoints/{lease}/{name}/{path}"
    for url, method, headers, status in [
        (f"/endpoints/{waiting}/api/v1/completions", "post", bearer, 503),  # not placed yet
        (f"/endpoints/{waiting}/api/", "get", {}, 401),
        (f"/endpoints/{waiting}/api/", "get", {"Authorization": "Bearer x"}, 400),
        (f"/endpoints/{waiting}/nope/", "get", bearer, 404),
        (f"/endpoints/{other}/api/", "get", bearer, 410),  # every_event_kind's lease is closed
        ("/endpoints/nope/api/", "get", bearer, 400),
    ]:
        answer = await http.request(method, url, headers=headers)
        assert answer.status_code == status, (url, answer.text)
        _check(doc, served, method, answer)
        if status == 503:
            assert int(answer.headers["retry-after"]) >= 1
    slash = await http.get(f"/endpoints/{waiting}/api", params={"q": "1"})
    assert slash.status_code == 308 and slash.headers["location"] == f"/endpoints/{waiting}/api/?q=1"
    assert "308" in doc["paths"]["/endpoints/{lease}/{name}"]["get"]["responses"]
    public = await signed("POST", f"/leases/{waiting}/endpoints/api", b'{"public": true}')
    assert public.status_code == 200, public.text
    _check(doc, "/leases/{key}/endpoints/{name}", "post", public)
    _check(doc, "/leases/{key}/endpoints/{name}", "post", await signed("POST", f"/leases/{waiting}/endpoints/x", b"{}"))
    for url, status in [
        (f"/leases/{waiting}/endpoints", 200),
        (f"/leases/{waiting}/endpoints/log", 200),
        (f"/leases/{waiting}/endpoints/log?tail=2", 200),
        (f"/leases/{waiting}/endpoints/log?limit=0", 400),
    ]:
        answer = await signed("GET", url)
        assert answer.status_code == status, (url, answer.text)
        _check(doc, url.split("?")[0].replace(waiting, "{key}"), "get", answer)
    for url in (f"/leases/{waiting}/endpoints", f"/leases/{waiting}/endpoints/log"):
        _check(doc, url.replace(waiting, "{key}"), "get", await http.get(url))  # unsigned: 401
    revoke = f"/leases/{waiting}/endpoint-tokens/{token['id']}"
    revoked = await signed("DELETE", revoke)
    assert revoked.status_code == 200, revoked.text
    _check(doc, "/leases/{key}/endpoint-tokens/{id}", "delete", revoked)
    _check(doc, "/leases/{key}/endpoint-tokens/{id}", "delete", await signed("DELETE", f"{revoke[:-16]}{'0' * 16}"))
    return {served, "/endpoints/{lease}/{name}", "/leases/{key}/endpoints", "/leases/{key}/endpoints/log"}


async def _checkpoint_answers(
    doc: dict[str, Any], http: httpx.AsyncClient, lease: str, node: Keypair, key: bytes
) -> set[str]:
    """Every checkpoint route's answers, checked against the document; the GET paths exercised."""
    base = f"/leases/{lease}/checkpoint"
    sealed = seal_chunk(key, lease, b"weights " * 1000)
    cid = chunk_id(sealed)
    manifest = Manifest(
        lease=lease, node_key=str(node.pubkey()), seq=1, files=[FileEntry(path="m.pt", size=8000, chunks=[cid])]
    )
    body = sign_manifest(node, manifest).model_dump_json().encode()
    calls = [  # (document path, method, URL, body)
        ("/leases/{key}/checkpoint/chunks/{id}", "put", f"{base}/chunks/{cid}", sealed),
        ("/leases/{key}/checkpoint/missing", "post", f"{base}/missing", body),
        ("/leases/{key}/checkpoint/manifests/{seq}", "put", f"{base}/manifests/1", body),
        ("/leases/{key}/checkpoint/chunks/{id}", "get", f"{base}/chunks/{cid}", b""),
        ("/leases/{key}/checkpoint/manifests", "get", f"{base}/manifests", b""),
        ("/leases/{key}/checkpoint/manifests", "get", f"{base}/manifests?rank=x", b""),
        ("/leases/{key}/checkpoint/manifests/{seq}", "get", f"{base}/manifests/1", b""),
        ("/leases/{key}/checkpoint/manifests/{seq}", "get", f"{base}/manifests/7", b""),
        ("/leases/{key}/checkpoint/chunks/{id}", "get", f"{base}/chunks/{'0' * 64}", b""),
    ]
    for path, method, url, content in calls:  # the coordinator: bob's node holds no share of this lease
        refused = await http.request(method, url, content=content, headers=signed_headers(node, method, url, content))
        assert refused.status_code == 403, refused.text
        _check(doc, path, method, refused)
        _check(doc, path, method, await http.request(method, url, content=content))  # unsigned: 401

    async def holder(lease_: str, node_key: str) -> bool:
        return lease_ == lease and node_key == str(node.pubkey())

    async def signers(lease_: str, rank: int) -> list[str]:
        return [str(node.pubkey())]

    with tempfile.TemporaryDirectory() as root:
        app = Starlette(routes=checkpoint_routes(CheckpointStore(DiskBlobs(Path(root))), holder, signers))
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://store") as store:
            statuses = []
            for path, method, url, content in calls:
                answer = await store.request(
                    method, url, content=content, headers=signed_headers(node, method, url, content)
                )
                _check(doc, path, method, answer)
                statuses.append(answer.status_code)
    assert statuses == [201, 200, 201, 200, 200, 400, 200, 404, 404]
    return {path for path, method, *_ in calls if method == "get"}


async def test_required_parameters_are_marked_required(served) -> None:
    http, _, _ = served
    doc = (await http.get("/openapi.json")).json()
    quote = {p["name"]: p["required"] for p in doc["paths"]["/quote"]["get"]["parameters"]}
    assert quote["gpu_count"] and not quote["max_price_per_gpu_hour"]  # without one, no ceiling
    assert not quote["gpu_model"] and not quote["region"]
    for path, operations in doc["paths"].items():
        for operation in operations.values():
            for p in operation.get("parameters", []):
                assert p["required"] or p["in"] != "path", (path, p)
            for status, response in operation["responses"].items():
                schema = response.get("content", {}).get("application/json", {}).get("schema")
                if status.startswith("2") and schema is not None:
                    # a schema that names the answer's fields, not an empty object any answer passes
                    assert "properties" in schema or "oneOf" in schema, (path, status, schema)
    missing = await http.get("/quote", params={"max_price_per_gpu_hour": 1})
    assert missing.status_code == 400 and missing.json()["error"] == "gpu_count is required"


async def test_every_u64_column_is_served_as_a_string_and_no_other(served, pool) -> None:
    """The rule (coordinator.api.u64): the schema of each ledger table the API serves says string of digits
    exactly for its numeric(20, 0) columns, the u64s; the answers hold to it (checked above)."""
    async with pool.acquire() as conn:
        columns = await conn.fetch(
            "SELECT table_name, column_name, data_type, numeric_precision FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND table_name = ANY($1::text[])",
            list(TABLE_COLUMNS),
        )
    served_columns = [c for c in columns if c["column_name"] in TABLE_COLUMNS[c["table_name"]]]
    assert len(served_columns) == sum(len(c) for c in TABLE_COLUMNS.values()), "a schema names a column not there"
    for c in served_columns:
        u64 = (c["data_type"], c["numeric_precision"]) == ("numeric", 20)
        schema = TABLE_COLUMNS[c["table_name"]][c["column_name"]]
        assert (schema.get("format") == "u64") == u64, (c["table_name"], c["column_name"], schema)


def _u64_fields(kind: Any, value: Any, types: dict[str, Any], where: str) -> list[str]:
    """Where, in an event's data, a u64 (by the IDL) is not a string of digits or another integer is not a number."""
    if isinstance(kind, str):
        wide = kind in ("u64", "u128")
        if kind[0] in "ui" and kind[1:].isdigit() and (type(value) is not (str if wide else int)):
            return [f"{where}: {kind} as {value!r}"]
        return [f"{where}: {value!r}"] if wide and not value.isdigit() else []
    if "option" in kind:
        return [] if value is None else _u64_fields(kind["option"], value, types, where)
    if "vec" in kind or ("array" in kind and isinstance(value, list)):
        inner = kind["vec"] if "vec" in kind else kind["array"][0]
        return [bad for i, v in enumerate(value) for bad in _u64_fields(inner, v, types, f"{where}[{i}]")]
    found = types.get(kind.get("defined", {}).get("name"), {})
    if found.get("kind") != "struct":
        return []
    return [
        bad for f in found["fields"] for bad in _u64_fields(f["type"], value[f["name"]], types, f"{where}.{f['name']}")
    ]


async def test_every_events_u64_fields_are_strings(served) -> None:
    """Over a ledger with every kind of event: each u64 field of an event's data (by the IDL, nested ones
    too) is a string of digits, and each narrower integer a JSON number."""
    http, _, _ = served
    idl = json.loads(idl_json())
    types = {t["name"]: t["type"] for t in idl["types"]}
    events = (await http.get("/events", params={"limit": 500})).json()["items"]
    nested = {"LeaseOpened", "LeaseAssigned", "LeaseReassigned", "NodeRegistered", "UsageSettled", "ProviderSlashed"}
    assert {e["name"] for e in events} >= nested
    bad = [b for e in events for b in _u64_fields({"defined": {"name": e["name"]}}, e["data"], types, e["name"])]
    assert not bad, bad[:5]


async def test_an_audit_difference_gives_its_integers_as_strings(served, pool) -> None:
    """A difference's compared values may be any column or balance: every integer in them is a string."""
    http, world, _ = served
    lease = str(world["lease"])
    async with pool.acquire() as conn:
        paid = await conn.fetchval("UPDATE leases SET paid = paid + 1 WHERE lease = $1 RETURNING paid", lease)
    report = (await http.get(f"/audit/leases/{lease}")).json()
    found = [d for d in report["differences"] if d["what"].endswith(".paid")]
    assert not report["ok"] and found, report
    assert found[0]["indexed"] == str(paid) and found[0]["chain"] == str(paid - 1)
