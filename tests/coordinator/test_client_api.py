"""The client API of a running coordinator (job submission, job view, quote, workers): every bad
request gets a 4xx with a message and changes nothing, and schemathesis finds no 5xx."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import httpx
import jsonschema_rs
import pytest
import uvicorn
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from coordinator.api import create_app
from coordinator.api.openapi import openapi_document
from coordinator.api.work import work_routes
from coordinator.indexer.rpc import ChainRpc
from coordinator.service import Coordinator
from gpunet import instructions as ix
from gpunet.checkpoint import (
    ChunkRefused,
    FileEntry,
    Manifest,
    SignedManifest,
    chunk_id,
    lease_key,
    open_checkpoint,
    seal_chunk,
    sign_manifest,
    signed_headers,
)
from gpunet.client import send_and_confirm
from gpunet.jobs import job_logs, lease_files
from gpunet.keys import create_keypair_file
from gpunet.protocol import (
    REQUEST_AT_HEADER,
    REQUEST_CLOCK_SKEW_SECONDS,
    REQUEST_SIGNATURE_HEADER,
    REQUEST_WALLET_HEADER,
    CheckpointFile,
    JobSpec,
    job_message,
    sign_request,
)

from .chain import Cluster
from .conftest import eventually
from .world import live_settings

GPUNET = Path(sys.executable).with_name("gpunet")


@pytest.fixture
async def api(node, pool, database_url):
    """The API of a running coordinator, a client's lease not placed yet (no worker is online)."""
    async with serving(node, pool, database_url, assign=False) as served:
        yield served


@pytest.fixture
async def placed_api(node, pool, database_url):
    """The same, with the lease assigned on chain to nodes 0 and 1 (whose workers stay offline)."""
    async with serving(node, pool, database_url, assign=True) as served:
        yield served


@contextlib.asynccontextmanager
async def serving(node, pool, database_url, assign: bool, nodes: int = 2):
    """`nodes` registered nodes (the lease is assigned to nodes 0 and 1 when `assign`)."""
    async with AsyncClient(node.url, commitment=Confirmed) as chain:
        world = await Cluster().build(chain, nodes=nodes, assign=assign)
        settings = live_settings(node, database_url)
        coordinator = await Coordinator(settings, pool, world.admin).start()
        rpc = ChainRpc(settings.rpc_url, settings.commitment)
        server = uvicorn.Server(
            uvicorn.Config(
                create_app(pool, rpc, settings, work_routes(coordinator)),
                host="127.0.0.1",
                port=settings.api_port,
                log_level="warning",
                lifespan="off",
            )
        )
        task = asyncio.create_task(server.serve())
        url = f"http://127.0.0.1:{settings.api_port}"
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            await eventually(lambda: _indexed(http, str(world.lease)), what="the lease indexed")
            yield http, world, pool, coordinator
        server.should_exit = True
        await task
        await rpc.close()
        await coordinator.stop()


async def _indexed(http: httpx.AsyncClient, lease: str) -> bool:
    try:
        return (await http.get(f"/leases/{lease}")).status_code == 200
    except httpx.HTTPError:
        return False


async def truly(value: bool) -> bool:
    return value


def _signed(wallet: Keypair, path: str, at_ms: int | None = None, method: str = "GET", body: bytes = b"") -> dict:
    """The headers of a request to `path` (with its query) signed by `wallet` (gpunet.protocol.request_message)."""
    return sign_request(wallet, method, path, body, at_ms)


async def _view(http: httpx.AsyncClient, wallet: Keypair, lease, query: str = "") -> dict:
    """The lease's job view, read as `wallet` (a fresh signature); its answer must be 200."""
    path = f"/leases/{lease}/job" + (f"?{query}" if query else "")
    response = await http.get(path, headers=_signed(wallet, path))
    assert response.status_code == 200, response.text
    return response.json()


def _body(world, spec: JobSpec, per_node: int | None = 2, signer: Keypair | None = None, number: int = 1) -> dict:
    signature = (signer or world.client_wallet).sign_message(job_message(world.lease, spec, per_node, number))
    return {
        "job": spec.model_dump(mode="json"),
        "gpus_per_node": per_node,
        "job_number": number,
        "signature": str(signature),
    }


async def test_bad_job_submissions_are_refused_with_a_reason_and_store_nothing(api) -> None:
    http, world, pool, _ = api
    spec = JobSpec(command=["python", "train.py"])
    url = f"/leases/{world.lease}/job"
    cases = [
        (http.post(url, content=b"not json"), 400, "not JSON"),
        (http.post(url, json={"job": {}}), 400, "job."),
        (http.post(url, json={**_body(world, spec), "extra": 1}), 400, "the body must be"),
        (http.post(url, json={**_body(world, spec), "signature": "nope"}), 400, "signature"),
        (http.post(url, json=_body(world, spec, signer=Keypair())), 401, "not the lease client's"),
        (http.post(url, json={**_body(world, spec), "gpus_per_node": 3}), 401, "not the lease client's"),
        (http.post(url, json={**_body(world, spec), "job_number": 2}), 401, "over this job and job number"),
        (http.post(url, json={**_body(world, spec), "job_number": 0}), 400, "job_number must be an integer"),
        (http.post(url, json={**_body(world, spec), "job_number": "1"}), 400, "job_number must be an integer"),
        (http.post(url, json=_body(world, spec, number=2)), 400, "job_number 2 is not the lease's next job, 1"),
        (http.post(url, json=_body(world, spec, per_node=3)), 400, "does not divide"),
        (http.post(f"/leases/{Keypair().pubkey()}/job", json=_body(world, spec)), 404, "not indexed"),
        (http.post("/leases/xyz/job", json=_body(world, spec)), 400, "not a base58 public key"),
        (http.get("/quote", params={"gpu_model": "H100"}), 400, "gpu_count is required"),
        (http.get("/quote", params={"gpu_count": 2, "gpu_model": "H999"}), 400, "unknown GPU model 'H999'"),
        (http.get("/quote", params={"gpu_count": 2, "region": "mars"}), 400, "unknown region 'mars'"),
        (http.get("/quote", params={"gpu_count": 0, "max_price_per_gpu_hour": 1}), 400, "gpu_count"),
    ]
    for request, status, message in cases:
        response = await request
        assert response.status_code == status and message in response.json()["error"], response.text
    async with pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM jobs") == 0

    accepted = await http.post(url, json=_body(world, spec))
    assert accepted.status_code == 201 and accepted.json()["job_number"] == 1
    again = await http.post(url, json=_body(world, JobSpec(command=["other"])))
    assert again.status_code == 400 and "job 1 was submitted already" in again.json()["error"]
    # a next job before the lease ran the first one anywhere: not placed, so not over
    early = await http.post(url, json=_body(world, JobSpec(command=["other"]), number=2))
    assert early.status_code == 409 and "job 1 of lease" in early.json()["error"]
    assert "not placed on any node yet" in early.json()["error"]
    view = await _view(http, world.client_wallet, world.lease)
    assert view["job"]["command"] == ["python", "train.py"] and view["gpus_per_node"] == 2 and view["job_number"] == 1

    async def quoted() -> dict | None:  # once the scheduler has seen the indexed nodes (no worker is online)
        quote = (await http.get("/quote", params={"gpu_count": 2, "max_price_per_gpu_hour": 10**12})).json()
        return quote if "of 2 nodes, 2 offline" in quote.get("reason", "") else None

    quote = await eventually(quoted, what="a quote with the reason")
    assert quote["placeable"] is False


async def test_quote_takes_names_and_lists_candidates_with_their_state_and_the_escrow(api) -> None:
    http, world, _, coordinator = api
    keys = [str(k.pubkey()) for _, k in world.nodes]  # two H100 nodes of 2 GPUs in us-east, offline
    terms = {"gpu_count": 2, "gpu_model": "H100", "region": "us-east", "duration_seconds": 7200}

    async def listed() -> dict | None:
        quote = (await http.get("/quote", params=terms)).json()
        return quote if len(quote.get("candidates", [])) == 2 else None

    offline = await eventually(listed, what="both nodes quoted")
    assert offline["terms"]["gpu_model"] == "H100" and offline["terms"]["region"] == "us-east"
    assert offline["placeable"] is False and "offline" in offline["reason"]
    assert {c["node_key"] for c in offline["candidates"]} == set(keys)
    for c in offline["candidates"]:
        assert (c["gpu_model"], c["region"], c["online"], c["chosen_gpus"]) == ("H100", "us-east", False, 0)
        assert c["price_per_gpu_hour"] == str(Cluster.PRICE) and c["reliability"] == 0.9 and c["free_gpus"] == 2
        assert (c["missing_gpus"], c["verification"]) == (0, "unverified")  # no worker has said what it runs
    # no maximum price and nothing placeable: nothing to size the escrow at
    assert offline["escrow"]["needed"] is None
    # codes are still taken; the answer names them
    by_code = (await http.get("/quote", params={**terms, "gpu_model": "1", "region": "1"})).json()
    assert by_code["terms"]["gpu_model"] == "H100" and by_code["candidates"] == offline["candidates"]
    # another model or region matches nothing
    assert (await http.get("/quote", params={**terms, "region": "eu-west"})).json()["candidates"] == []

    for key in keys:  # the workers connect
        coordinator.fleet.connected(Pubkey.from_string(key), simulated=True)
        coordinator.fleet.heartbeat(Pubkey.from_string(key), healthy=True)
    # The attester verified the first node (on chain); the coordinator found the second failing.
    until = int(time.time()) + 3600
    verify = ix.record_verification(world.admin.pubkey(), Pubkey.from_string(keys[0]), 1, until, bytes(32), bytes(32))
    await send_and_confirm(coordinator.chain, world.admin, [verify])
    coordinator.shared.unfit[Pubkey.from_string(keys[1])] = "GPU 0 missed the deadline"

    async def judged() -> dict | None:
        quote = (await http.get("/quote", params=terms)).json()
        states = {c["node_key"]: c["verification"] for c in quote["candidates"]}
        return quote if states == {keys[0]: "verified", keys[1]: "failed"} else None

    await eventually(judged, what="the verification states quoted")

    async def placeable() -> dict | None:
        quote = (await http.get("/quote", params=terms)).json()
        return quote if quote["placeable"] else None

    online = await eventually(placeable, what="a placeable quote")
    assert [c["online"] for c in online["candidates"]] == [True, True]
    assert sorted(c["chosen_gpus"] for c in online["candidates"]) == [0, 2]
    assert online["candidates"][0]["chosen_gpus"] == 2  # the chosen node first
    assert online["candidates"][0]["node_key"] == keys[0]  # the failed node is not chosen
    # sized at the dearest chosen node's price, for 2 h
    assert online["escrow"] == {  # every amount a string of digits
        "duration_seconds": 7200,
        "max_price_per_gpu_hour": str(Cluster.PRICE),
        "needed": str(2 * 2 * Cluster.PRICE),
        "cost_at_quoted_prices": str(2 * 2 * Cluster.PRICE),
    }
    assert online["burn_per_hour"] == str(2 * Cluster.PRICE) and online["shares"][0]["price_per_gpu_hour"] == str(
        Cluster.PRICE
    )
    mine = (await http.get("/quote", params={**terms, "max_price_per_gpu_hour": str(5 * Cluster.PRICE)})).json()
    assert mine["escrow"]["needed"] == str(2 * 2 * 5 * Cluster.PRICE) and mine["terms"]["max_price_per_gpu_hour"] == (
        mine["escrow"]["max_price_per_gpu_hour"]
    ) == str(5 * Cluster.PRICE)
    assert (await http.get("/quote", params={**terms, "max_price_per_gpu_hour": 1})).json()["placeable"] is False
    # the largest u64 is taken exactly; anything but its decimal digits within u64 is a 400 that says so
    no_duration = {k: v for k, v in terms.items() if k != "duration_seconds"}
    top = (await http.get("/quote", params={**no_duration, "max_price_per_gpu_hour": str(2**64 - 1)})).json()
    assert top["terms"]["max_price_per_gpu_hour"] == "18446744073709551615"
    # an escrow no token account could hold is refused, saying so (no lease could escrow it)
    beyond = await http.get("/quote", params={**terms, "max_price_per_gpu_hour": str(2**64 - 1)})
    assert beyond.status_code == 400 and "more than a u64 holds" in beyond.json()["error"]
    for bad in ("18446744073709551616", "1e6", "1.5", "-1", "+5", " 5", "5_000", "0x10", "\u0661\u0662", "", "0"):
        refused = await http.get("/quote", params={**terms, "max_price_per_gpu_hour": bad})
        assert refused.status_code == 400, (bad, refused.text)
        assert refused.json()["error"].startswith("max_price_per_gpu_hour: "), refused.text
    # the workers page like every list
    pages = [(await http.get("/workers", params={"limit": 1, "offset": i})).json() for i in (0, 1)]
    assert [w["node_key"] for p in pages for w in p["items"]] == sorted(keys)
    assert [p["next_offset"] for p in pages] == [1, None] and pages[1]["slashing"]["paused"] is False
    assert (await http.get("/workers", params={"limit": 0})).status_code == 400

    # the command prints the table, the escrow and the command that opens the lease
    url = str(http.base_url)
    proc = await asyncio.create_subprocess_exec(
        str(GPUNET),
        "quote",
        *("--gpu", "h100", "--count", "2", "--region", "us-east", "--duration", "2h", "--coordinator", url),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "COLUMNS": "250"},
    )
    out = (await asyncio.wait_for(proc.communicate(), 60))[0].decode()
    assert proc.returncode == 0, out
    assert all(key in out for key in keys) and "us-east" in out and "90%" in out and "online" in out
    assert "verified" in out and "failed" in out  # the verified column
    price = Cluster.PRICE / 10**6
    assert f"escrow needed for 2h00m: {4 * price:g} IO" in out
    assert f"gpunet lease open --gpu H100 --count 2 --region us-east --max-price {price:g} --duration 2h" in out
    proc = await asyncio.create_subprocess_exec(
        str(GPUNET),
        "quote",
        *("--count", "2", "--duration", "1h", "--max-price", "10", "--json", "--coordinator", url),
        stdout=asyncio.subprocess.PIPE,
    )
    printed = json.loads((await asyncio.wait_for(proc.communicate(), 60))[0])
    assert printed["terms"]["gpu_model"] == "any" and printed["escrow"]["needed"] == str(2 * 10 * 10**6)


async def test_one_job_at_a_time_the_next_once_the_current_one_ended_on_every_node(placed_api) -> None:
    http, world, pool, _ = placed_api
    url = f"/leases/{world.lease}/job"
    nodes = [str(k.pubkey()) for _, k in world.nodes]
    first, second, third = (JobSpec(command=[f"job{i}"]) for i in (1, 2, 3))
    assert (await http.post(url, json=_body(world, first))).status_code == 201

    async def job_status(node: str, number: int, state: str) -> None:  # as a worker's job_status is recorded
        async with pool.acquire() as conn:
            await conn.execute(
                "INSERT INTO job_events (lease, job_number, node_key, kind, state) VALUES ($1, $2, $3, 'status', $4)",
                str(world.lease),
                number,
                node,
                state,
            )

    async def stored() -> tuple:
        async with pool.acquire() as conn:
            return (
                await conn.fetchrow("SELECT number, spec FROM jobs"),
                await conn.fetch("SELECT lease, number FROM earlier_jobs"),
            )

    # job 1 runs on node 0 and has ended on node 1: job 2 must wait for it
    await job_status(nodes[0], 1, "running")
    await job_status(nodes[1], 1, "succeeded")
    before = await stored()
    busy = await http.post(url, json=_body(world, second, number=2))
    assert busy.status_code == 409, busy.text
    assert busy.json()["error"].startswith(f"job 1 of lease {world.lease} is still running or waiting to")
    assert f"node {nodes[0]}: running" in busy.json()["error"] and "one job at a time" in busy.json()["error"]
    assert await stored() == before

    # bad next jobs are refused whatever the state, and change nothing
    await job_status(nodes[0], 1, "failed")
    bad = [
        (_body(world, second, number=3), 400, "job_number 3 is not the lease's next job, 2"),
        (_body(world, second, per_node=1, number=2), 400, "gpus_per_node must be null or match them"),
        ({**_body(world, second, number=2), "job": {"command": []}}, 400, "a job needs a command or an image"),
        (_body(world, first, number=1), 400, "job 1 was submitted already"),
        ({**_body(world, first, number=1), "job_number": 2}, 401, "not the lease client's"),
    ]  # a replayed signature
    for body, status, message in bad:
        response = await http.post(url, json=body)
        assert response.status_code == status and message in response.json()["error"], response.text
    assert await stored() == before

    # ended on every node: job 2 is taken, replaces job 1 (kept), and is what the lease shows
    accepted = await http.post(url, json=_body(world, second, number=2))
    assert accepted.status_code == 201 and accepted.json()["job_number"] == 2, accepted.text
    current, earlier = await stored()
    assert current["number"] == 2 and json.loads(current["spec"])["command"] == ["job2"]
    assert [(r["lease"], r["number"]) for r in earlier] == [(str(world.lease), 1)]
    view = await _view(http, world.client_wallet, world.lease)
    assert view["job_number"] == 2 and view["job"]["command"] == ["job2"] and view["nodes"] == []  # not started yet
    assert (await http.post(url, json=_body(world, third, number=3))).status_code == 409  # job 2 has not run
    await job_status(nodes[1], 2, "running")
    view = await _view(http, world.client_wallet, world.lease)
    assert [(n["node_key"], n["state"]) for n in view["nodes"]] == [(nodes[1], "running")]


async def test_schemathesis_finds_no_server_error_on_the_running_coordinator(api) -> None:
    http, _, _, _ = api
    # schemathesis is synchronous: it runs in a thread while this loop serves the API.
    await asyncio.to_thread(_fuzz, str(http.base_url).rstrip("/"))


def _fuzz(base: str) -> None:
    import schemathesis

    schemathesis.openapi.format("base58-pubkey", st.builds(lambda: str(Keypair().pubkey())))
    schemathesis.openapi.format("base58-signature", st.builds(lambda: str(Keypair().sign_message(b"x"))))
    schema = schemathesis.openapi.from_url(f"{base}/openapi.json")
    for result in schema.get_all_operations():
        operation = result.ok()
        if operation.path not in (
            "/leases/{key}/job",
            "/leases/{key}/files",
            "/leases/{key}/secrets",
            "/quote",
            "/workers",
            "/leases/{key}/endpoints",
            "/leases/{key}/endpoints/log",
            "/leases/{key}/endpoint-tokens",
            "/endpoints/{lease}/{name}/{path}",
        ):
            continue  # the ledger routes have their own run in test_api

        @hypothesis_settings(max_examples=25, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(operation.as_strategy())
        def run(case) -> None:
            response = case.call()
            assert response.status_code < 500, f"{case.method} {case.path}: {response.status_code} {response.text}"
            json.loads(response.text)

        run()


async def test_reliability_history_comes_from_the_ledger_and_survives_a_restart(api) -> None:
    _, world, pool, coordinator = api
    node_key = str(world.nodes[0][1].pubkey())
    async with pool.acquire() as conn, conn.transaction():  # one commit: a sync sees all of it or none
        for _ in range(2):
            await conn.execute(
                "INSERT INTO faults (node_key, kind, evidence, evidence_hash) VALUES ($1, 'MissedHeartbeats', "
                "'{}', '00')",
                node_key,
            )
        await conn.execute("INSERT INTO placements (lease, state, nodes) VALUES ('L1', 'ended', $1)", [node_key])
    # 2 faults and 1 ended lease (the scheduler's sync reads faults and placements in two queries,
    # so it waits for both).
    await eventually(
        lambda: _true_view(coordinator, node_key), what="the history (2 failed, 1 completed) in the scheduler"
    )
    other = coordinator.shared.scheduler.nodes[world.nodes[1][1].pubkey()]
    assert (other.failed_shares, other.completed_shares) == (0, 0)


async def _true_view(coordinator, node_key):
    view = coordinator.shared.scheduler.nodes.get(Pubkey.from_string(node_key))
    return view if view is not None and (view.failed_shares, view.completed_shares) == (2, 1) else None


async def test_logs_page_and_follow_and_status_shows_the_latest_lines(placed_api, tmp_path) -> None:
    http, world, pool, _ = placed_api
    lease = str(world.lease)
    node = str(world.nodes[0][1].pubkey())
    assert (await http.post(f"/leases/{lease}/job", json=_body(world, JobSpec(command=["steps"])))).status_code == 201

    async def record(*events: tuple[str, str]) -> None:  # as a worker's messages are recorded
        async with pool.acquire() as conn:
            for kind, text in events:
                if kind == "log":
                    await conn.execute(
                        "INSERT INTO job_events (lease, node_key, kind, stream, line) "
                        "VALUES ($1, $2, 'log', 'stdout', $3)",
                        lease,
                        node,
                        text,
                    )
                else:
                    await conn.execute(
                        "INSERT INTO job_events (lease, node_key, kind, state) VALUES ($1, $2, 'status', $3)",
                        lease,
                        node,
                        text,
                    )

    await record(("status", "running"), *(("log", f"step {i}") for i in range(1, 301)), ("log", "[red]not markup[/]"))
    url = str(http.base_url)

    tail = (await _view(http, world.client_wallet, lease, "tail=20"))["logs"]
    assert [line["line"] for line in tail] == [*(f"step {i}" for i in range(282, 301)), "[red]not markup[/]"]
    first = await _view(http, world.client_wallet, lease)
    assert len(first["logs"]) == 200 and first["more"] is True  # the first page says another follows
    assert [line["line"] async for line in job_logs(url, world.client_wallet, world.lease)] == [
        *(f"step {i}" for i in range(1, 301)),
        "[red]not markup[/]",
    ]

    wallet = tmp_path / "client.json"
    create_keypair_file(wallet, world.client_wallet)

    async def gpunet(*args: str) -> tuple[int, str]:
        proc = await asyncio.create_subprocess_exec(
            str(GPUNET),
            "lease",
            *args,
            "--coordinator",
            url,
            "-k",
            str(wallet),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        out, _ = await asyncio.wait_for(proc.communicate(), 60)
        return proc.returncode, out.decode()

    code, status = await gpunet("status", lease)
    assert code == 0 and "step 300" in status and "step 199" not in status  # the latest lines, not the first page's
    assert "node key" in status  # the node column says which of a node's two addresses it shows
    code, printed = await gpunet("logs", lease)
    lines = [line.split(maxsplit=2)[2] for line in printed.splitlines()]
    assert code == 0 and lines == [*(f"step {i}" for i in range(1, 301)), "[red]not markup[/]"]

    # --follow prints new lines as they come and stops once the job has ended and all is printed
    follow = asyncio.create_task(gpunet("logs", lease, "--follow", "--after", str(tail[-1]["id"])))
    await asyncio.sleep(2.5)
    assert not follow.done(), "a running job is followed"
    await record(("log", "step 301"), ("log", "done"), ("status", "succeeded"))
    code, printed = await asyncio.wait_for(follow, 30)
    assert code == 0 and [line.split(maxsplit=2)[2] for line in printed.splitlines()] == ["step 301", "done"]
    bad, message = await gpunet("logs", "not-a-lease")
    assert bad == 2 and "lease address" in message


async def _event(pool, lease: str, node: str, kind: str, text: str) -> None:
    """As a worker's log line ('log') or job status ('status') is recorded."""
    async with pool.acquire() as conn:
        if kind == "log":
            await conn.execute(
                "INSERT INTO job_events (lease, node_key, kind, stream, line) VALUES ($1, $2, 'log', 'stdout', $3)",
                lease,
                node,
                text,
            )
        else:
            await conn.execute(
                "INSERT INTO job_events (lease, node_key, kind, state) VALUES ($1, $2, 'status', $3)", lease, node, text
            )


async def test_status_follow_prints_new_lines_and_state_changes_until_the_job_ends(placed_api, tmp_path) -> None:
    http, world, pool, _ = placed_api
    lease = str(world.lease)
    nodes = [str(k.pubkey()) for _, k in world.nodes]
    assert (await http.post(f"/leases/{lease}/job", json=_body(world, JobSpec(command=["train"])))).status_code == 201
    await _event(pool, lease, nodes[0], "status", "running")
    await _event(pool, lease, nodes[0], "log", "epoch 0")
    wallet = tmp_path / "client.json"
    create_keypair_file(wallet, world.client_wallet)

    async def follow(*extra: str, started: asyncio.Event | None = None) -> tuple[int, str]:
        proc = await asyncio.create_subprocess_exec(
            str(GPUNET),
            *("lease", "status", lease, "--follow", "--coordinator", str(http.base_url), "-k", str(wallet), *extra),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env={**os.environ, "COLUMNS": "250"},
        )
        assert proc.stdout is not None
        out = b""
        while line := await asyncio.wait_for(proc.stdout.readline(), 60):
            out += line
            if started is not None:
                started.set()  # its status is printed: what comes next is followed
        return await asyncio.wait_for(proc.wait(), 60), out.decode()

    started = asyncio.Event(), asyncio.Event()
    followed = asyncio.create_task(follow(started=started[0]))
    as_json = asyncio.create_task(follow("--json", started=started[1]))
    for event in started:
        await asyncio.wait_for(event.wait(), 60)
    await asyncio.sleep(1)
    assert not followed.done() and not as_json.done(), "a running job is followed"
    await _event(pool, lease, nodes[1], "status", "running")
    await _event(pool, lease, nodes[0], "log", "epoch 1 [not markup]")
    await asyncio.sleep(2)
    assert not followed.done(), "node 1 still runs"
    await _event(pool, lease, nodes[0], "status", "succeeded")
    await _event(pool, lease, nodes[1], "log", "saved")
    await _event(pool, lease, nodes[1], "status", "succeeded")
    code, out = await asyncio.wait_for(followed, 30)
    assert code == 0, out
    assert "epoch 0" in out  # the status first
    assert f"node {nodes[1]}: running" in out and "epoch 1 [not markup]" in out
    assert f"node {nodes[0]}: running -> succeeded" in out and f"node {nodes[1]}: running -> succeeded" in out
    assert out.index("epoch 1") < out.index("saved") and out.rstrip().endswith("job 1 ended: succeeded")
    assert out.count("epoch 0") == 1  # each line once
    code, out = await asyncio.wait_for(as_json, 30)
    objects = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and objects[0]["job_number"] == 1 and [line["line"] for line in objects[0]["logs"]] == ["epoch 0"]
    assert [o["line"] for o in objects[1:] if "line" in o] == ["epoch 1 [not markup]", "saved"]
    changes = [(o["node_key"], o["was"], o["state"]) for o in objects if o.get("event") == "node"]
    assert changes[0] == (nodes[1], None, "running")  # in the order they came; the last two in one poll maybe
    assert sorted(changes[1:]) == sorted([(nodes[0], "running", "succeeded"), (nodes[1], "running", "succeeded")])

    # a job that has ended: the status, then at once the end
    code, out = await follow()
    assert code == 0 and out.rstrip().endswith("job 1 ended: succeeded") and "saved" in out


def _signed_files(lease: Pubkey, signer: Keypair, at: int | None = None) -> dict[str, str]:
    return _signed(signer, f"/leases/{lease}/files", at)


async def test_the_latest_checkpoint_is_read_by_the_lease_client_alone_and_downloaded(api, tmp_path) -> None:
    http, world, pool, _ = api
    lease, url = world.lease, f"/leases/{world.lease}/files"
    client = world.client_wallet
    fresh = _signed_files(lease, client)
    refused = [
        ({}, 401, "a private route: sign the request as the lease's client"),
        ({**fresh, REQUEST_AT_HEADER: "soon"}, 400, "is not an integer"),
        ({**fresh, REQUEST_SIGNATURE_HEADER: "nope"}, 400, "not a base58 Ed25519 signature"),
        (_signed_files(lease, Keypair()), 401, "is not the lease's client"),  # anyone else
        (_signed_files(Pubkey.default(), client), 401, "not the wallet's over this request"),  # another lease
        ({**fresh, REQUEST_AT_HEADER: str(int(fresh[REQUEST_AT_HEADER]) + 1)}, 401, "not the wallet's"),  # time
        ({**fresh, REQUEST_WALLET_HEADER: str(Keypair().pubkey())}, 401, "not the wallet's"),  # another wallet named
        (
            _signed_files(lease, client, time.time_ns() // 1_000_000 - (REQUEST_CLOCK_SKEW_SECONDS + 5) * 1000),
            401,
            "stale or replayed",
        ),
    ]
    for headers, status, message in refused:
        response = await http.get(url, headers=headers)
        assert response.status_code == status and message in response.json()["error"], response.text
    stray = Keypair().pubkey()
    other = await http.get(f"/leases/{stray}/files", headers=_signed_files(stray, client))
    assert other.status_code == 404 and "not indexed" in other.json()["error"]

    none = await http.get(url, headers=fresh)
    assert none.status_code == 404 and "has no checkpoint yet" in none.json()["error"]
    replayed = await http.get(url, headers=fresh)  # the same signature again
    assert replayed.status_code == 401 and "stale or replayed" in replayed.json()["error"]

    node = str(world.nodes[0][1].pubkey())
    files = [CheckpointFile.of("model.pt", b"\x00weights\xff"), CheckpointFile.of("logs/step.txt", b"step 42\n")]
    async with pool.acquire() as conn:  # as the dispatch loop records a worker's checkpoint
        await conn.execute(
            "INSERT INTO checkpoints (lease, node_key, files) VALUES ($1, $2, $3)",
            str(lease),
            node,
            json.dumps([f.model_dump() for f in files]),
        )
    got = await http.get(url, headers=_signed_files(lease, client))
    assert got.status_code == 200, got.text
    assert got.json()["node_key"] == node and got.json()["files"] == [f.model_dump() for f in files]
    stranger = await http.get(url, headers=_signed_files(lease, Keypair()))
    assert stranger.status_code == 401  # still the client's alone once there is something to read

    # the command signs, checks each file's sha256 and writes them under --out
    wallet, other_wallet = tmp_path / "client.json", tmp_path / "other.json"
    create_keypair_file(wallet, client)
    create_keypair_file(other_wallet, Keypair())

    async def gpunet(*args: str) -> tuple[int, str]:
        proc = await asyncio.create_subprocess_exec(
            str(GPUNET),
            *args,
            "--coordinator",
            str(http.base_url),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env={**os.environ, "COLUMNS": "250"},
        )
        out, _ = await asyncio.wait_for(proc.communicate(), 60)
        return proc.returncode, out.decode()

    out_dir = tmp_path / "out"
    code, printed = await gpunet("lease", "files", str(lease), "--out", str(out_dir), "-k", str(wallet))
    assert code == 0, printed
    assert (out_dir / "model.pt").read_bytes() == b"\x00weights\xff"
    assert (out_dir / "logs" / "step.txt").read_bytes() == b"step 42\n"
    assert "model.pt" in printed and node in printed
    code, printed = await gpunet("lease", "files", str(lease), "--out", str(tmp_path / "no"), "-k", str(other_wallet))
    assert code == 1 and "(401)" in printed and "is not the lease's client" in printed
    assert not (tmp_path / "no").exists()

    # a job's inputs: given as [PATH=]URL#SHA256, signed and stored with the job
    digest = hashlib.sha256(b"data").hexdigest()
    code, printed = await gpunet(
        *("lease", "job", str(lease), "--command", "python train.py", "--gpus-per-node", "2", "-k", str(wallet)),
        *(
            "--input",
            f"https://example.com/d/train.csv#{digest}",
            "--input",
            f"cfg/a.yaml=http://h:8000/x?y=1#{digest}",
        ),
    )
    assert code == 0, printed
    job = (await _view(http, client, lease))["job"]
    assert job["inputs"] == [
        {"path": "train.csv", "url": "https://example.com/d/train.csv", "sha256": digest},
        {"path": "cfg/a.yaml", "url": "http://h:8000/x?y=1", "sha256": digest},
    ]


async def test_lease_files_serves_the_checkpoint_store_s_newest_checkpoint_that_checks_out(
    placed_api, tmp_path
) -> None:
    """A checkpoint that came through the checkpoint store (sealed chunks, a manifest signed by a
    node of the lease) is what `GET /leases/{key}/files` serves, sealed: the client opens it with
    the lease's key, which the coordinator does not hold; a tampered chunk makes it fall back to
    the checkpoint before; the small one recorded from the gateway is the control."""
    http, world, pool, coordinator = placed_api
    lease, url = world.lease, f"/leases/{world.lease}/files"
    api = str(http.base_url).rstrip("/")
    spec = JobSpec(command=["python", "train.py"])
    accepted = await http.post(f"/leases/{lease}/job", json=_body(world, spec))
    assert accepted.status_code == 201, accepted.text
    node = world.nodes[0][1]
    await eventually(lambda: _assigned(pool, str(lease), str(node.pubkey())), what="the assignment indexed")
    small = [CheckpointFile.of("step", b"1\n")]
    async with pool.acquire() as conn:  # a small checkpoint through the gateway first, as before
        await conn.execute(
            "INSERT INTO checkpoints (lease, node_key, files) VALUES ($1, $2, $3)",
            str(lease),
            str(node.pubkey()),
            json.dumps([f.model_dump() for f in small]),
        )
    got = await http.get(url, headers=_signed_files(lease, world.client_wallet))
    assert got.status_code == 200 and got.json()["files"] == [f.model_dump() for f in small]

    store = coordinator.checkpoints
    key = lease_key(world.client_wallet, str(lease))
    seqs = []
    for step, data in ((2, b"step 2 weights"), (3, b"step 3 weights")):
        sealed = seal_chunk(key, str(lease), data)
        assert store.put_chunk(str(lease), chunk_id(sealed), sealed)
        manifest = Manifest(
            lease=str(lease),
            node_key=str(node.pubkey()),
            seq=time.time_ns() // 1_000_000 + step,
            files=[FileEntry(path="model.pt", size=len(data), chunks=[chunk_id(sealed)])],
        )
        assert store.put_manifest(str(lease), sign_manifest(node, manifest), {str(node.pubkey())}) is None
        seqs.append((manifest.seq, chunk_id(sealed)))
    got = await http.get(url, headers=_signed_files(lease, world.client_wallet))
    assert got.status_code == 200, got.text
    assert "weights" not in got.text and got.json()["sealed"]["manifest"]["manifest"]["seq"] == seqs[1][0]
    schema = openapi_document()["paths"]["/leases/{key}/files"]["get"]["responses"]["200"]["content"]
    errors = list(jsonschema_rs.Draft202012Validator(schema["application/json"]["schema"]).iter_errors(got.json()))
    assert not errors, [e.message for e in errors][:3]  # the sealed answer is the documented one
    _, files = await lease_files(api, world.client_wallet, lease)  # the client opens it
    assert [(f.path, f.content()) for f in files] == [("model.pt", b"step 3 weights")]
    # they are rank 0's (the lease's one node): rank 1 has none, and a rank that is none is refused
    for query, status, error in (("rank=1", 404, "no checkpoint yet of rank 1"), ("rank=x", 400, "rank")):
        other_rank = await http.get(f"{url}?{query}", headers=_signed(world.client_wallet, f"{url}?{query}"))
        assert other_rank.status_code == status and error in other_rank.json()["error"], other_rank.text
    # the store's disk holds no plaintext
    assert not any(b"weights" in p.read_bytes() for p in store.blobs.root.rglob("*") if p.is_file())  # type: ignore[attr-defined]
    # another wallet's key does not open it (nor does the coordinator hold one that does)
    other = Keypair()
    body = got.json()["sealed"]
    chunks = {cid: base64.b64decode(b) for cid, b in body["chunks"].items()}
    with pytest.raises(ChunkRefused, match="does not open"):
        open_checkpoint(
            lease_key(other, str(lease)), SignedManifest.model_validate(body["manifest"]), chunks, {str(node.pubkey())}
        )
    # the newest one's chunk is tampered with: the one before is served
    victim = store.blobs.root / "leases" / str(lease) / "chunks" / seqs[1][1]  # type: ignore[attr-defined]
    victim.write_bytes(victim.read_bytes()[:-1] + bytes([victim.read_bytes()[-1] ^ 1]))
    _, files = await lease_files(api, world.client_wallet, lease)
    assert [(f.path, f.content()) for f in files] == [("model.pt", b"step 2 weights")]
    view = (await http.get(f"/leases/{lease}/job", headers=_signed(world.client_wallet, f"/leases/{lease}/job"))).json()
    assert view["checkpoint"]["seq"] == seqs[1][0] and view["checkpoint"]["bytes"] == len(b"step 3 weights")


async def _assigned(pool, lease: str, node_key: str) -> bool:
    async with pool.acquire() as conn:
        return bool(
            await conn.fetchval("SELECT 1 FROM assignments WHERE lease = $1 AND node_key = $2", lease, node_key)
        )


async def test_the_job_view_answers_the_client_and_its_nodes_suppliers_alone(placed_api) -> None:
    http, world, pool, _ = placed_api
    lease, client = world.lease, world.client_wallet
    path = f"/leases/{lease}/job"
    spec = JobSpec(command=["train"], env={"PLAIN_ENV": "plain-value"}, secrets=["API_TOKEN"])
    assert (await http.post(path, json=_body(world, spec))).status_code == 201
    await _event(pool, str(lease), str(world.nodes[0][1].pubkey()), "log", "a private log line")
    fresh = _signed(client, path)
    old = time.time_ns() // 1_000_000 - (REQUEST_CLOCK_SKEW_SECONDS + 5) * 1000
    refused = [
        ({}, "a private route"),  # unsigned
        (_signed(Keypair(), path), "is not the lease's client or a supplier of its nodes"),  # another wallet
        (_signed(client, path, old), "stale or replayed"),  # an old signature
        (_signed(client, f"/leases/{lease}/files"), "not the wallet's over this request"),  # for another route
        (_signed(client, path + "?tail=5"), "not the wallet's over this request"),  # for another query
        (_signed(client, path, method="POST"), "not the wallet's over this request"),  # for another method
    ]
    for headers, message in refused:
        response = await http.get(path, headers=headers)
        assert response.status_code == 401 and message in response.json()["error"], response.text
        assert set(response.json()) == {"error"}  # nothing of the job
        for leaked in ("plain-value", "API_TOKEN", "a private log line", "train"):
            assert leaked not in response.text
    # control: the client's fresh signature reads it all, once
    answer = await http.get(path, headers=fresh)
    assert answer.status_code == 200 and answer.json()["job"]["env"] == {"PLAIN_ENV": "plain-value"}
    assert [line["line"] for line in answer.json()["logs"]] == ["a private log line"]
    replayed = await http.get(path, headers=fresh)  # the same signature again
    assert replayed.status_code == 401 and "stale or replayed" in replayed.json()["error"]
    assert set(replayed.json()) == {"error"}
    # the supplier of a node the lease is on reads it too (it runs the job)
    supplier = world.nodes[0][0]
    assert (await _view(http, supplier, lease))["job"]["secrets"] == ["API_TOKEN"]


async def test_secrets_are_given_by_the_client_alone_for_every_name_the_job_has(placed_api) -> None:
    http, world, pool, coordinator = placed_api
    lease, client = world.lease, world.client_wallet
    assert (
        await http.post(f"/leases/{lease}/job", json=_body(world, JobSpec(command=["t"], secrets=["A", "B"])))
    ).status_code == 201
    nodes = [str(k.pubkey()) for _, k in world.nodes]
    path = f"/leases/{lease}/secrets"

    def body(number: int = 1, values: dict | None = None, to: list[str] = nodes) -> bytes:
        return json.dumps(
            {"job_number": number, "nodes": {n: values or {"A": "c2VhbGVk", "B": "c2VhbGVk"} for n in to}}
        ).encode()

    async def post(content: bytes, signer: Keypair | None = client) -> httpx.Response:
        headers = {} if signer is None else _signed(signer, path, method="POST", body=content)
        return await http.post(path, content=content, headers=headers)

    # once the dispatch loop has taken the job (its workers are offline), as if it had reached both nodes
    await eventually(lambda: truly(coordinator.dispatch.dispatched_job.get(str(lease)) == 1), what="the job taken")
    coordinator.shared.dispatched[str(lease)] = {k.pubkey() for _, k in world.nodes}
    refused = [
        (await post(body(), None), 401, "a private route"),
        (await post(body(), world.nodes[0][0]), 401, "is not the lease's client"),  # a supplier may read, not give
        (await post(b"x", client), 400, "not JSON"),
        (await post(body(values={"A": "c2VhbGVk"}), client), 400, "exactly the job's (A, B)"),
        (await post(body(values={"A": "c2VhbGVk", "B": "c2VhbGVk", "C": "x"}), client), 400, "exactly the job's"),
        (await post(body(to=[]), client), 400, "at least one node"),
        (await post(body(number=2), client), 409, "not lease"),
    ]
    signed_one = body()
    headers = _signed(client, path, method="POST", body=signed_one)
    tampered = await http.post(path, content=body(to=nodes[:1]), headers=headers)  # the body changed after signing
    refused.append((tampered, 401, "not the wallet's over this request"))
    for response, status, message in refused:
        assert response.status_code == status and message in response.json()["error"], response.text
    async with pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM job_secrets") == 0  # nothing kept
    assert coordinator.shared.dispatched[str(lease)] == {k.pubkey() for _, k in world.nodes}  # nor sent again
    # control: the client's, for every name: kept, and the nodes get the job again with them
    given = await http.post(path, content=signed_one, headers=headers)
    assert given.status_code == 201 and given.json()["sealed_to"] == sorted(nodes), given.text
    assert coordinator.shared.dispatched[str(lease)] == set()
    assert sorted((await _view(http, client, lease))["secrets_sealed_to"]) == sorted(nodes)


async def test_a_supplier_whose_nodes_the_lease_is_not_on_reads_nothing(api) -> None:
    http, world, _, _ = api  # the lease is not placed: no node of it yet
    path = f"/leases/{world.lease}/job"
    assert (
        await http.post(path, json=_body(world, JobSpec(command=["t"], env={"K": "plain-value"})))
    ).status_code == 201
    supplier = world.nodes[0][0]  # registered, staked, with a node: just not this lease's
    response = await http.get(path, headers=_signed(supplier, path))
    assert response.status_code == 401 and set(response.json()) == {"error"} and "plain-value" not in response.text
    assert "is not the lease's client or a supplier of its nodes" in response.json()["error"]
    assert (await _view(http, world.client_wallet, world.lease))["job"]["env"] == {"K": "plain-value"}  # control


async def test_a_signature_answered_by_one_replica_is_refused_by_another(api) -> None:
    """Replicas share the replay guard (the ledger's): a signed request answered by one API is a
    replay at any other; a fresh signature is answered by either (the control)."""
    http, world, pool, coordinator = api
    lease, url = world.lease, f"/leases/{world.lease}/files"
    other_api = create_app(pool, ChainRpc(coordinator.settings.rpc_url), coordinator.settings, work_routes(coordinator))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=other_api), base_url="http://replica-b") as other:
        answered = _signed_files(lease, world.client_wallet)
        first = await http.get(url, headers=answered)
        assert first.status_code == 404 and "has no checkpoint yet" in first.json()["error"]
        replayed = await other.get(url, headers=answered)
        assert replayed.status_code == 401 and "stale or replayed" in replayed.json()["error"]
        fresh = await other.get(url, headers=_signed_files(lease, world.client_wallet))
        assert fresh.status_code == 404 and "has no checkpoint yet" in fresh.json()["error"]


async def test_json_nested_thousands_deep_is_a_400_on_every_route_that_takes_a_body(placed_api) -> None:
    """Each request signed as its route asks (so it reaches the parsing), and refused there with a
    400 that says so; nothing is stored. (The standard library's parser raised RecursionError on it:
    a 500.)"""
    http, world, pool, _ = placed_api
    lease, client, node = world.lease, world.client_wallet, world.nodes[0][1]
    deep = ("[" * 2000 + "]" * 2000).encode()  # past the standard parser's stack, within every route's size limit
    routes = [
        ("POST", f"/leases/{lease}/job", None),  # the job submission carries its own signature
        ("POST", f"/leases/{lease}/secrets", client),
        ("POST", f"/leases/{lease}/checkpoint-key", client),
        ("POST", "/slashing/resume", None),  # signed inside, by the attester
        ("POST", f"/leases/{lease}/checkpoint/missing", node),  # signed by a node of the lease
        ("PUT", f"/leases/{lease}/checkpoint/manifests/1", node),
    ]
    for method, path, signer in routes:
        headers = {}
        if signer is client:
            headers = _signed(client, path, method=method, body=deep)
        elif signer is node:
            headers = signed_headers(node, method, path, deep)
        response = await http.request(method, path, content=deep, headers=headers)
        assert response.status_code == 400, (path, response.status_code, response.text)
        assert "recursion limit exceeded" in response.json()["error"], (path, response.text)
    async with pool.acquire() as conn:
        assert [
            await conn.fetchval(f"SELECT count(*) FROM {t}") for t in ("jobs", "job_secrets", "checkpoint_keys")
        ] == [
            0,
            0,
            0,
        ]
    # the control: the same route takes a well-formed body
    assert (await http.post(f"/leases/{lease}/job", json=_body(world, JobSpec(command=["t"])))).status_code == 201
