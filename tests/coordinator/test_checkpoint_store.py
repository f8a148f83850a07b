"""Checkpoints of real size through the coordinator's checkpoint store, over real HTTP (uvicorn on a
port, in a thread), on the coordinator's disk and on an S3-compatible object store (moto's server,
a real HTTP server process): sealed chunks, signed manifests, resumable uploads, only changed chunks sent,
tampered chunks refused for the previous checkpoint, no plaintext in the store, no manifest of
a key that never was a node of the lease (or of the manifest's rank), no checkpoint opened without
the lease's key, each rank's checkpoints kept and restored apart. The node's share, and the nodes
of each rank, are callables here (in the coordinator coordinator.db.jobs.holds_share and
rank_holders, exercised in test_checkpoint_failover.py)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
import tracemalloc
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn
from solders.keypair import Keypair
from starlette.applications import Starlette

from coordinator.checkpoints import BlobStore, CheckpointStore, DiskBlobs, S3Blobs, checkpoint_routes
from gpunet.checkpoint import (
    AT_HEADER,
    NODE_HEADER,
    SIGNATURE_HEADER,
    chunk_id,
    lease_key,
    open_key,
    request_message,
    seal_key,
    sign_manifest,
    signed_headers,
)
from gpunet.secrets import SecretError
from worker.checkpoints import CheckpointStoreClient, StoreError

LEASE = str(Keypair().pubkey())
CLIENT = Keypair()  # the lease's client: the key is derived from its wallet
MiB = 1024 * 1024
CHUNK = 1 * MiB  # small chunks keep the files small; the agent uses 8 MiB


class Server:
    def __init__(self, blobs: BlobStore, allowed: set[str], **store: float) -> None:
        self.store = CheckpointStore(blobs, **store)  # type: ignore[arg-type]
        self.allowed = allowed  # the nodes holding a share now
        self.signers = set(allowed)  # the nodes that hold or held rank 0 (a single-node lease's one share)
        self.ranks = {0: self.signers}  # rank -> the nodes that hold or held it
        self.puts = 0

        async def authorize(lease: str, node: str) -> bool:
            return lease == LEASE and node in self.allowed

        async def signers(lease: str, rank: int) -> list[str]:
            return sorted(self.ranks.get(rank, set())) if lease == LEASE else []

        app = Starlette(routes=checkpoint_routes(self.store, authorize, signers))

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


def client(server: Server, node: Keypair, key: bytes | None = None, rank: int = 0) -> CheckpointStoreClient:
    key = lease_key(CLIENT, LEASE) if key is None else key
    signers = server.ranks.get(rank, set())
    c = CheckpointStoreClient(server.url, node, LEASE, key, signers=signers, rank=rank, chunk_bytes=CHUNK)
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


def test_an_unchanged_file_is_not_sealed_again_to_learn_its_ids(tmp_path, server, nodes):
    """The agent keeps the ids of the files it sealed (by path, size and mtime) between uploads: an
    unchanged file costs a stat, a changed one is sealed again, and the store gets the same checkpoint."""
    write_checkpoint(tmp_path / "a", 8 * MiB)
    known: dict = {}

    def node_client() -> CheckpointStoreClient:
        c = CheckpointStoreClient(
            server.url,
            nodes[0],
            LEASE,
            lease_key(CLIENT, LEASE),
            signers=server.signers,
            known=known,
            chunk_bytes=CHUNK,
        )
        OPEN.append(c)
        return c

    first = node_client().upload(tmp_path / "a")
    again = node_client().upload(tmp_path / "a", seq=first.seq + 1)
    assert again.seconds_seal == 0 and again.sent_chunks == 0 and again.chunks == first.chunks
    (tmp_path / "a" / "step").write_bytes(b"42\n")  # a new mtime and content
    third = node_client().upload(tmp_path / "a", seq=first.seq + 2)
    assert third.sent_chunks == 1
    assert client(server, nodes[1]).restore(tmp_path / "b").seq == third.seq
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


def test_malformed_chunk_ids_ranks_and_sequence_numbers_are_refused_with_a_4xx(server, nodes):
    """Each signed by a node of the lease, so it passes the signature check and reaches the route's
    own parsing: a 4xx that says what is wrong, never a 500 (and never a path into the store)."""
    base = f"/leases/{LEASE}/checkpoint"

    def get(path: str, encoded: str | None = None) -> httpx.Response:
        # the node signs the path as the server decodes it; sent percent-encoded so that no client
        # folds "." and ".." away before the server sees them
        return httpx.get(server.url + (encoded or path), headers=signed_headers(nodes[0], "GET", path))

    for cid, encoded in ((".", "%2E"), ("..", "%2E%2E"), ("\u00b2", "%C2%B2")):
        r = get(f"{base}/chunks/{cid}", f"{base}/chunks/{encoded}")
        assert r.status_code == 400 and "64-hex SHA-256" in r.json()["error"], (cid, r.status_code, r.text)
    r = get(f"{base}/manifests?rank=%C2%B2")  # a query is signed as sent
    assert r.status_code == 400 and "is not a rank" in r.json()["error"], r.text
    for seq, encoded in (("\u00b2", "%C2%B2"), ("9" * 5000, "9" * 5000)):
        r = get(f"{base}/manifests/{seq}", f"{base}/manifests/{encoded}")
        assert r.status_code == 404 and r.json() == {"error": "no such checkpoint"}, r.text
    # the controls: a well-formed id of no chunk, and the first rank's manifests
    assert get(f"{base}/chunks/{chunk_id(b'none')}").status_code == 404
    assert get(f"{base}/manifests?rank=0").json() == {"seqs": []}


def test_a_manifest_signed_by_a_key_that_never_was_a_node_of_the_lease_is_not_restored(tmp_path, server, nodes):
    """A rogue node key plants a manifest in the store (straight into the blob store, as the routes
    refuse it: see the next test) naming the lease's own chunks, newer than the honest one: the
    restoring node takes the honest one, and the store's route does not serve the rogue one."""
    files = write_checkpoint(tmp_path / "a", 2 * MiB)
    first = client(server, nodes[0]).upload(tmp_path / "a")
    signed = server.store.manifest(LEASE, first.seq)
    assert signed is not None
    rogue = Keypair()
    planted = sign_manifest(
        rogue,
        signed.manifest.model_copy(update={"seq": first.seq + 5, "node_key": str(rogue.pubkey())}),
    )
    server.store.blobs.put(
        f"leases/{LEASE}/manifests/{planted.manifest.seq:020d}.json", planted.model_dump_json().encode()
    )
    path = f"/leases/{LEASE}/checkpoint/manifests/{planted.manifest.seq}"
    served = httpx.get(server.url + path, headers=signed_headers(nodes[1], "GET", path))
    assert served.status_code == 409 and "never the lease's node of rank 0" in served.json()["error"]
    got = client(server, nodes[1]).restore(tmp_path / "b")
    assert got.seq == first.seq and "never the lease's node of rank 0" in got.refused[0]
    assert read_dir(tmp_path / "b") == files
    # honest control: once that key is a node of the lease (it took a share over), its manifest is the newest
    server.signers.add(str(rogue.pubkey()))
    assert client(server, nodes[1]).restore(tmp_path / "c").seq == planted.manifest.seq


def test_the_store_accepts_a_manifest_only_from_a_node_of_that_lease(tmp_path, server, nodes):
    write_checkpoint(tmp_path / "a", 1 * MiB)
    first = client(server, nodes[0]).upload(tmp_path / "a")
    signed = server.store.manifest(LEASE, first.seq)
    assert signed is not None
    put = f"/leases/{LEASE}/checkpoint/manifests/{first.seq + 1}"
    # a node of another lease, signing its own manifest for this one: not a node of this lease
    rogue = Keypair()
    forged = sign_manifest(
        rogue, signed.manifest.model_copy(update={"seq": first.seq + 1, "node_key": str(rogue.pubkey())})
    )
    body = forged.model_dump_json().encode()
    assert httpx.put(server.url + put, content=body, headers=signed_headers(rogue, "PUT", put, body)).status_code == 403
    # the store itself refuses it too, whatever the route let through
    assert "never the lease's node of rank 0" in (server.store.put_manifest(LEASE, forged, server.signers) or "")
    assert server.store.manifest_seqs(LEASE) == [first.seq]
    # honest control: the same manifest signed by a node of the lease is kept
    honest = sign_manifest(
        nodes[1], signed.manifest.model_copy(update={"seq": first.seq + 1, "node_key": str(nodes[1].pubkey())})
    )
    body = honest.model_dump_json().encode()
    assert (
        httpx.put(server.url + put, content=body, headers=signed_headers(nodes[1], "PUT", put, body)).status_code == 201
    )


def two_ranks(server: Server, nodes: tuple[Keypair, Keypair]) -> None:
    """A two-node lease: nodes[0] holds rank 0, nodes[1] rank 1."""
    server.signers.clear()
    server.signers.add(str(nodes[0].pubkey()))
    server.ranks[1] = {str(nodes[1].pubkey())}


def test_each_rank_restores_its_own_checkpoint_never_another_rank_s(tmp_path, server, nodes):
    """Rank 0's node checkpoints after rank 1's (its is the lease's newest): a node taking rank 1
    over restores rank 1's files, one taking rank 0 over rank 0's; a manifest of rank 0 put where rank
    1's are (straight into the blob store) is refused by the route and by the restoring node."""
    two_ranks(server, nodes)
    ones = write_checkpoint(tmp_path / "r1", 1 * MiB)
    one = client(server, nodes[1], rank=1).upload(tmp_path / "r1", seq=5000)
    zeros = write_checkpoint(tmp_path / "r0", 1 * MiB)
    zero = client(server, nodes[0]).upload(tmp_path / "r0", seq=6000)
    assert server.store.manifest_seqs(LEASE, 0) == [zero.seq] and server.store.manifest_seqs(LEASE, 1) == [one.seq]
    replacement = Keypair()  # the node a failover moves rank 1 to: it holds rank 1 now
    server.allowed.add(str(replacement.pubkey()))
    server.ranks[1].add(str(replacement.pubkey()))
    got = client(server, replacement, rank=1).restore(tmp_path / "b")
    assert got.seq == one.seq and got.refused == [] and read_dir(tmp_path / "b") == ones
    # control: rank 0's stay rank 0's
    assert client(server, nodes[1]).restore(tmp_path / "c").seq == zero.seq and read_dir(tmp_path / "c") == zeros
    # rank 0's newer manifest where rank 1's are: never served, never restored as rank 1's
    signed = server.store.manifest(LEASE, zero.seq)
    assert signed is not None
    server.store.blobs.put(f"leases/{LEASE}/manifests/{7000:020d}.rank1.json", signed.model_dump_json().encode())
    assert server.store.manifest_seqs(LEASE, 1) == [7000, one.seq]
    path = f"/leases/{LEASE}/checkpoint/manifests/7000?rank=1"  # the query is signed too
    served = httpx.get(server.url + path, headers=signed_headers(replacement, "GET", path))
    assert served.status_code == 409 and "says it is rank 0's" in served.json()["error"]
    got = client(server, replacement, rank=1).restore(tmp_path / "d")
    assert got.seq == one.seq and read_dir(tmp_path / "d") == ones and "says it is rank 0's" in got.refused[0]


def test_a_node_stores_only_checkpoints_of_the_rank_it_holds_or_held(tmp_path, server, nodes):
    """The node holding rank 1 signs a manifest claiming rank 0 (to plant its state in rank 0's
    replacement): refused, nothing stored; its own rank's is kept (the honest control)."""
    two_ranks(server, nodes)
    write_checkpoint(tmp_path / "a", 1 * MiB)
    honest = client(server, nodes[1], rank=1).upload(tmp_path / "a", seq=4000)
    signed = server.store.manifest(LEASE, honest.seq, 1)
    assert signed is not None and signed.manifest.rank == 1
    forged = sign_manifest(nodes[1], signed.manifest.model_copy(update={"seq": 4001, "rank": 0}))
    body = forged.model_dump_json().encode()
    put = f"/leases/{LEASE}/checkpoint/manifests/4001"
    r = httpx.put(server.url + put, content=body, headers=signed_headers(nodes[1], "PUT", put, body))
    assert r.status_code == 403 and "never held rank 0" in r.json()["error"]
    assert "never the lease's node of rank 0" in (server.store.put_manifest(LEASE, forged, server.signers) or "")
    assert server.store.manifest_seqs(LEASE, 0) == [] and server.store.manifest_seqs(LEASE, 1) == [honest.seq]
    # a rank's number is part of what the node signed: changed after signing, the signature fails
    moved = forged.model_copy(update={"manifest": forged.manifest.model_copy(update={"rank": 1})})
    assert "signature" in (server.store.put_manifest(LEASE, moved, server.ranks[1]) or "")
    # honest control: the same node's rank-1 manifest is kept
    again = sign_manifest(nodes[1], signed.manifest.model_copy(update={"seq": 4002}))
    body = again.model_dump_json().encode()
    put = f"/leases/{LEASE}/checkpoint/manifests/4002"
    r = httpx.put(server.url + put, content=body, headers=signed_headers(nodes[1], "PUT", put, body))
    assert r.status_code == 201, r.text
    assert server.store.manifest_seqs(LEASE, 1) == [4002, honest.seq]


def test_a_manifest_from_before_ranks_restores_as_rank_0_s(tmp_path, server, nodes):
    """A manifest stored by a node from before the field (no `rank`, signed over the manifest
    without it) is rank 0's: a rank-0 node restores it, a rank-1 node does not."""
    files = write_checkpoint(tmp_path / "a", 1 * MiB)
    first = client(server, nodes[0]).upload(tmp_path / "a", seq=8000)
    signed = server.store.manifest(LEASE, first.seq)
    assert signed is not None
    old = signed.manifest.model_dump(mode="json")
    assert "rank" not in old and b'"rank"' not in signed.model_dump_json().encode()  # written as before, too
    message = b"gpunet-checkpoint-manifest-v1\n" + json.dumps(old, sort_keys=True).encode()
    assert signed.manifest.message() == message  # rank 0's signs as before the field existed
    raw = json.dumps({"manifest": old, "signature": str(nodes[0].sign_message(message))}).encode()
    server.store.blobs.put(f"leases/{LEASE}/manifests/{first.seq:020d}.json", raw)  # as an older node stored it
    got = client(server, nodes[1]).restore(tmp_path / "b")
    assert got.seq == first.seq and got.refused == [] and read_dir(tmp_path / "b") == files
    server.ranks[1] = {str(nodes[1].pubkey())}
    assert client(server, nodes[1], rank=1).restore(tmp_path / "c").seq == 0 and read_dir(tmp_path / "c") == {}


def test_a_node_never_sent_the_lease_s_key_cannot_open_its_checkpoints(tmp_path, server, nodes):
    """The key reaches a node only sealed to it: another node cannot open the sealed key, and with
    any other key (e.g. another client's for this lease) every checkpoint is refused."""
    key = lease_key(CLIENT, LEASE)
    sealed = seal_key(nodes[0].pubkey(), key)
    assert open_key(nodes[0], sealed) == key  # control: the node it was sealed to
    with pytest.raises(SecretError):
        open_key(nodes[1], sealed)
    write_checkpoint(tmp_path / "a", 2 * MiB)
    first = client(server, nodes[0]).upload(tmp_path / "a")
    got = client(server, nodes[1], key=lease_key(Keypair(), LEASE)).restore(tmp_path / "b")
    assert got.seq == 0 and "does not open under the lease's key" in got.refused[0] and read_dir(tmp_path / "b") == {}
    assert client(server, nodes[1]).restore(tmp_path / "c").seq == first.seq  # control: with the key


def test_chunks_stream_through_the_store_in_bounded_memory(tmp_path, server, nodes):
    """A 48 MiB chunk goes in and comes out through the routes with the server holding a few MiB at
    most (the whole Python process is traced: the client streams too); a body that is not its id,
    or over the limit, is refused and leaves nothing behind."""
    node = nodes[0]
    sealed = os.urandom(48 * MiB)
    cid = chunk_id(sealed)
    path = f"/leases/{LEASE}/checkpoint/chunks/{cid}"

    def parts(data: bytes) -> Iterator[bytes]:
        for at in range(0, len(data), MiB):
            yield data[at : at + MiB]

    with httpx.Client(base_url=server.url, timeout=60) as http:
        tracemalloc.start()
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        put = http.put(path, content=parts(sealed), headers=signed_headers(node, "PUT", path, sealed))
        assert put.status_code == 201, put.text
        with http.stream("GET", path, headers=signed_headers(node, "GET", path)) as got:
            digest = hashlib.sha256()
            for part in got.iter_bytes():
                digest.update(part)
        peak = tracemalloc.get_traced_memory()[1] - before
        tracemalloc.stop()
        assert digest.hexdigest() == cid
        assert peak < 16 * MiB, f"{peak / MiB:.1f} MiB held for a 48 MiB chunk"
        # a body that is not its id: refused, nothing kept
        other = os.urandom(MiB)
        bad_path = f"/leases/{LEASE}/checkpoint/chunks/{chunk_id(b'something else')}"
        r = http.put(bad_path, content=other, headers=signed_headers(node, "PUT", bad_path, b"something else"))
        assert r.status_code == 400 and "not its id" in r.json()["error"]
        # signed over other bytes than its id: refused before the body is read
        r = http.put(path, content=other, headers=signed_headers(node, "PUT", path, other))
        assert r.status_code == 401
    # over the limit, streamed without a length (in process: the refusal comes before the body's end)
    huge = f"/leases/{LEASE}/checkpoint/chunks/{'a' * 64}"

    async def over_the_limit() -> httpx.Response:
        app = Starlette(routes=checkpoint_routes(server.store, allow_all, node_signers))
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://store") as store:
            at = int(time.time() * 1000)
            headers = {
                NODE_HEADER: str(node.pubkey()),
                AT_HEADER: str(at),
                SIGNATURE_HEADER: str(node.sign_message(request_message("PUT", huge, at, "a" * 64))),
            }

            async def body() -> AsyncIterator[bytes]:
                for _ in range(65):
                    yield bytes(MiB)

            return await store.put(huge, content=body(), headers=headers)

    async def allow_all(lease: str, node_key: str) -> bool:
        return True

    async def node_signers(lease: str, rank: int) -> list[str]:
        return [str(node.pubkey())]

    assert asyncio.run(over_the_limit()).status_code == 413
    lacking = [chunk_id(b"something else"), "a" * 64]
    assert server.store.missing(LEASE, [cid, *lacking]) == lacking
    staging = server.store.blobs.staging
    assert not any(staging.iterdir()), list(staging.iterdir())


def test_older_checkpoints_chunks_go_as_newer_ones_come_and_a_lease_keeps_to_its_quota(tmp_path, blobs, nodes):
    """Five checkpoints of 3 MiB each under a 13 MiB quota: the store keeps the newest three
    manifests and deletes the chunks only older ones named (without that, the fifth would not fit);
    a checkpoint over what is left is refused, and the newest complete one is still restored."""
    server = Server(blobs, {str(n.pubkey()) for n in nodes}, quota_bytes=13 * MiB, orphan_grace_seconds=0)
    try:
        up = CheckpointStoreClient(
            server.url, nodes[0], LEASE, lease_key(CLIENT, LEASE), signers=server.signers, chunk_bytes=CHUNK
        )
        uploads = []
        for i in range(5):
            (tmp_path / "a").mkdir(exist_ok=True)
            (tmp_path / "a" / "model.bin").write_bytes(os.urandom(3 * MiB))
            uploads.append(up.upload(tmp_path / "a", seq=1000 + i))
        kept = [server.store.manifest(LEASE, u.seq) for u in uploads[2:]]
        named = {c for m in kept if m is not None for c in m.manifest.chunk_ids()}
        stored = {k.rsplit("/", 1)[-1] for k in server.store.blobs.list(f"leases/{LEASE}/chunks")}
        assert server.store.manifest_seqs(LEASE) == [1004, 1003, 1002] and stored == named
        assert server.store.used(LEASE) == sum(server.store.blobs.sizes(f"leases/{LEASE}/chunks").values())
        assert 9 * MiB < server.store.used(LEASE) < 9 * MiB + 4096
        # over the quota: 9 MiB kept, 5 MiB more does not fit
        (tmp_path / "a" / "model.bin").write_bytes(os.urandom(5 * MiB))
        with pytest.raises(StoreError, match="does not fit"):
            up.upload(tmp_path / "a", seq=2000)
        assert server.store.used(LEASE) <= 13 * MiB
        assert client(server, nodes[1]).restore(tmp_path / "b").seq == 1004
        up.close()
    finally:
        while OPEN:
            OPEN.pop().close()
        server.stop()


def test_each_rank_keeps_its_newest_checkpoints_and_chunks_go_only_when_no_rank_names_them(tmp_path, blobs, nodes):
    """Rank 1 checkpoints once, rank 0 four times (grace 0 s): rank 0 keeps its newest three, rank 1
    its one (the lease's newest three are all rank 0's), and the chunks rank 1's names stay when rank
    0's collection drops its oldest's; then rank 1 four times more: it keeps its newest three."""
    server = Server(blobs, {str(n.pubkey()) for n in nodes}, orphan_grace_seconds=0)
    two_ranks(server, nodes)
    try:
        ones = write_checkpoint(tmp_path / "r1", 1 * MiB)
        one = client(server, nodes[1], rank=1).upload(tmp_path / "r1", seq=100)
        zero_chunks = []
        for i in range(4):
            write_checkpoint(tmp_path / f"r0-{i}", 1 * MiB)
            up = client(server, nodes[0]).upload(tmp_path / f"r0-{i}", seq=200 + i)
            zero_chunks.append(server.store.manifest(LEASE, up.seq).manifest.chunk_ids())  # type: ignore[union-attr]
        assert server.store.manifest_seqs(LEASE, 0) == [203, 202, 201]
        assert server.store.manifest_seqs(LEASE, 1) == [one.seq] and server.store.ranks(LEASE) == [0, 1]
        ones_chunks = server.store.manifest(LEASE, one.seq, 1).manifest.chunk_ids()  # type: ignore[union-attr]
        stored = {k.rsplit("/", 1)[-1] for k in server.store.blobs.list(f"leases/{LEASE}/chunks")}
        assert stored == {c for ids in [ones_chunks, *zero_chunks[1:]] for c in ids}  # rank 0's oldest's went
        assert client(server, nodes[1], rank=1).restore(tmp_path / "b").seq == one.seq
        assert read_dir(tmp_path / "b") == ones
        for i in range(4):
            write_checkpoint(tmp_path / f"r1-{i}", 1 * MiB)
            client(server, nodes[1], rank=1).upload(tmp_path / f"r1-{i}", seq=300 + i)
        assert server.store.manifest_seqs(LEASE, 1) == [303, 302, 301]
        assert server.store.manifest_seqs(LEASE, 0) == [203, 202, 201]
        kept = [
            server.store.manifest(LEASE, seq, rank)
            for rank in (0, 1)
            for seq in server.store.manifest_seqs(LEASE, rank)
        ]
        stored = {k.rsplit("/", 1)[-1] for k in server.store.blobs.list(f"leases/{LEASE}/chunks")}
        assert stored == {c for m in kept if m is not None for c in m.manifest.chunk_ids()}  # rank 1's oldest's went
        assert set(ones_chunks) - stored  # (its own chunks, not the ones every checkpoint shares)
        summary = server.store.summary(LEASE)
        assert summary is not None and summary["rank"] == 1 and summary["seq"] == 303
        assert [(r["rank"], r["seq"]) for r in summary["ranks"]] == [(0, 203), (1, 303)]  # type: ignore[attr-defined]
    finally:
        while OPEN:
            OPEN.pop().close()
        server.stop()


def test_a_chunk_of_an_upload_under_way_is_not_collected(tmp_path, blobs, nodes):
    """A chunk no manifest names yet (its upload has not sent its manifest) survives a collection
    within the grace period; past it (here 0 s), the same chunk goes."""
    for grace, survives in ((600.0, True), (0.0, False)):
        server = Server(blobs, {str(n.pubkey()) for n in nodes}, orphan_grace_seconds=grace)
        try:
            pending = os.urandom(1000)
            assert server.store.put_chunk(LEASE, chunk_id(pending), pending)
            for i in range(4):  # the fourth manifest makes the store drop the first, and collect
                write_checkpoint(tmp_path / f"c{grace}-{i}", 1 * MiB)
                client(server, nodes[0]).upload(tmp_path / f"c{grace}-{i}", seq=3000 + i)
            assert server.store.missing(LEASE, [chunk_id(pending)]) == ([] if survives else [chunk_id(pending)])
        finally:
            while OPEN:
                OPEN.pop().close()
            server.stop()
            server.store.delete_lease(LEASE)


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


def test_each_stored_checkpoint_is_logged_at_debug_not_info(tmp_path, nodes, caplog):
    # A small job checkpointing often stored 302 checkpoints, each an info line (and each collection
    # of the older ones' chunks another): the operator's log was those lines. They are debug lines.
    caplog.set_level(logging.DEBUG)
    server = Server(DiskBlobs(tmp_path / "store"), {str(n.pubkey()) for n in nodes}, orphan_grace_seconds=0)
    try:
        up = client(server, nodes[0])
        for i in range(5):
            (tmp_path / "a").mkdir(exist_ok=True)
            (tmp_path / "a" / "step").write_bytes(os.urandom(4096))
            up.upload(tmp_path / "a", seq=100 + i)
    finally:
        while OPEN:
            OPEN.pop().close()
        server.stop()
    ours = [(r.levelno, r.msg["event"]) for r in caplog.records if isinstance(r.msg, dict)]
    assert ours.count((logging.DEBUG, "checkpoint.stored")) == 5  # the control: each is still there
    assert (logging.DEBUG, "checkpoint.collected") in ours
    assert [e for level, e in ours if level >= logging.INFO and e.startswith("checkpoint.")] == []
