"""A checkpoint of real size moves on failover, with real processes (gpunet-localnet, embedded
PostgreSQL, the coordinator and its API, `gpunet worker run` processes with --api): the job writes
CHECKPOINT_MIB MiB of random data (256 by default), its node sends it to the coordinator's
checkpoint store as sealed chunks under the lease's key (which the client derives from its wallet
and seals to the node), the node is killed, the share moves to the spare node, whose job waits for
the key until the client's `gpunet lease status` seals it to that node, then restores the
checkpoint (every chunk checked) before the job starts: the job finds every byte (its SHA-256) as
written, and so does the test, file against file. The store holds no plaintext, and neither the
coordinator's database, its disk nor any of its answers holds the key."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import sys
from pathlib import Path

import httpx
import pytest
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from coordinator.db import jobs
from coordinator.settings import Settings
from gpunet import instructions as ix
from gpunet.checkpoint import SignedManifest, lease_key, sign_manifest, signed_headers
from gpunet.client import send_and_confirm
from gpunet.jobs import job_view, lease_files, seal_missing_checkpoint_key
from gpunet.keys import create_keypair_file
from gpunet.pda import lease_pda
from gpunet.protocol import JobSpec, sign_request

from .conftest import eventually
from .world import (
    PRICE,
    World,
    cluster_env,
    live_settings,
    placed_lease,
    placed_view,
    running,
    start_worker,
    start_workers,
    submitted,
)

BIG_JOB = str(Path(__file__).resolve().parents[1] / "worker" / "jobs" / "big_checkpoint.py")
RANKED_JOB = str(Path(__file__).resolve().parents[1] / "worker" / "jobs" / "ranked_checkpoint.py")
MIB = int(os.environ.get("CHECKPOINT_MIB", "256"))


@pytest.fixture
async def chain(node):
    async with AsyncClient(node.url, commitment=Confirmed) as client:
        yield client


async def _line(api: str, client: Keypair, lease: Pubkey, node_key: str, prefix: str) -> str | None:
    after = 0
    while logs := (await job_view(api, client, lease, after))["logs"]:
        for line in logs:
            if line["node_key"] == node_key and (line["line"] or "").startswith(prefix):
                return line["line"]
        after = logs[-1]["id"]
    return None


async def _stored(api: str, client: Keypair, lease: Pubkey, size: int):
    checkpoint = (await job_view(api, client, lease))["checkpoint"]
    return checkpoint if checkpoint and checkpoint["bytes"] >= size else None


@pytest.mark.timeout(600)
async def test_a_big_checkpoint_moves_on_failover_and_the_job_resumes_with_every_byte(
    node, chain, pool, database_url, tmp_path, spawned
) -> None:
    world = await World().build(chain, tmp_path)
    state = tmp_path / "coordinator"
    settings = _settings(node, database_url, state)
    api = f"http://127.0.0.1:{settings.api_port}"
    async with running(settings, pool, world.admin) as coordinator:
        workers = {
            key: start_worker(
                world,
                i,
                coordinator.gateway.url,
                tmp_path / f"worker{i}.log",
                env={"GPUNET_WORKER_API_URL": api},
            )
            for i, key in enumerate(world.node_keys())
        }
        spawned.extend(workers.values())
        await eventually(lambda: _all_connected(coordinator, len(workers)), what="the workers connected")
        lease = lease_pda(world.client.pubkey(), 1)
        await send_and_confirm(
            chain,
            world.client,
            [
                ix.open_lease(
                    world.client.pubkey(),
                    world.client_tokens,
                    world.mint,
                    1,
                    ix.LeaseTerms(1, 80, 2, 0, 2 * PRICE, 600),
                )
            ],
        )
        spec = JobSpec(command=[sys.executable, BIG_JOB], env={"MIB": str(MIB)})
        await eventually(lambda: submitted(api, world.client, lease, spec), what="the job accepted")
        client = world.client
        [first] = (await eventually(lambda: placed_view(api, client, lease), what="the lease placed"))["placement"][
            "nodes"
        ]
        # the client seals the lease's key to the node (`gpunet lease job` does it once placed)
        assert await seal_missing_checkpoint_key(api, chain, client, lease) == [first]
        fresh = await eventually(
            lambda: _line(api, client, lease, first, "fresh "), timeout=120, what="the checkpoint written"
        )
        written = str(fresh).split()[1]
        stored = await eventually(
            lambda: _stored(api, client, lease, MIB << 20), timeout=120, what="the checkpoint in the store"
        )
        assert stored["node_key"] == first and stored["chunks"] >= MIB // 8
        # `lease status` shows it (the coordinator runs in this process: the command runs beside it)
        create_keypair_file(tmp_path / "client.json", world.client)
        shown = await _lease_status(api, node.url, lease, tmp_path / "client.json")
        assert f"checkpoint: {MIB:.1f} MiB in 2 files" in shown, shown
        assert "checkpoint key sealed" not in shown  # the node has it already

        # The node dies; its share moves and the job resumes on the spare from the store's checkpoint.
        i = world.node_keys().index(first)
        workers[first].send_signal(signal.SIGKILL)
        moved = await eventually(
            lambda: _placed_elsewhere(api, client, lease, first), timeout=120, what="the share moved"
        )
        # the new node has no key to open the store's checkpoint: its job waits rather than start over
        detail = await eventually(lambda: _waiting(api, client, lease, moved), timeout=120, what="the job waiting")
        assert "checkpoint key" in detail
        assert await _line(api, client, lease, moved, "fresh ") is None
        # the client's status (as `--follow` does on each poll) seals the key to the new node
        shown = await _lease_status(api, node.url, lease, tmp_path / "client.json")
        assert f"checkpoint key sealed to node(s) {moved}" in shown, shown
        resumed = await eventually(
            lambda: _line(api, client, lease, moved, "resumed "),
            timeout=240,
            what="the job resumed on the new node",
        )
        assert resumed == f"resumed verified {written} {MIB << 20}"
        j = world.node_keys().index(moved)
        lease_dir = f"jobs/{lease}/checkpoints"
        old, new = tmp_path / f"worker{i}" / lease_dir, tmp_path / f"worker{j}" / lease_dir
        for name in ("blob.bin", "blob.sha256"):
            assert _same_file(old / name, new / name), name

        # The store holds ciphertext only: no 64-byte window of the data, taken at 64 places, is in it.
        data = (old / "blob.bin").read_bytes()
        windows = [data[at : at + 64] for at in range(0, len(data) - 64, len(data) // 64)]
        chunks = list((state / "checkpoints").rglob("*"))
        assert sum(p.stat().st_size for p in chunks if p.is_file()) >= len(data)
        for p in chunks:
            if p.is_file():
                content = p.read_bytes()
                assert not any(w in content for w in windows), p
                assert written.encode() not in content or p.suffix == ".json", p  # the digest file sealed too

        # The lease's key is nowhere at the coordinator: not in its database (every table, every
        # row), not on its disk, not in its answers; it holds the key only as sealed to each node.
        key = lease_key(client, str(lease))
        forms = [key, key.hex().encode(), base64.b64encode(key), base64.urlsafe_b64encode(key)]
        async with pool.acquire() as conn:
            tables = [
                r["tablename"] for r in await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
            ]
            rows = [str(r[0]) for t in tables for r in await conn.fetch(f'SELECT row_to_json(t)::text FROM "{t}" t')]
            sealed = await conn.fetch("SELECT node_key FROM checkpoint_keys WHERE lease = $1", str(lease))
        assert sorted(r["node_key"] for r in sealed) == sorted([first, moved])
        assert len(rows) > 40  # the ledger, the jobs, their events, the sealed keys: all read
        assert not any(f.decode("latin-1") in row for row in rows for f in forms)
        for p in state.rglob("*"):
            if p.is_file():
                content = p.read_bytes()
                assert not any(f in content for f in forms), p
        answers = [json.dumps(await job_view(api, client, lease))]
        async with httpx.AsyncClient(base_url=api, timeout=60) as http:
            for path in (f"/leases/{lease}", f"/leases/{lease}/files", f"/leases/{lease}/job", "/workers"):
                answers.append((await http.get(path, headers=sign_request(client, "GET", path))).text)
        assert not any(f.decode("latin-1") in a for a in answers for f in forms)


def _settings(node, database_url: str, state: Path) -> Settings:
    """The coordinator of these tests: its checkpoint store under `state`, a node lost after 3 s."""
    return live_settings(
        node,
        database_url,
        state_dir=state,
        lost_after_seconds=3.0,
        settle_seconds=1,
        settle_interval_seconds=0,  # every receipt as it comes (production: hourly)
        settle_min_amount=0,
        close_grace_seconds=4,
        reconnect_grace_seconds=2,
    )


@pytest.mark.timeout(600)
async def test_a_node_replacing_a_lost_rank_restores_that_rank_s_checkpoint_never_another_s(
    node, chain, pool, database_url, tmp_path, spawned
) -> None:
    """A 2-node lease whose ranks write different checkpoints (ranked_checkpoint.py: each its own
    token; rank 0 keeps checkpointing, so its is the lease's newest): rank 1's node is lost, and the
    spare that takes rank 1 over restores rank 1's files, not rank 0's; rank 0's stay rank 0's. The
    node holding rank 1 cannot store a checkpoint as rank 0 (the ledger says who held which rank);
    its own rank's it can, and so can the spare once it holds rank 1."""
    world = await World().build(chain, tmp_path)
    settings = _settings(node, database_url, tmp_path / "coordinator")
    api = f"http://127.0.0.1:{settings.api_port}"
    async with running(settings, pool, world.admin) as coordinator:
        workers = await start_workers(
            world, coordinator, tmp_path, spawned, lambda i: {**cluster_env(i), "GPUNET_WORKER_API_URL": api}
        )
        client, store = world.client, coordinator.checkpoints
        spec = JobSpec(command=[sys.executable, RANKED_JOB], env={"STEP_SECONDS": "0.3"})
        lease, ranks = await placed_lease(world, api, chain, 600, spec)
        assert sorted(await seal_missing_checkpoint_key(api, chain, client, lease)) == sorted(ranks)
        owners = []
        for node_key in ranks:
            fresh = await eventually(lambda k=node_key: _line(api, client, lease, k, "fresh "), timeout=120, what="ran")
            owners.append(str(fresh).removeprefix("fresh "))
        assert [o.split()[:2] for o in owners] == [["rank", "0"], ["rank", "1"]] and owners[0] != owners[1]

        # The node of rank 1 signs its rank's checkpoint as rank 0's: refused, nothing stored; as its
        # own rank's (the honest control): kept.
        node1 = next(kp for _, kp in world.suppliers if str(kp.pubkey()) == ranks[1])
        ones = await eventually(lambda: _rank_stored(api, client, lease, 1, len(owners[1])), timeout=120, what="1's")
        base = f"/leases/{lease}/checkpoint/manifests"
        async with httpx.AsyncClient(base_url=api, timeout=60) as http:
            path = f"{base}/{ones['seq']}?rank=1"
            got = await http.get(path, headers=signed_headers(node1, "GET", path))
            signed = SignedManifest.model_validate_json(got.content)
            seq = signed.manifest.seq + 1
            for rank, status in ((0, 403), (1, 201)):
                forged = sign_manifest(node1, signed.manifest.model_copy(update={"seq": seq, "rank": rank}))
                body, path = forged.model_dump_json().encode(), f"{base}/{seq}"
                put = await http.put(path, content=body, headers=signed_headers(node1, "PUT", path, body))
                assert put.status_code == status, put.text
                if rank == 0:
                    assert "never held rank 0" in put.json()["error"]
                    kept = [store.manifest(str(lease), s, 0) for s in store.manifest_seqs(str(lease), 0)]
                    assert all(m.manifest.node_key == ranks[0] for m in kept if m is not None)  # none of node1's
        assert store.manifest_seqs(str(lease), 1)[0] == seq
        # rank 0's is the lease's newest when rank 1's node dies
        await eventually(lambda: _rank_0_newer(api, client, lease, seq), timeout=120, what="rank 0's the newest")
        create_keypair_file(tmp_path / "client.json", client)
        shown = await _lease_status(api, node.url, lease, tmp_path / "client.json")
        assert "rank 0's (ranks 0, 1 each have their own)" in shown, shown

        workers[ranks[1]].send_signal(signal.SIGKILL)
        spare = await eventually(lambda: _rank_moved(api, client, lease, ranks), timeout=120, what="rank 1 moved")
        # the client seals the lease's key to the spare (`lease status` does), which then restores
        await eventually(
            lambda: _sealed_to(api, chain, client, lease, spare), timeout=120, what="the key sealed to the spare"
        )
        resumed = await eventually(lambda: _line(api, client, lease, spare, "resumed "), timeout=240, what="resumed")
        assert resumed == f"resumed {owners[1]} as rank 1"
        # the spare holds rank 1 now: its checkpoint (the job wrote `resumed`) is kept as rank 1's
        size = len(owners[1]) + len("as rank 1")
        await eventually(lambda: _rank_stored(api, client, lease, 1, size, spare), timeout=120, what="the spare's")
        # the control: rank 0's stay rank 0's; the client downloads each rank's
        for rank, node_key in ((0, ranks[0]), (1, spare)):
            meta, files = await lease_files(api, client, lease, rank)
            contents = {f.path: f.content().decode() for f in files}
            assert meta["rank"] == rank and meta["node_key"] == node_key and contents["owner"] == owners[rank]
            assert contents.get("resumed") == (None if rank == 0 else "as rank 1")
        out, wallet = tmp_path / "rank1", tmp_path / "client.json"  # `gpunet lease files --rank` too
        await _gpunet("lease", "files", str(lease), "--rank", "1", "--out", out, "--coordinator", api, "-k", wallet)
        assert (out / "owner").read_text() == owners[1]


@pytest.mark.timeout(300)
async def test_through_the_gateway_too_a_node_replacing_a_lost_rank_restores_that_rank_s_checkpoint(
    node, chain, pool, database_url, tmp_path, spawned
) -> None:
    """The same without the checkpoint store: workers that do not reach the coordinator's API send
    their small checkpoints through the gateway, and the ledger keeps the latest of each rank (the
    rank the ledger gives the sending node). Rank 0's is the lease's newest when rank 1's node is
    lost, and the spare that takes rank 1 over restores rank 1's."""
    world = await World().build(chain, tmp_path)
    settings = _settings(node, database_url, tmp_path / "coordinator")
    api = f"http://127.0.0.1:{settings.api_port}"
    async with running(settings, pool, world.admin) as coordinator:
        workers = await start_workers(world, coordinator, tmp_path, spawned, cluster_env)
        client = world.client
        spec = JobSpec(command=[sys.executable, RANKED_JOB], env={"STEP_SECONDS": "0.3"})
        lease, ranks = await placed_lease(world, api, chain, 600, spec)
        owners = []
        for node_key in ranks:
            fresh = await eventually(lambda k=node_key: _line(api, client, lease, k, "fresh "), timeout=120, what="ran")
            owners.append(str(fresh).removeprefix("fresh "))

        async def recorded() -> bool:  # each rank's own, rank 0's the newer
            async with pool.acquire() as conn:
                kept = await jobs.checkpoints_of(conn, str(lease))
                newest = await conn.fetchval("SELECT rank FROM checkpoints WHERE lease = $1 "
                                             "ORDER BY received_at DESC LIMIT 1", str(lease))  # fmt: skip
            found = {rank: {f.path: f.content().decode() for f in files} for rank, files in kept.items()}
            return newest == 0 and [found.get(r, {}).get("owner") for r in (0, 1)] == owners

        await eventually(recorded, timeout=120, what="each rank's checkpoint recorded")
        workers[ranks[1]].send_signal(signal.SIGKILL)
        spare = await eventually(lambda: _rank_moved(api, client, lease, ranks), timeout=120, what="rank 1 moved")
        resumed = await eventually(lambda: _line(api, client, lease, spare, "resumed "), timeout=120, what="resumed")
        assert resumed == f"resumed {owners[1]} as rank 1"


async def _rank_stored(api: str, client: Keypair, lease: Pubkey, rank: int, size: int, node_key: str | None = None):
    """Rank `rank`'s newest stored checkpoint once it holds `size` bytes (by `node_key`, if given)."""
    checkpoint = (await job_view(api, client, lease))["checkpoint"]
    mine = next((r for r in (checkpoint or {}).get("ranks", []) if r["rank"] == rank), None)
    if mine and mine["bytes"] == size and node_key in (None, mine["node_key"]):
        return mine
    return None


async def _rank_0_newer(api: str, client: Keypair, lease: Pubkey, than: int) -> bool:
    checkpoint = (await job_view(api, client, lease))["checkpoint"]
    ranks = {r["rank"]: r for r in (checkpoint or {}).get("ranks", [])}
    return 0 in ranks and 1 in ranks and ranks[0]["seq"] > max(than, ranks[1]["seq"]) and checkpoint["rank"] == 0


async def _rank_moved(api: str, client: Keypair, lease: Pubkey, ranks: list[str]) -> str | None:
    view = await job_view(api, client, lease)
    nodes = view["placement"]["nodes"] if view["placement"] else []
    moved = [k for k in nodes if k not in ranks]
    return moved[0] if len(nodes) == 2 and ranks[0] in nodes and len(moved) == 1 else None


async def _sealed_to(api: str, chain: AsyncClient, client: Keypair, lease: Pubkey, node_key: str) -> bool:
    await seal_missing_checkpoint_key(api, chain, client, lease)
    return node_key in ((await job_view(api, client, lease, tail=1)).get("checkpoint_key_sealed_to") or [])


async def _lease_status(api: str, rpc: str, lease: Pubkey, keypair: Path) -> str:
    return await _gpunet("lease", "status", str(lease), "--coordinator", api, "--url", rpc, "-k", str(keypair))


async def _gpunet(*args: str | Path) -> str:
    proc = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).with_name("gpunet")),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "COLUMNS": "250"},
    )
    return (await asyncio.wait_for(proc.communicate(), 60))[0].decode()


async def _waiting(api: str, client: Keypair, lease: Pubkey, node_key: str) -> str | None:
    view = await job_view(api, client, lease, tail=1)
    state = next((n for n in view["nodes"] if n["node_key"] == node_key), None)
    return state["detail"] if state and state["state"] == "waiting_secrets" else None


async def _all_connected(coordinator, n: int) -> bool:
    return len(coordinator.gateway.sessions) >= n


async def _placed_elsewhere(api: str, client: Keypair, lease: Pubkey, gone: str) -> str | None:
    view = await job_view(api, client, lease)
    nodes = view["placement"]["nodes"] if view["placement"] else []
    return nodes[0] if nodes and gone not in nodes else None


def _same_file(a: Path, b: Path) -> bool:
    if a.stat().st_size != b.stat().st_size:
        return False
    with a.open("rb") as fa, b.open("rb") as fb:
        while True:
            x, y = fa.read(8 << 20), fb.read(8 << 20)
            if x != y:
                return False
            if not x:
                return True
