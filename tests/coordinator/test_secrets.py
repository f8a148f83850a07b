"""Job secrets sealed to the lease's nodes, with real processes (gpunet-localnet, embedded
PostgreSQL, the coordinator, three workers): the client seals a secret to each placed node, the job
reads it from its environment, and its plaintext is nowhere else (the coordinator's database, its
API answers and logs, the workers' journals, state directories and logs). A node the lease moves
to after a failover waits for the secret ("waiting_secrets") until the client seals it to that node
too; then the job runs there. A secret sealed to another node does not open."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import shlex
import sys
from pathlib import Path

import httpx
import pytest
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solders.pubkey import Pubkey

from coordinator.settings import Settings
from gpunet import instructions as ix
from gpunet.client import send_and_confirm
from gpunet.jobs import CoordinatorError, job_view, seal_missing_secrets, submit_secrets
from gpunet.keys import create_keypair_file
from gpunet.pda import lease_pda
from gpunet.protocol import JobSpec, sign_request
from gpunet.secrets import seal

from .conftest import eventually
from .world import PRICE, World, live_settings, placed_view, running, start_workers, submitted

GPUNET = str(Path(sys.executable).with_name("gpunet"))
SECRET = "s3cret-token-Zq8xW2"  # the plaintext looked for everywhere
DIGEST = hashlib.sha256(SECRET.encode()).hexdigest()
# prints the hash of its secret (never the secret), then runs until stopped
PROGRAM = (
    "import hashlib, os, sys, time\n"
    "token = os.environ.get('API_TOKEN')\n"
    "print('token', hashlib.sha256(token.encode()).hexdigest() if token else 'missing', flush=True)\n"
    "time.sleep(100000)\n"
)


@pytest.fixture
async def chain(node):
    async with AsyncClient(node.url, commitment=Confirmed) as client:
        yield client


def _settings(node, database_url: str) -> Settings:
    return live_settings(
        node,
        database_url,
        lost_after_seconds=2.0,
        settle_seconds=1,
        settle_interval_seconds=0,  # every receipt as it comes (production: hourly)
        settle_min_amount=0,
        reconnect_grace_seconds=2,
    )


async def _states(api: str, world: World, lease) -> dict[str, str]:
    return {n["node_key"]: n["state"] for n in (await job_view(api, world.client, lease))["nodes"]}


async def _all_in(api: str, world: World, lease, nodes: list[str], state: str) -> bool:
    states = await _states(api, world, lease)
    return all(states.get(n) == state for n in nodes)


async def _token_lines(api: str, world: World, lease) -> dict[str, str]:
    view = await job_view(api, world.client, lease, tail=200)
    return {line["node_key"]: line["line"] for line in view["logs"] if line["line"].startswith("token ")}


async def _database_text(pool) -> str:
    """Every row of every table of the coordinator's database, as text."""
    async with pool.acquire() as conn:
        tables = await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        rows = []
        for t in tables:
            rows += [r[0] for r in await conn.fetch(f'SELECT t::text FROM "{t["tablename"]}" t')]
    return "\n".join(rows)


def _files_text(root: Path) -> bytes:
    return b"\n".join(p.read_bytes() for p in root.rglob("*") if p.is_file())


@pytest.mark.timeout(300)
async def test_a_secret_reaches_the_job_alone_and_a_moved_share_waits_for_its_reseal(
    node, chain, pool, database_url, tmp_path, spawned, caplog
) -> None:
    caplog.set_level(logging.DEBUG)
    world = await World().build(chain, tmp_path)
    settings = _settings(node, database_url)
    api = f"http://127.0.0.1:{settings.api_port}"
    spec = JobSpec(command=[sys.executable, "-c", PROGRAM], env={"PLAIN": "visible-env"}, secrets=["API_TOKEN"])
    async with running(settings, pool, world.admin) as coordinator:
        workers = await start_workers(world, coordinator, tmp_path, spawned)
        lease = lease_pda(world.client.pubkey(), 1)
        terms = ix.LeaseTerms(1, 80, 4, 0, 2 * PRICE, 300)
        opened = ix.open_lease(world.client.pubkey(), world.client_tokens, world.mint, 1, terms)
        await send_and_confirm(chain, world.client, [opened])
        await eventually(lambda: submitted(api, world.client, lease, spec), what="the job accepted")
        placed_at = await eventually(lambda: placed_view(api, world.client, lease), what="the lease placed")
        placed = placed_at["placement"]["nodes"]
        spare = next(k for k in world.node_keys() if k not in placed)

        # Placed, nothing sealed to its nodes yet: each waits for the client's secrets.
        await eventually(lambda: _all_in(api, world, lease, placed, "waiting_secrets"), what="both nodes waiting")
        view = await job_view(api, world.client, lease)
        assert view["secrets_sealed_to"] == [] and view["job"]["secrets"] == ["API_TOKEN"]
        assert all("waiting for the client's secrets" in n["detail"] for n in view["nodes"])
        assert await _token_lines(api, world, lease) == {}  # the job did not start anywhere

        # Attack: a value sealed to the spare's key, given as the first node's: it does not open there.
        path = f"/leases/{lease}/secrets"
        body = json.dumps({"job_number": 1, "nodes": {placed[0]: {"API_TOKEN": seal(_key(spare), SECRET)}}}).encode()
        async with httpx.AsyncClient(base_url=api) as http:
            given = await http.post(path, content=body, headers=sign_request(world.client, "POST", path, body))
        assert given.status_code == 201, given.text

        async def refused_there() -> bool:
            nodes = {n["node_key"]: n for n in (await job_view(api, world.client, lease))["nodes"]}
            return "does not open with this node's key" in (nodes[placed[0]]["detail"] or "")

        await eventually(refused_there, what="the wrongly sealed secret refused")
        assert (await _states(api, world, lease))[placed[0]] == "waiting_secrets"

        # Control: sealed to each placed node, the job starts on both and reads the secret.
        await submit_secrets(api, world.client, lease, 1, {"API_TOKEN": SECRET}, [_key(k) for k in placed])
        await eventually(lambda: _all_in(api, world, lease, placed, "running"), what="the job running on both nodes")
        await eventually(lambda: _has_tokens(api, world, lease, placed), what="both jobs printed the secret's hash")

        # Failover: the first node's worker dies; its share moves to the spare, which waits for the secret.
        workers[placed[0]].kill()
        await eventually(
            lambda: _all_in(api, world, lease, [spare], "waiting_secrets"), timeout=90, what="the spare waiting"
        )
        moved = await job_view(api, world.client, lease)
        assert spare in moved["placement"]["nodes"] and spare not in moved["secrets_sealed_to"]
        assert spare not in await _token_lines(api, world, lease)
        # Attack: the coordinator (or whoever sits between it and the client) names a node of its own among
        # the lease's: the client checks the chain's assignments and seals nothing, to anyone.
        stranger = str(Pubkey.new_unique())
        lying = moved | {"placement": moved["placement"] | {"nodes": [*moved["placement"]["nodes"], stranger]}}
        with pytest.raises(CoordinatorError, match=f"{stranger}, which the chain does not assign it to"):
            await seal_missing_secrets(api, chain, world.client, lease, {"API_TOKEN": SECRET}, lying)
        assert (await job_view(api, world.client, lease))["secrets_sealed_to"] == moved["secrets_sealed_to"]
        # `gpunet lease status --secret` (as --follow does on each poll) reseals to the new node, and to it alone
        wallet = tmp_path / "client.json"
        create_keypair_file(wallet, world.client)
        (tmp_path / "token.txt").write_text(SECRET)
        status = await asyncio.create_subprocess_exec(
            *(GPUNET, "lease", "status", str(lease), "--secret-file", f"API_TOKEN={tmp_path / 'token.txt'}"),
            *("--coordinator", api, "-k", str(wallet), "--url", node.url, "--json"),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        out, _ = await asyncio.wait_for(status.communicate(), 60)
        assert status.returncode == 0, out
        assert json.loads(out.decode().splitlines()[0]) == {"event": "secrets", "sealed_to": [spare]}
        assert await seal_missing_secrets(api, chain, world.client, lease, {"API_TOKEN": SECRET}) == []
        await eventually(lambda: _all_in(api, world, lease, [spare], "running"), what="the job running on the spare")
        await eventually(lambda: _has_tokens(api, world, lease, [spare]), what="the spare's job read the secret")

        # The plaintext is nowhere but in the jobs' environments. Controls: each place searched holds
        # what it should (the hash the jobs printed, the plain env, the ciphertext), so the search reads it.
        database = await _database_text(pool)
        assert DIGEST in database and "visible-env" in database
        async with pool.acquire() as conn:
            assert await conn.fetchval("SELECT count(*) FROM job_secrets") == 3  # the first node twice: replaced
        answers = []
        async with httpx.AsyncClient(base_url=api) as http:
            for route in (
                f"/leases/{lease}",
                "/events",
                "/settlements",
                "/slashes",
                "/workers",
                f"/leases/{lease}/job",
            ):
                public = await http.get(route)
                answers.append(public.text)
                assert "visible-env" not in public.text and "API_TOKEN" not in public.text, route  # nor plain env
            for route in (f"/leases/{lease}/job", f"/leases/{lease}/job?tail=200", f"/leases/{lease}/files"):
                answers.append((await http.get(route, headers=sign_request(world.client, "GET", route))).text)
        assert DIGEST in answers[-2]  # the signed view holds the logs
        workers_text = b"".join(_files_text(tmp_path / f"worker{i}") for i in range(3))
        logs_text = b"".join((tmp_path / f"worker{i}.log").read_bytes() for i in range(3))
        assert (
            tmp_path / "worker1" / "usage.jsonl"
        ).exists()  # the journals are there to search (a finished share leaves its own)
        assert b"job.started" in logs_text and "job.dispatched" in caplog.text  # and the logs
        for where, text in [
            ("the database", database),
            ("the API's answers", "\n".join(answers)),
            ("the coordinator's log", caplog.text),
            ("the workers' state directories", workers_text.decode(errors="replace")),
            ("the workers' logs", logs_text.decode(errors="replace")),
        ]:
            assert SECRET not in text, f"the secret's plaintext is in {where}"


def _key(node_key: str) -> Pubkey:
    return Pubkey.from_string(node_key)


async def _has_tokens(api: str, world: World, lease, nodes: list[str]) -> bool:
    lines = await _token_lines(api, world, lease)
    return all(lines.get(n) == f"token {DIGEST}" for n in nodes)


@pytest.mark.timeout(300)
async def test_lease_job_with_a_secret_waits_for_the_placement_and_seals_to_its_nodes(
    node, chain, pool, database_url, tmp_path, spawned
) -> None:
    world = await World().build(chain, tmp_path)
    settings = _settings(node, database_url)
    api = f"http://127.0.0.1:{settings.api_port}"
    wallet = tmp_path / "client.json"
    create_keypair_file(wallet, world.client)
    async with running(settings, pool, world.admin) as coordinator:
        await start_workers(world, coordinator, tmp_path, spawned)
        lease = lease_pda(world.client.pubkey(), 1)
        terms = ix.LeaseTerms(1, 80, 4, 0, 2 * PRICE, 300)
        opened = ix.open_lease(world.client.pubkey(), world.client_tokens, world.mint, 1, terms)
        await send_and_confirm(chain, world.client, [opened])
        await eventually(lambda: _indexed(api, str(lease)), what="the lease indexed")
        job = await asyncio.create_subprocess_exec(
            *(GPUNET, "lease", "job", str(lease), "--command", f"{sys.executable} -c {shlex.quote(PROGRAM)}"),
            *("--gpus-per-node", "2", "--secret", "API_TOKEN", "--coordinator", api, "-k", str(wallet), "--json"),
            *("--url", node.url),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env={**os.environ, "API_TOKEN": SECRET},  # `--secret NAME` takes the value from the shell
        )
        out, _ = await asyncio.wait_for(job.communicate(), 120)
        assert job.returncode == 0, out
        accepted = json.loads(out)
        placed = (await job_view(api, world.client, lease))["placement"]["nodes"]
        assert accepted["job_number"] == 1 and sorted(accepted["secrets_sealed_to"]) == sorted(placed)
        assert SECRET not in out.decode()
        await eventually(lambda: _all_in(api, world, lease, placed, "running"), what="the job running on both nodes")
        await eventually(lambda: _has_tokens(api, world, lease, placed), what="both jobs read the secret")


async def _indexed(api: str, lease: str) -> bool:
    async with httpx.AsyncClient(base_url=api) as http:
        try:
            return (await http.get(f"/leases/{lease}")).status_code == 200
        except httpx.HTTPError:
            return False
