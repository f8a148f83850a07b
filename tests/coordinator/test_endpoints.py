"""Served endpoints with real processes: gpunet-localnet, the coordinator with its API and relay,
three `gpunet worker run` processes with simulated GPUs, and on each node of a lease a small model
server (tests/worker/jobs/completion.py) in a bubblewrap host job with a network namespace of its
own. The client manages access with the `gpunet lease endpoint` commands; each attack beside its
honest control. One world for every case: a 2-node lease and a 1-node lease, both serving."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import httpx
import pytest
from solders.pubkey import Pubkey

from gpunet.keys import create_keypair_file
from gpunet.protocol import Expose, JobSpec
from tests.worker.sandboxes import JOBS

from .conftest import eventually
from .world import (
    World,
    all_running,
    cluster_env,
    live_settings,
    open_lease,
    placed_view,
    running,
    running_lease,
    start_workers,
    submitted,
    truly,
)

COMPLETION = str(JOBS / "completion.py")
PORT = 8000


def _env(i: int) -> dict[str, str]:
    # each job in a network namespace of its own: the three serve the same port on one machine
    return {**cluster_env(i), "GPUNET_WORKER_NETWORK": "none"}


async def _gpunet(*args: str | Path) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).with_name("gpunet")),
        *map(str, args),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "COLUMNS": "250"},
    )
    out = (await asyncio.wait_for(proc.communicate(), 60))[0].decode()
    return proc.returncode or 0, out


def _which(answer: httpx.Response) -> str:
    """The node's working directory (its worker's state dir): which worker answered."""
    assert answer.status_code == 200, answer.text
    workdir = answer.json()["node"]["workdir"]
    return next(f"worker{i}" for i in range(3) if f"/worker{i}/" in workdir)


@pytest.mark.timeout(600)
async def test_endpoints_on_real_workers(node, chain, pool, database_url, tmp_path, spawned) -> None:
    world = await World().build(chain, tmp_path)
    settings = live_settings(
        node,
        database_url,
        state_dir=tmp_path / "coordinator",
        lost_after_seconds=3.0,
        reconnect_grace_seconds=2,
        close_grace_seconds=4,
        endpoint_requests_per_second=20.0,
        endpoint_burst=40,
        endpoint_health_seconds=1.0,
    )
    api = f"http://127.0.0.1:{settings.api_port}"
    wallet = tmp_path / "client.json"
    create_keypair_file(wallet, world.client)
    cli = ("--coordinator", api, "-k", wallet)
    spec = JobSpec(
        command=[sys.executable, COMPLETION],
        env={"PORT": str(PORT)},
        expose=[Expose(name="api", port=PORT), Expose(name="ssh", port=2222, protocol="tcp")],
        restart_policy="never",
    )
    async with running(settings, pool, world.admin) as coordinator:
        workers = await start_workers(world, coordinator, tmp_path, spawned, _env)
        keys = [Pubkey.from_string(k) for k in world.node_keys()]
        await eventually(lambda: truly(all(coordinator.relay.linked(k) for k in keys)), what="every data-plane link")
        lease, placed = await running_lease(world, api, chain, 600, spec)
        other = await open_lease(world, chain, 600, gpus=2, lease_id=2)
        await eventually(lambda: submitted(api, world.client, other, spec), what="the second lease's job")
        [spare] = (await eventually(lambda: placed_view(api, world.client, other), what="placed"))["placement"]["nodes"]
        await eventually(lambda: all_running(api, world.client, other, [spare]), what="its job running")
        worker_of = {k: f"worker{i}" for i, k in enumerate(world.node_keys())}
        url = f"{api}/endpoints/{lease}/api/v1/completions"

        async with httpx.AsyncClient(timeout=30) as http:

            async def listening() -> bool:  # the jobs' servers are up once both nodes answer
                answer = await http.post(url, json={"prompt": "up?"}, headers=bearer)
                return answer.status_code == 200

            # The client's token (`gpunet lease endpoint token`): the job answers, from both nodes in turn.
            code, out = await _gpunet("lease", "endpoint", "token", lease, "--label", "laptop", "--json", *cli)
            assert code == 0, out
            token = json.loads(out)
            assert token["urls"] == [f"{api}/endpoints/{lease}/api/"]
            bearer = {"Authorization": f"Bearer {token['token']}"}
            await eventually(listening, what="the job's server answering")
            answers = [await http.post(url, json={"prompt": "GPUs are"}, headers=bearer) for _ in range(6)]
            assert {_which(a) for a in answers} == {worker_of[k] for k in placed}
            assert answers[0].json()["completion"].startswith("GPUs are ... is what rank")
            assert answers[0].json()["authorization"] is None  # the job never sees the client's token

            # Without a token, with another lease's, with a revoked one: 401, 403, 403.
            bare = await http.post(url, json={"prompt": "x"})
            assert bare.status_code == 401 and "gpunet lease endpoint token" in bare.json()["error"]
            code, out = await _gpunet("lease", "endpoint", "token", other, "--json", *cli)
            elsewhere = {"Authorization": f"Bearer {json.loads(out)['token']}"}
            assert (await http.post(url, json={"prompt": "x"}, headers=elsewhere)).status_code == 403
            assert (await http.get(f"{api}/endpoints/{other}/api/", headers=elsewhere)).status_code == 200  # its own
            code, out = await _gpunet("lease", "endpoint", "token", lease, "--json", *cli)
            second = {"Authorization": f"Bearer {json.loads(out)['token']}"}
            code, out = await _gpunet("lease", "endpoint", "revoke", lease, token["id"], *cli)
            assert code == 0 and f"token {token['id']} revoked" in out, out
            revoked = await http.post(url, json={"prompt": "x"}, headers=bearer)
            assert revoked.status_code == 403 and "revoked" in revoked.json()["error"]
            still = await http.post(url, json={"prompt": "x"}, headers=second)
            assert still.status_code == 200, still.text

            # Public: anyone, without a token; --off: a token again.
            code, out = await _gpunet("lease", "endpoint", "public", lease, "api", *cli)
            assert code == 0 and "is public" in out, out
            assert (await http.post(url, json={"prompt": "x"})).status_code == 200
            code, out = await _gpunet("lease", "endpoint", "public", lease, "ssh", *cli)
            assert code == 1 and "tcp" in out, out  # a tcp port is not served over HTTP: refused, nothing changed
            code, out = await _gpunet("lease", "endpoint", "public", lease, "api", "--off", *cli)
            assert code == 0 and (await http.post(url, json={"prompt": "x"})).status_code == 401

            # A name the job does not expose, and a tcp one: 404.
            assert (await http.get(f"{api}/endpoints/{lease}/nope/", headers=second)).status_code == 404
            tcp = await http.get(f"{api}/endpoints/{lease}/ssh/", headers=second)
            assert tcp.status_code == 404 and "gpunet lease forward" in tcp.json()["error"]

            # The lease's rate (20/s, bursts of 40): beyond it 429 with Retry-After; a moment later, answered.
            codes = []
            while 429 not in codes and len(codes) < 300:
                codes.append((await http.get(f"{api}/endpoints/{lease}/api/count", headers=second)).status_code)
            limited = await http.get(f"{api}/endpoints/{lease}/api/count", headers=second)
            assert limited.status_code == 429 and int(limited.headers["retry-after"]) >= 1, codes
            assert codes[:30] == [200] * 30
            await asyncio.sleep(1.5)
            assert (await http.get(f"{api}/endpoints/{lease}/api/count", headers=second)).status_code == 200

            # The list and the access log, as the client reads them.
            code, out = await _gpunet("lease", "endpoint", "list", lease, "--json", *cli)
            listed = json.loads(out)
            assert [(e["name"], e["public"]) for e in listed["endpoints"]] == [("api", False), ("ssh", False)]
            assert [t["label"] for t in listed["tokens"]] == [""] and token["token"] not in out  # "laptop" was revoked
            code, out = await _gpunet("lease", "endpoint", "log", lease, "--tail", "1000", "--json", *cli)
            entries = [json.loads(line) for line in out.splitlines()]
            assert {401, 403, 404, 429, 200} <= {e["status"] for e in entries}
            assert {e["node_key"] for e in entries if e["status"] == 200} == set(placed)
            metrics = (await http.get(f"{api}/metrics")).text  # counted, never by lease
            assert 'gpunet_endpoint_requests_total{code="429"}' in metrics and str(lease) not in metrics

            # No node serves the second lease's endpoint (its job has ended): 503 with Retry-After.
            quit_ = await http.get(f"{api}/endpoints/{other}/api/quit", headers=elsewhere)
            assert quit_.status_code == 200

            async def unserved() -> httpx.Response | None:
                answer = await http.get(f"{api}/endpoints/{other}/api/", headers=elsewhere)
                return answer if answer.status_code == 503 else None

            gone = await eventually(unserved, what="503 once no node serves it")
            assert int(gone.headers["retry-after"]) >= 1  # type: ignore[union-attr]
            # Its close ends its endpoints: 410.
            await world.market.close_lease(world.lessee, other)

            async def ended() -> bool:
                return (await http.get(f"{api}/endpoints/{other}/api/", headers=elsewhere)).status_code == 410

            await eventually(ended, what="410 once the lease closed")

            # A node of the 2-node lease is killed: its requests go on at once on the other node, and on
            # the node its share moves to after the failover, at the same URL.
            killed, kept = placed
            workers[killed].send_signal(signal.SIGKILL)
            answers = [await http.post(url, json={"prompt": "still?"}, headers=second) for _ in range(6)]
            assert [a.status_code for a in answers] == [200] * 6
            assert {_which(a) for a in answers} == {worker_of[kept]}

            async def moved() -> set[str] | None:
                await asyncio.sleep(0.3)  # within the lease's rate
                seen = {_which(await http.post(url, json={"prompt": "x"}, headers=second)) for _ in range(2)}
                return seen if worker_of[spare] in seen else None

            served = await eventually(moved, timeout=180, what="the replacement node serving")
            assert served == {worker_of[kept], worker_of[spare]}
