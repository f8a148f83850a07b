"""The endpoints' serving path at the relay's boundary: the real ledger (a client's 2-node lease on
gpunet-localnet, indexed into PostgreSQL), the real API (uvicorn), and for each node's job a real
completion server process (tests/worker/jobs/completion.py); only the relay is stood in for, by one
that opens a plain TCP connection to that node's server (`Relay.open_endpoint`'s plaintext side).
tests/coordinator/test_endpoints.py runs the same through workers and the real relay."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import uvicorn
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from coordinator.api import create_app
from coordinator.db import jobs
from coordinator.endpoints import Endpoints, endpoint_routes
from coordinator.indexer.rpc import ChainRpc
from coordinator.metrics import Metrics
from gpunet import instructions as ix
from gpunet.client import send_and_confirm
from gpunet.localnet import free_ports
from gpunet.pda import lease_pda
from gpunet.protocol import Expose, JobSpec, sign_request
from gpunet.tunnel import LinkClosed, StreamRefused

from .chain import Cluster
from .conftest import eventually

SERVER = Path(__file__).resolve().parents[1] / "worker" / "jobs" / "completion.py"


class TcpChannel:
    """A node's job port as `Relay.open_endpoint` gives it: bytes both ways, None at the end."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, relay: LocalRelay) -> None:
        self.reader, self.writer, self.relay = reader, writer, relay

    async def send(self, data: bytes) -> None:
        self.relay.sent += 1
        self.writer.write(data)
        await self.writer.drain()

    async def recv(self) -> bytes | None:
        return await self.reader.read(65536) or None

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(OSError):
            await self.writer.wait_closed()


class LocalRelay:
    """Stands in for coordinator.relay.Relay: node key -> the port of that node's job server."""

    def __init__(self) -> None:
        self.ports: dict[Pubkey, int] = {}
        self.opened: list[Pubkey] = []  # the streams opened, to which node
        self.sent = 0  # what was sent to the jobs (requests), on new channels and kept ones

    def linked(self, node_key: Pubkey) -> bool:
        return node_key in self.ports

    async def open_endpoint(self, lease: str, node_key: Pubkey, name: str) -> TcpChannel:
        if node_key not in self.ports:
            raise LinkClosed(f"node {node_key} has no link")
        self.opened.append(node_key)
        try:
            return TcpChannel(*await asyncio.open_connection("127.0.0.1", self.ports[node_key]), self)
        except OSError as e:
            raise StreamRefused(f"the job does not listen: {e}") from None


def start_server(port: int, mark: str, log: Path) -> subprocess.Popen:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, str(SERVER)],
            env={
                "PORT": str(port),
                "NODE_MARK": mark,
                "RANK": mark[-1],
                "STREAM_SECONDS": "0.3",
                "KEEPALIVE_SECONDS": "0.5",
            },
            stdout=out,
            stderr=subprocess.STDOUT,
        )


async def listening(port: int) -> bool:
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return False
    writer.close()
    return True


@pytest.fixture
async def served(chain, settings, pool, indexer, spawned, tmp_path):
    """A client's active 2-node lease whose job exposes `api` (http) and `ssh` (tcp); each node's job
    server up; the endpoints' routes served on a free port; a second lease of the client, not placed."""
    cluster = await Cluster().build(chain)
    other = ix.LeaseTerms(1, 80, 2, ix.ANY, 10 * 10**6, 3_600)
    await send_and_confirm(
        chain,
        cluster.client_wallet,
        [ix.open_lease(cluster.client_wallet.pubkey(), cluster.client_tokens, cluster.mint, 2, other)],
    )
    lease, second = str(cluster.lease), str(lease_pda(cluster.client_wallet.pubkey(), 2))
    spec = JobSpec(
        command=["serve"], expose=[Expose(name="api", port=8000), Expose(name="ssh", port=22, protocol="tcp")]
    )
    async with pool.acquire() as conn:
        await eventually(lambda: _indexed(pool, [lease, second]), what="both leases indexed")
        await jobs.save_job(conn, lease, 1, spec, 2, str(cluster.client_wallet.pubkey()), "sig")
    relay = LocalRelay()
    ports = free_ports(3)
    for i, (_, node_key) in enumerate(cluster.nodes):
        spawned.append(start_server(ports[i], f"node{i}", tmp_path / f"server{i}.log"))
        relay.ports[node_key.pubkey()] = ports[i]
    for port in ports[:2]:
        await eventually(lambda port=port: listening(port), what="the job servers listening")
    settings = settings.model_copy(update={"api_port": ports[2], "endpoint_health_seconds": 1.0})
    endpoints = Endpoints(pool, settings, Metrics(), relay)
    rpc = ChainRpc(settings.rpc_url, settings.commitment)
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(pool, rpc, settings, endpoint_routes(endpoints)),
            host="127.0.0.1",
            port=ports[2],
            log_level="warning",
            lifespan="off",
        )
    )
    task = asyncio.create_task(server.serve())
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{ports[2]}", timeout=30) as http:
            await eventually(lambda: _up(http), what="the API up")
            yield {
                "http": http,
                "cluster": cluster,
                "lease": lease,
                "second": second,
                "endpoints": endpoints,
                "relay": relay,
                "spawned": spawned,
                "ports": ports,
                "tmp": tmp_path,
            }
    finally:
        server.should_exit = True
        await task
        await endpoints.close()
        await rpc.close()


async def _indexed(pool, leases: list[str]) -> bool:
    async with pool.acquire() as conn:
        return all([await conn.fetchval("SELECT status FROM leases WHERE lease = $1", lease) for lease in leases])


async def _up(http: httpx.AsyncClient) -> bool:
    with contextlib.suppress(httpx.HTTPError):
        return (await http.get("/healthz")).status_code == 200
    return False


async def signed(http: httpx.AsyncClient, wallet: Keypair, method: str, path: str, body: object = None):
    content = b"" if body is None else json.dumps(body).encode()
    return await http.request(
        method, path, content=content or None, headers=sign_request(wallet, method, path, content)
    )


async def token_of(http: httpx.AsyncClient, wallet: Keypair, lease: str, label: str = "") -> dict:
    created = await signed(http, wallet, "POST", f"/leases/{lease}/endpoint-tokens", {"label": label})
    assert created.status_code == 201, created.text
    return created.json()


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_a_token_opens_the_endpoint_and_nothing_else_does(served) -> None:
    http, lease, second = served["http"], served["lease"], served["second"]
    wallet = served["cluster"].client_wallet
    url = f"/endpoints/{lease}/api/v1/completions"
    prompt = {"prompt": "the GPUs are"}

    # No token: 401 and how to get one; the job is not reached.
    bare = await http.post(url, json=prompt)
    assert bare.status_code == 401 and bare.headers["www-authenticate"].startswith("Bearer")
    assert f"gpunet lease endpoint token {lease}" in bare.json()["error"]
    assert served["relay"].opened == [] and served["relay"].sent == 0

    # The client's token: the job answers, without ever seeing the token.
    token = await token_of(http, wallet, lease, "laptop")
    assert token["token"].startswith("gpe_") and token["label"] == "laptop"
    answered = await http.post(url, json=prompt, headers=bearer(token["token"]))
    assert answered.status_code == 200, answered.text
    body = answered.json()
    assert body["completion"].startswith("the GPUs are ... is what rank")
    assert body["authorization"] is None and body["forwarded_prefix"] == f"/endpoints/{lease}/api"
    assert answered.headers["content-security-policy"].startswith("sandbox")

    # Malformed, never issued, another lease's, revoked: 400, 401, 403, 403; none reaches the job.
    sent = served["relay"].sent
    assert (await http.post(url, json=prompt, headers=bearer("nope"))).status_code == 400
    assert (await http.post(url, json=prompt, headers={"Authorization": "Basic eDp5"})).status_code == 400
    unknown = await http.post(url, json=prompt, headers=bearer("gpe_" + "A" * 43))
    assert unknown.status_code == 401 and "not a token this coordinator issued" in unknown.json()["error"]
    elsewhere = await token_of(http, wallet, second)
    foreign = await http.post(url, json=prompt, headers=bearer(elsewhere["token"]))
    assert foreign.status_code == 403 and f"not one of lease {lease}'s" in foreign.json()["error"]
    spare = await token_of(http, wallet, lease, "spare")
    revoked = await signed(http, wallet, "DELETE", f"/leases/{lease}/endpoint-tokens/{token['id']}")
    assert revoked.status_code == 200 and revoked.json()["id"] == token["id"]
    refused = await http.post(url, json=prompt, headers=bearer(token["token"]))
    assert refused.status_code == 403 and "revoked" in refused.json()["error"]
    assert served["relay"].sent == sent
    # ... while the lease's other token still opens it
    assert (await http.post(url, json=prompt, headers=bearer(spare["token"]))).status_code == 200

    # Only the lease's client manages its tokens: a stranger's signed request and an unsigned one are refused.
    stranger = Keypair()
    assert (await signed(http, stranger, "POST", f"/leases/{lease}/endpoint-tokens", {})).status_code == 401
    assert (await http.post(f"/leases/{lease}/endpoint-tokens", json={})).status_code == 401
    assert (await signed(http, stranger, "DELETE", f"/leases/{lease}/endpoint-tokens/{spare['id']}")).status_code == 401
    assert (await http.post(url, json=prompt, headers=bearer(spare["token"]))).status_code == 200
    bad_id = await signed(http, wallet, "DELETE", f"/leases/{lease}/endpoint-tokens/xyz")
    assert bad_id.status_code == 400
    assert (await signed(http, wallet, "DELETE", f"/leases/{lease}/endpoint-tokens/{'0' * 16}")).status_code == 404

    # A name the job does not expose: 404 to the token's holder, 401 to a stranger (who learns nothing
    # of the job); a tcp port is not served over HTTP, and says how to reach it.
    missing = await http.get(f"/endpoints/{lease}/nope/", headers=bearer(spare["token"]))
    assert missing.status_code == 404 and "its HTTP endpoints: api" in missing.json()["error"]
    assert (await http.get(f"/endpoints/{lease}/nope/")).status_code == 401
    tcp = await http.get(f"/endpoints/{lease}/ssh/", headers=bearer(spare["token"]))
    assert tcp.status_code == 404 and f"gpunet lease forward {lease} ssh" in tcp.json()["error"]
    assert (await http.get("/endpoints/not-a-lease/api/")).status_code == 400
    assert (await http.get(f"/endpoints/{Keypair().pubkey()}/api/")).status_code == 404

    # Public: anyone, no token (a job's own Authorization reaches it); closed again: 401 again.
    made = await signed(http, wallet, "POST", f"/leases/{lease}/endpoints/api", {"public": True})
    assert made.status_code == 200 and made.json()["public"] is True
    assert made.json()["url"].endswith(f"/endpoints/{lease}/api/")
    public = await http.post(url, json=prompt, headers={"Authorization": "Bearer job-own-key"})
    assert public.status_code == 200 and public.json()["authorization"] == "Bearer job-own-key"
    # ... but a gpunet token never reaches the job, public or not
    assert (await http.post(url, json=prompt, headers=bearer(spare["token"]))).json()["authorization"] is None
    assert (await signed(http, wallet, "POST", f"/leases/{lease}/endpoints/ssh", {"public": True})).status_code == 404
    assert (await signed(http, wallet, "POST", f"/leases/{lease}/endpoints/api", {"public": 1})).status_code == 400
    assert (
        await signed(http, stranger, "POST", f"/leases/{lease}/endpoints/api", {"public": False})
    ).status_code == 401
    assert (await http.post(url, json=prompt)).status_code == 200  # the refusals changed nothing
    closed = await signed(http, wallet, "POST", f"/leases/{lease}/endpoints/api", {"public": False})
    assert closed.status_code == 200
    assert (await http.post(url, json=prompt)).status_code == 401

    # The list: URLs, public flags, the live tokens' ids and labels, never a token.
    listing = await signed(http, wallet, "GET", f"/leases/{lease}/endpoints")
    assert listing.status_code == 200, listing.text
    shown = listing.json()
    assert [(e["name"], e["protocol"], e["public"]) for e in shown["endpoints"]] == [
        ("api", "http", False),
        ("ssh", "tcp", False),
    ]
    assert [(t["id"], t["label"]) for t in shown["tokens"]] == [(spare["id"], "spare")]
    assert spare["token"] not in listing.text and token["token"] not in listing.text
    assert (await http.get(f"/leases/{lease}/endpoints")).status_code == 401

    # The access log: every request to the lease's endpoints, refused ones too, without the query.
    await http.get(f"/endpoints/{lease}/api/count?secret=hunter2", headers=bearer(spare["token"]))
    log = await signed(http, wallet, "GET", f"/leases/{lease}/endpoints/log?tail=5")
    assert log.status_code == 200, log.text
    last = log.json()["items"][-1]
    assert (last["method"], last["path"], last["status"], last["token"]) == (
        "GET",
        f"/endpoints/{lease}/api/count",
        200,
        spare["id"],
    )
    assert last["node_key"] in {str(k.pubkey()) for _, k in served["cluster"].nodes} and last["bytes_out"] > 0
    whole = await signed(http, wallet, "GET", f"/leases/{lease}/endpoints/log?limit=1000")
    statuses = [e["status"] for e in whole.json()["items"]]
    assert statuses[:2] == [401, 200] and {400, 403, 404} <= set(statuses)
    assert "hunter2" not in whole.text
    assert (await signed(http, stranger, "GET", f"/leases/{lease}/endpoints/log")).status_code == 401
    assert (await signed(http, wallet, "GET", f"/leases/{lease}/endpoints/log?tail=0")).status_code == 400

    # ... bounded: the newest entries of each lease are kept
    endpoints = served["endpoints"]
    endpoints.settings = endpoints.settings.model_copy(update={"endpoint_log_per_lease": 3})
    before = whole.json()["items"][-1]["id"]
    for _ in range(5):
        await http.get(f"/endpoints/{lease}/api/count", headers=bearer(spare["token"]))
    kept = (await signed(http, wallet, "GET", f"/leases/{lease}/endpoints/log?limit=1000")).json()["items"]
    assert [e["id"] for e in kept] == [before + 3, before + 4, before + 5]

    metrics = served["endpoints"].metrics.render()
    assert 'gpunet_endpoint_requests_total{code="200"}' in metrics
    assert 'gpunet_endpoint_requests_total{code="403"}' in metrics and lease not in metrics


async def test_requests_spread_over_the_nodes_stream_and_move_to_a_node_that_answers(served) -> None:
    http, lease, relay = served["http"], served["lease"], served["relay"]
    endpoints = served["endpoints"]
    token = (await token_of(http, served["cluster"].client_wallet, lease))["token"]
    url = f"/endpoints/{lease}/api/v1/completions"

    # Both nodes serve: requests go round robin.
    marks = [
        (await http.post(url, json={"prompt": "x"}, headers=bearer(token))).json()["node"]["mark"] for _ in range(6)
    ]
    assert set(marks) == {"node0", "node1"}

    # An answered request's channel serves the next one (no new stream); one the job closed while it
    # was kept is dropped for a new one, the node not blamed.
    opened = len(relay.opened)
    for _ in range(4):
        assert (await http.post(url, json={"prompt": "x"}, headers=bearer(token))).status_code == 200
    assert len(relay.opened) == opened
    await asyncio.sleep(1.0)  # the jobs close connections idle for 0.5 s
    again = await http.post(url, json={"prompt": "x"}, headers=bearer(token))
    assert again.status_code == 200 and len(relay.opened) == opened + 1
    assert all(endpoints.health[(lease, "api", k.pubkey())].healthy for _, k in served["cluster"].nodes)

    # A streamed answer comes as the job sends it, not once it has ended.
    started = time.monotonic()
    async with http.stream("GET", f"/endpoints/{lease}/api/stream?n=5", headers=bearer(token)) as streamed:
        assert streamed.status_code == 200 and streamed.headers["content-type"] == "text/event-stream"
        chunks = []
        async for chunk in streamed.aiter_text():
            chunks.append((time.monotonic() - started, chunk))
    assert "".join(c for _, c in chunks).count("data: ") == 5
    assert chunks[0][0] < 1.0 and chunks[-1][0] > 1.0, chunks  # the first before the job had sent them all

    # A job's cookies and redirects stay under its endpoint's prefix (every lease's share one origin).
    jar = await http.get(f"/endpoints/{lease}/api/cookie", headers=bearer(token))
    assert jar.headers.get_list("set-cookie") == [
        f"sid=1; HttpOnly; Path=/endpoints/{lease}/api/",
        f"pref=2; Path=/endpoints/{lease}/api/ui",
    ]
    moved = await http.get(f"/endpoints/{lease}/api/redirect", headers=bearer(token))
    assert moved.status_code == 302 and moved.headers["location"] == f"/endpoints/{lease}/api/v1/completions"

    # A body over the limit: 413, and the job never sees it.
    counted = [(await http.get(f"/endpoints/{lease}/api/count", headers=bearer(token))).json() for _ in range(2)]
    before = sum(c["taken"] for c in counted)
    endpoints.settings = endpoints.settings.model_copy(update={"endpoint_max_body_bytes": 1000})
    big = await http.post(url, content=b"x" * 1001, headers=bearer(token))
    assert big.status_code == 413
    chunked = await http.post(url, content=_chunks(b"x" * 600, 2), headers=bearer(token))
    assert chunked.status_code == 413
    counted = [(await http.get(f"/endpoints/{lease}/api/count", headers=bearer(token))).json() for _ in range(2)]
    assert sum(c["taken"] for c in counted) == before

    # Node 0's job stops listening: requests keep answering, from node 1, at once (the failed try is retried).
    served["spawned"][0].kill()
    served["spawned"][0].wait()
    answered = [await http.post(url, json={"prompt": "x"}, headers=bearer(token)) for _ in range(4)]
    assert [a.status_code for a in answered] == [200] * 4
    assert {a.json()["node"]["mark"] for a in answered} == {"node1"}
    assert endpoints.health[(lease, "api", served["cluster"].nodes[0][1].pubkey())].healthy is False
    # and the next ones go to node 1 first (node 0 is skipped until a check passes)
    tried = len(relay.opened)
    for _ in range(4):
        assert (await http.post(url, json={"prompt": "x"}, headers=bearer(token))).json()["node"]["mark"] == "node1"
    assert served["cluster"].nodes[0][1].pubkey() not in relay.opened[tried:]

    # No node serves: 503 with Retry-After; back: served again at the same URL.
    saved = dict(relay.ports)
    relay.ports.clear()
    gone = await http.post(url, json={"prompt": "x"}, headers=bearer(token))
    assert gone.status_code == 503 and int(gone.headers["retry-after"]) >= 1
    relay.ports.update(saved)
    node0 = served["cluster"].nodes[0][1].pubkey()
    served["spawned"].append(start_server(served["ports"][0], "node0-again", served["tmp"] / "again.log"))
    await eventually(lambda: listening(served["ports"][0]), what="node 0's job listening again")
    await endpoints.check_health()
    assert endpoints.health[(lease, "api", node0)].healthy is True
    marks = [
        (await http.post(url, json={"prompt": "x"}, headers=bearer(token))).json()["node"]["mark"] for _ in range(4)
    ]
    assert set(marks) == {"node0-again", "node1"}

    # The lease's rate: beyond its burst, 429 with Retry-After; a moment later it answers again.
    endpoints.settings = endpoints.settings.model_copy(
        update={"endpoint_requests_per_second": 2.0, "endpoint_burst": 3}
    )
    endpoints._buckets.clear()
    codes = [(await http.get(f"/endpoints/{lease}/api/count", headers=bearer(token))).status_code for _ in range(4)]
    assert codes == [200, 200, 200, 429]
    limited = await http.get(f"/endpoints/{lease}/api/count", headers=bearer(token))
    assert limited.status_code == 429 and limited.headers["retry-after"] == "1"
    await asyncio.sleep(0.6)
    assert (await http.get(f"/endpoints/{lease}/api/count", headers=bearer(token))).status_code == 200
    # a stranger's refused requests spend none of it
    endpoints._buckets.clear()
    for _ in range(5):
        assert (await http.get(f"/endpoints/{lease}/api/count")).status_code == 401
    assert (await http.get(f"/endpoints/{lease}/api/count", headers=bearer(token))).status_code == 200

    # Requests in flight: beyond the lease's streams, 429; once they end, answered.
    endpoints.settings = endpoints.settings.model_copy(
        update={"endpoint_requests_per_second": 1000.0, "endpoint_burst": 1000, "endpoint_max_streams": 2}
    )
    slow = [
        asyncio.create_task(http.get(f"/endpoints/{lease}/api/slow?s=1.5", headers=bearer(token))) for _ in range(2)
    ]
    await eventually(lambda: _truly(endpoints.streams.get(lease) == 2), what="two requests in flight")
    busy = await http.get(f"/endpoints/{lease}/api/count", headers=bearer(token))
    assert busy.status_code == 429 and "in flight" in busy.json()["error"]
    assert [s.status_code for s in await asyncio.gather(*slow)] == [200, 200]
    assert (await http.get(f"/endpoints/{lease}/api/count", headers=bearer(token))).status_code == 200
    assert lease not in endpoints.streams  # every stream given back


async def test_a_closed_lease_s_endpoints_answer_410(served, chain) -> None:
    http, lease, cluster = served["http"], served["lease"], served["cluster"]
    token = (await token_of(http, cluster.client_wallet, lease))["token"]
    url = f"/endpoints/{lease}/api/v1/completions"
    assert (await http.post(url, json={"prompt": "x"}, headers=bearer(token))).status_code == 200
    # The ledger does not answer: 503 with Retry-After (nothing served on a stale word), then served again.
    endpoints, pool = served["endpoints"], served["endpoints"].pool
    endpoints.pool = _Down()
    endpoints.forget(lease)
    down = await http.post(url, json={"prompt": "x"}, headers=bearer(token))
    assert down.status_code == 503 and down.headers["retry-after"] == "5", down.text
    endpoints.pool = pool
    assert (await http.post(url, json={"prompt": "x"}, headers=bearer(token))).status_code == 200
    await cluster.market.close_lease(cluster.lessee, cluster.lease)

    async def gone() -> bool:
        return (await http.post(url, json={"prompt": "x"}, headers=bearer(token))).status_code == 410

    await eventually(gone, what="the closed lease's endpoint answering 410")
    assert (await http.post(url, json={"prompt": "x"})).status_code == 410
    refused = await signed(http, cluster.client_wallet, "POST", f"/leases/{lease}/endpoint-tokens", {})
    assert refused.status_code == 410
    # the client still reads what its endpoints served
    log = await signed(http, cluster.client_wallet, "GET", f"/leases/{lease}/endpoints/log")
    assert [e["status"] for e in log.json()["items"]][:1] == [200] and log.json()["items"][-1]["status"] == 410


class _Down:
    """A pool whose database does not answer."""

    def acquire(self):
        raise OSError("connection refused")


async def _truly(value: bool) -> bool:
    return value


async def _chunks(data: bytes, n: int):
    for _ in range(n):
        yield data
