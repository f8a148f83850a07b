"""The coordinator's and the workers' operator surface with real parts (gpunet-localnet, embedded
PostgreSQL, the coordinator and its API, `gpunet worker run` processes): /metrics, parsed with
prometheus_client's text parser, moves with what happened (sessions, heartbeats, a placement, a lost
node's failover and slash; on a worker's port its GPUs, its job running, its session); a worker's
heartbeat telemetry is served by the API; a worker without its coordinator is not ready; /readyz is not ready while the
chain RPC does not answer (or the attester's balance is under the minimum) and ready again once it
does, while /healthz stays up."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from urllib.parse import urlsplit

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed

from coordinator.settings import Settings
from gpunet.localnet import free_ports
from gpunet.testbed import Market
from worker.simulate import SimulatedGpus

from .conftest import eventually
from .test_openapi_responses import _check
from .world import World, live_settings, running, running_lease, start_worker


@pytest.fixture
async def chain(node):
    async with AsyncClient(node.url, commitment=Confirmed) as client:
        yield client


async def _metrics(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of /metrics (the coordinator's API or a worker's port), by (sample name, sorted labels)."""
    async with httpx.AsyncClient(timeout=10) as http:
        response = await http.get(f"{url}/metrics")
    assert response.status_code == 200, response.text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(response.text)
        for s in family.samples
    }


async def _serving(http: httpx.AsyncClient) -> bool:
    with contextlib.suppress(httpx.TransportError):
        return (await http.get("/healthz")).status_code == 200
    return False


async def _worker_metrics(url: str) -> dict | None:
    """The worker's /metrics once its port is open."""
    with contextlib.suppress(httpx.TransportError):
        return await _metrics(url)
    return None


def _value(metrics: dict, name: str, **labels: str) -> float:
    return metrics[(name, tuple(sorted(labels.items())))]


@pytest.mark.timeout(300)
async def test_metrics_move_with_placements_failovers_and_slashes_and_telemetry_is_served(
    node, chain, pool, database_url, tmp_path, spawned
) -> None:
    world = await World().build(chain, tmp_path)
    settings = live_settings(
        node,
        database_url,
        lost_after_seconds=2.0,
        settle_seconds=1,
        settle_interval_seconds=0,
        settle_min_amount=0,
        reconnect_grace_seconds=2,
    )
    api = f"http://127.0.0.1:{settings.api_port}"
    async with running(settings, pool, world.admin) as coordinator:
        async with httpx.AsyncClient(base_url=api, timeout=10) as http:
            await eventually(lambda: _serving(http), what="the API serving")
        before = await _metrics(api)
        assert _value(before, "gpunet_coordinator_placements_total") == 0
        assert ("gpunet_coordinator_slashes_total", (("fault", "MissedHeartbeats"),)) not in before  # none yet
        # Each worker with its operator port (worker/metrics.py).
        ports = free_ports(3)
        workers = {
            key: start_worker(
                world,
                i,
                coordinator.gateway.url,
                tmp_path / f"worker{i}.log",
                env={"GPUNET_WORKER_METRICS_PORT": str(ports[i])},
            )
            for i, key in enumerate(world.node_keys())
        }
        spawned.extend(workers.values())
        port_of = {key: f"http://127.0.0.1:{ports[i]}" for i, key in enumerate(world.node_keys())}

        async def sessions(count: int) -> bool:
            return _value(await _metrics(api), "gpunet_coordinator_workers_connected") == count

        await eventually(lambda: sessions(3), what="3 worker sessions in the gauge")
        beats = _value(await _metrics(api), "gpunet_coordinator_heartbeats_total")

        async def more_heartbeats() -> bool:
            return _value(await _metrics(api), "gpunet_coordinator_heartbeats_total") >= beats + 3

        await eventually(more_heartbeats, what="heartbeats counted")

        # The telemetry each simulated worker sends is served, by node key and by node account.
        async with httpx.AsyncClient(base_url=api, timeout=10) as http:
            doc = (await http.get("/openapi.json")).json()
            for _, node_key in world.suppliers:
                key = str(node_key.pubkey())
                served = await http.get(f"/nodes/{key}/telemetry")
                assert served.status_code == 200, served.text
                _check(doc, "/nodes/{key}/telemetry", "get", served)
                body = served.json()
                expected = [g.uuid for g in SimulatedGpus("H100", 2, 80, key).inventory().gpus]
                assert body["node_key"] == key and body["connected"] and body["healthy"]
                assert [g["uuid"] for g in body["gpus"]] == expected
                assert all(g["temperature_c"] == 40 and g["utilization_pct"] == 0 for g in body["gpus"])
            # The same GPUs on each worker's own port, and the worker ready (connected, GPUs healthy).
            for key, url in port_of.items():
                worker = await eventually(lambda url=url: _worker_metrics(url), what="the worker's /metrics")
                assert isinstance(worker, dict)
                uuids = [g.uuid for g in SimulatedGpus("H100", 2, 80, key).inventory().gpus]
                for i, uuid in enumerate(uuids):
                    assert _value(worker, "gpunet_worker_gpu_temperature_celsius", gpu=str(i), uuid=uuid) == 40
                    assert _value(worker, "gpunet_worker_gpu_healthy", gpu=str(i), uuid=uuid) == 1
                assert _value(worker, "gpunet_worker_session_connected") == 1
                assert _value(worker, "gpunet_worker_jobs", state="running") == 0
                ready = await http.get(f"{url}/readyz")
                assert ready.status_code == 200, ready.text
                assert ready.json() == {"status": "ready", "checks": {"session": "ok", "gpus": "ok"}}
            stranger = await http.get(f"/nodes/{world.client.pubkey()}/telemetry")
            assert stranger.status_code == 404 and "no heartbeat" in stranger.json()["error"]
            _check(doc, "/nodes/{key}/telemetry", "get", stranger)

        _, placed = await running_lease(world, api, chain, 120)
        placed_now = await _metrics(api)
        assert _value(placed_now, "gpunet_coordinator_placements_total") == 1
        assert _value(placed_now, "gpunet_coordinator_placement_seconds_count") == 1
        assert _value(placed_now, "gpunet_coordinator_leases_waiting", reason="no_capacity") == 0
        assert _value(placed_now, "gpunet_coordinator_failovers_total") == 0
        for key in placed:  # the job runs on each placed node, its share held
            worker = await _metrics(port_of[key])
            assert _value(worker, "gpunet_worker_jobs", state="running") == 1
            assert _value(worker, "gpunet_worker_shares_held") == 1

        # One leased worker dies: it is lost, slashed once, its share moved once; the sessions gauge follows.
        lost = placed[0]
        workers[lost].send_signal(signal.SIGKILL)

        async def judged() -> bool:
            m = await _metrics(api)
            return (
                _value(m, "gpunet_coordinator_failovers_total") == 1
                and m.get(("gpunet_coordinator_slashes_total", (("fault", "MissedHeartbeats"),))) == 1
            )

        await eventually(judged, timeout=90, what="the lost node's failover and slash counted")
        after = await _metrics(api)
        assert _value(after, "gpunet_coordinator_workers_connected") == 2
        assert _value(after, "gpunet_coordinator_placements_total") == 1  # a failover is not a placement
        assert _value(after, "gpunet_coordinator_attester_lamports") > 0
        assert _value(after, "gpunet_coordinator_stalls_total") == 0
        # The lost node's last telemetry is kept, and says it is no longer connected.
        async with httpx.AsyncClient(base_url=api, timeout=10) as http:
            assert (await http.get(f"/nodes/{lost}/telemetry")).json()["connected"] is False
    # The coordinator is gone: a surviving worker is alive but not ready, and says why.
    survivor = port_of[placed[1]]
    async with httpx.AsyncClient(timeout=10) as http:

        async def not_ready() -> httpx.Response | None:
            answer = await http.get(f"{survivor}/readyz")
            return answer if answer.status_code == 503 else None

        down = await eventually(not_ready, what="the worker not ready without its coordinator")
        assert isinstance(down, httpx.Response)
        assert down.json()["checks"] == {"session": "not connected to the coordinator", "gpus": "ok"}
        assert (await http.get(f"{survivor}/healthz")).status_code == 200
        assert _value(await _metrics(survivor), "gpunet_worker_session_connected") == 0
    for proc in workers.values():
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)


class Forwarder:
    """A TCP relay in front of the chain RPC that the test can take down and bring back on the same
    port: the coordinator sees its RPC stop answering, as when the node goes away."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        for writer in self._writers:
            writer.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._tasks.add(task := asyncio.current_task())  # type: ignore[arg-type]
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        self._writers |= {writer, up_writer}

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError, OSError):
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            sink.close()

        try:
            await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        finally:
            self._writers -= {writer, up_writer}
            self._tasks.discard(task)  # type: ignore[arg-type]


@pytest.mark.timeout(180)
async def test_readyz_is_not_ready_while_the_rpc_is_down_and_ready_again_when_it_returns(
    node, market: Market, pool, database_url
) -> None:
    target = urlsplit(node.url)
    relay = Forwarder((target.hostname or "127.0.0.1", target.port or 80))
    await relay.start()
    settings = Settings(
        rpc_url=f"http://127.0.0.1:{relay.port}",
        ws_url=node.ws_url,
        database_url=database_url,
        poll_seconds=1.0,
        api_port=free_ports(1)[0],
        gateway_port=0,
        attester_balance_seconds=0.5,
    )
    api = f"http://127.0.0.1:{settings.api_port}"
    async with running(settings, pool, market.attester), httpx.AsyncClient(base_url=api, timeout=30) as http:
        await eventually(lambda: _serving(http), what="the API serving")
        doc = (await http.get("/openapi.json")).json()

        async def ready(expected: bool) -> httpx.Response | None:
            answer = await http.get("/readyz")
            return answer if (answer.status_code == 200) is expected else None

        up = await eventually(lambda: ready(True), what="ready with the RPC up")
        assert isinstance(up, httpx.Response)
        assert up.json() == {
            "status": "ready",
            "checks": {"database": "ok", "rpc": "ok", "attester_balance": "ok"},
        }
        _check(doc, "/readyz", "get", up)
        errors = _value(await _metrics(api), "gpunet_coordinator_rpc_errors_total")

        def readiness(metrics: dict) -> dict[str, float]:  # /readyz's checks as /metrics gives them, for the alert
            return {
                c: _value(metrics, "gpunet_coordinator_ready", check=c) for c in ("database", "rpc", "attester_balance")
            }

        assert readiness(await _metrics(api)) == {"database": 1, "rpc": 1, "attester_balance": 1}

        await relay.stop()
        down = await eventually(lambda: ready(False), what="not ready with the RPC down")
        assert isinstance(down, httpx.Response) and down.status_code == 503
        body = down.json()
        assert body["status"] == "not_ready" and body["checks"]["rpc"].startswith("does not answer")
        assert body["checks"]["database"] == "ok"  # only what failed is reported failed
        assert readiness(await _metrics(api)) == {"database": 1, "rpc": 0, "attester_balance": 1}
        _check(doc, "/readyz", "get", down)
        healthz = await http.get("/healthz")
        assert healthz.status_code == 200 and healthz.json() == {"status": "ok"}  # the process is up
        _check(doc, "/healthz", "get", healthz)

        async def rpc_errors_counted() -> bool:  # the balance loop's failed reads
            return _value(await _metrics(api), "gpunet_coordinator_rpc_errors_total") > errors

        await eventually(rpc_errors_counted, what="the RPC errors counted")

        await relay.start()  # the same port again
        back = await eventually(lambda: ready(True), what="ready again with the RPC back")
        assert isinstance(back, httpx.Response) and back.json()["checks"]["rpc"] == "ok"

        # The attester under the minimum: not ready, saying so (the settings are read per request).
        settings.attester_min_lamports = 10**18
        low = await http.get("/readyz")
        assert low.status_code == 503 and "under the minimum" in low.json()["checks"]["attester_balance"]
        assert low.json()["checks"]["rpc"] == "ok"
    await relay.stop()
