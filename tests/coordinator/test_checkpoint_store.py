"""Checkpoints of real size through the coordinator's checkpoint store, over real HTTP (uvicorn on a
port, in a thread), on the coordinator's disk and on an S3-compatible object store (moto's server,
a real HTTP server process): sealed chunks, signed manifests, resumable uploads, only changed chunks sent,
tampered chunks refused for the previous checkpoint, no plaintext in the store. The node's
share is checked by a callable here (in the coordinator it is coordinator.db.jobs.holds_share,
exercised in test_checkpoint_failover.py)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn
from solders.keypair import Keypair
from starlette.applications import Starlette

from coordinator.checkpoints import BlobStore, CheckpointStore, DiskBlobs, S3Blobs, checkpoint_routes
from gpunet.checkpoint import chunk_id, lease_key, sign_manifest, signed_headers
from worker.checkpoints import CheckpointStoreClient, StoreError

LEASE = str(Keypair().pubkey())
SEED = str(Keypair().sign_message(b"job 1 of the lease"))
MiB = 1024 * 1024
CHUNK = 1 * MiB  # small chunks keep the files small; the agent uses 8 MiB


class Server:
    def __init__(self, blobs: BlobStore, allowed: set[str]) -> None:
        self.store = CheckpointStore(blobs)
        self.allowed = allowed
        self.puts = 0

        async def authorize(lease: str, node: str) -> bool:
            return lease == LEASE and node in self.allowed

        app = Starlette(routes=checkpoint_routes(self.store, authorize))

        async def counting(scope, receive, send):  # counts the chunk PUTs that reach the server
            if scope["type"] == "http" and scope["method"] == "PUT" and "/chunks/" in scope["path"]:
                self.puts += 1
            await app(scope, receive, send)

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.server = uvicorn.Server(uvicorn.Config(counting, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        while not self.server.started:
            time.sleep(0.01)
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture
def nodes() -> tuple[Keypair, Keypair]:
    return Keypair(), Keypair()


OPEN: list[CheckpointStoreClient] = []


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    """moto's S3-compatible server, a real HTTP server process."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [str(Path(sys.executable).with_name("moto_server")), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(url, timeout=1)
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture(params=["disk", "s3"])
def blobs(request, tmp_path, monkeypatch) -> BlobStore:
    if request.param == "disk":
        return DiskBlobs(tmp_path / "store")
    endpoint = request.getfixturevalue("s3_endpoint")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    bucket = f"ckpt-{os.urandom(6).hex()}"
    s3 = S3Blobs(bucket, endpoint_url=endpoint, prefix="gpunet")
    s3.s3.create_bucket(Bucket=bucket)
    return s3


@pytest.fixture
def server(blobs, nodes) -> Iterator[Server]:
    s = Server(blobs, {str(n.pubkey()) for n in nodes})
    yield s
    while OPEN:
        OPEN.pop().close()
    s.stop()


def client(server: Server, node: Keypair) -> CheckpointStoreClient:
    c = CheckpointStoreClient(server.url, node, LEASE, lease_key(LEASE, SEED), chunk_bytes=CHUNK)
    OPEN.append(c)
    return c


def write_checkpoint(directory: Path, size: int, seed: int = 0) -> dict[str, bytes]:
    directory.mkdir(parents=True, exist_ok=True)
    files = {"model.bin": os.urandom(size), "opt/state.bin": os.urandom(size // 4 + 123), "step": b"41\n"}
    for name, data in files.items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_bytes(data)
    return files


def read_dir(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in directory.rglob("*") if p.is_file()}


def store_bytes(blobs: BlobStore) -> list[bytes]:
    return [blobs.get(k) or b"" for k in blobs.list("leases")]


def test_a_checkpoint_moves_to_another_node_every_byte_checked_and_the_store_holds_no_plaintext(
    tmp_path, server, nodes
):
    old, new = nodes
    files = write_checkpoint(tmp_path / "a", 24 * MiB)
    sent = client(server, old).upload(tmp_path / "a")
    assert sent.chunks == sent.sent_chunks == 24 + 7 + 1
    got = client(server, new).restore(tmp_path / "b")
    assert got.refused == [] and got.seq == sent.seq
    assert read_dir(tmp_path / "b") == files
    # the store: ciphertext only (no 64-byte window of any file, taken at several places, is in it)
    blobs = store_bytes(server.store.blobs)
    assert sum(map(len, blobs)) > 30 * MiB
    for data in files.values():
        for at in range(0, len(data) - 64, max(1, len(data) // 16)):
            assert not any(data[at : at + 64] in b for b in blobs)
    assert not any(b"41\n" == b for b in blobs)


def test_after_the_first_checkpoint_only_the_changed_chunks_are_sent(tmp_path, server, nodes):
    write_checkpoint(tmp_path / "a", 16 * MiB)
    first = client(server, nodes[0]).upload(tmp_path / "a")
    with (tmp_path / "a" / "model.bin").open("r+b") as f:
        f.seek(5 * MiB + 17)
        f.write(b"changed")
    second = client(server, nodes[0]).upload(tmp_path / "a", seq=first.seq + 1)
    assert second.sent_chunks == 1 and second.chunks == first.chunks
    assert client(server, nodes[1]).restore(tmp_path / "b").seq == second.seq
    assert read_dir(tmp_path / "b") == read_dir(tmp_path / "a")


def test_an_upload_cut_off_halfway_resumes_without_sending_finished_chunks_again(tmp_path, server, nodes):
    write_checkpoint(tmp_path / "a", 16 * MiB)
    cut = client(server, nodes[0])
    real = cut._request
    chunk_puts = 0

    def failing(method: str, path: str, body: bytes = b"") -> httpx.Response:
        nonlocal chunk_puts
        if method == "PUT" and "/chunks/" in path:
            chunk_puts += 1
            if chunk_puts > 10:  # the connection drops (or the agent dies) after 10 chunks
                raise StoreError("connection lost")
        return real(method, path, body)

    cut._request = failing  # type: ignore[method-assign]
    with pytest.raises(StoreError):
        cut.upload(tmp_path / "a")
    assert server.puts == 10
    assert client(server, nodes[1]).restore(tmp_path / "none").seq == 0  # no manifest: nothing complete yet
    # a fresh client (the agent restarted): the same chunk ids, only the 12 the store lacks are sent
    again = client(server, nodes[0]).upload(tmp_path / "a")
    assert again.chunks == 22 and again.sent_chunks == 12 and server.puts == 22
    assert read_dir(tmp_path / "b") == {} and client(server, nodes[1]).restore(tmp_path / "b").seq == again.seq
    assert read_dir(tmp_path / "b") == read_dir(tmp_path / "a")


def test_a_chunk_tampered_in_the_store_is_refused_and_the_previous_checkpoint_is_used(tmp_path, server, nodes):
    first_files = write_checkpoint(tmp_path / "a", 4 * MiB)
    first = client(server, nodes[0]).upload(tmp_path / "a")
    (tmp_path / "a" / "model.bin").write_bytes(os.urandom(4 * MiB))
    second = client(server, nodes[0]).upload(tmp_path / "a", seq=first.seq + 1)
    # honest control: untouched, the newest one is restored
    assert client(server, nodes[1]).restore(tmp_path / "control").seq == second.seq
    assert read_dir(tmp_path / "control") == read_dir(tmp_path / "a")
    # a chunk only the second checkpoint has is changed on the store's disk
    manifest = server.store.manifest(LEASE, second.seq)
    assert manifest is not None
    only_second = set(manifest.manifest.chunk_ids()) - set(server.store.manifest(LEASE, first.seq).manifest.chunk_ids())  # type: ignore[union-attr]
    victim = f"leases/{LEASE}/chunks/{sorted(only_second)[0]}"
    data = bytearray(server.store.blobs.get(victim) or b"")
    data[100] ^= 1
    server.store.blobs.put(victim, bytes(data))
    got = client(server, nodes[1]).restore(tmp_path / "b")
    assert got.seq == first.seq and len(got.refused) == 1 and "its bytes are not its id" in got.refused[0]
    assert read_dir(tmp_path / "b") == first_files


def test_a_chunk_replaced_with_a_consistent_id_still_does_not_open(tmp_path, server, nodes):
    """The store can also rename a forged chunk to its own hash: the manifest names the old id, so
    the forged one is never asked for; one with the right id but other bytes cannot exist. What is
    left is a forged manifest: its signature is checked."""
    write_checkpoint(tmp_path / "a", 2 * MiB)
    first = client(server, nodes[0]).upload(tmp_path / "a")
    signed = server.store.manifest(LEASE, first.seq)
    assert signed is not None
    stranger = Keypair()
    forged = signed.manifest.model_copy(update={"seq": first.seq + 5, "files": signed.manifest.files[:1]})
    # signed by a key that is not the manifest's node
    bad = sign_manifest(stranger, forged)
    server.store.blobs.put(f"leases/{LEASE}/manifests/{forged.seq:020d}.json", bad.model_dump_json().encode())
    got = client(server, nodes[1]).restore(tmp_path / "b")
    assert got.seq == first.seq and "signature" in got.refused[0]


def test_only_nodes_of_the_lease_with_their_own_signature_reach_the_store(tmp_path, server, nodes):
    path = f"/leases/{LEASE}/checkpoint/manifests"
    # honest control: a node of the lease, signing
    ok = httpx.get(server.url + path, headers=signed_headers(nodes[0], "GET", path))
    assert ok.status_code == 200 and ok.json() == {"seqs": []}
    stranger = Keypair()
    assert httpx.get(server.url + path, headers=signed_headers(stranger, "GET", path)).status_code == 403
    forged = signed_headers(stranger, "GET", path) | {"X-Gpunet-Node": str(nodes[0].pubkey())}
    assert httpx.get(server.url + path, headers=forged).status_code == 401
    assert httpx.get(server.url + path).status_code == 401
    # a manifest may only be sent by the node that signed it
    write_checkpoint(tmp_path / "a", 1 * MiB)
    first = client(server, nodes[0]).upload(tmp_path / "a")
    signed = server.store.manifest(LEASE, first.seq)
    assert signed is not None
    put = f"/leases/{LEASE}/checkpoint/manifests/{first.seq + 1}"
    other = sign_manifest(nodes[0], signed.manifest.model_copy(update={"seq": first.seq + 1})).model_dump_json()
    r = httpx.put(server.url + put, content=other, headers=signed_headers(nodes[1], "PUT", put, other.encode()))
    assert r.status_code == 403


async def test_a_lease_s_checkpoints_are_deleted_once_it_ended_and_the_retention_period_passed(pool, tmp_path):
    """The coordinator's sweep (coordinator.db.jobs.checkpoints_past_retention over the ledger): an
    ended lease past the period loses its checkpoints; one ended within it, and a running one, keep theirs."""
    from coordinator.db import jobs

    store = CheckpointStore(DiskBlobs(tmp_path / "store"))
    now = int(time.time())
    leases = {name: str(Keypair().pubkey()) for name in ("old", "recent", "running")}
    async with pool.acquire() as conn:
        for i, (name, lease) in enumerate(leases.items()):
            await conn.execute(
                """INSERT INTO leases (lease, client, lease_id, gpu_model, min_vram_gb, gpu_count, region,
                     max_price_per_gpu_hour, duration_seconds, status, started_at, deposited, paid, fees,
                     refunded, nodes, signature)
                   VALUES ($1, $2, $3, 1, 80, 2, 0, 1, 3600, $4, $5, 0, 0, 0, 0, '{}', 'sig')""",
                lease,
                str(Keypair().pubkey()),
                i,
                "active" if name == "running" else "closed",
                {"old": now - 3600 - 2 * 86_400, "recent": now - 3600 - 60, "running": now - 3600 * 2}[name],
            )
    for lease in leases.values():
        store.put_chunk(lease, chunk_id(b"x" + lease.encode()), b"x" + lease.encode())

    async def ended(candidates: list[str]) -> list[str]:
        async with pool.acquire() as conn:
            return await jobs.checkpoints_past_retention(conn, candidates, now - 86_400)

    assert await store.sweep(ended) == 1
    assert sorted(store.leases()) == sorted([leases["recent"], leases["running"]])
