"""The checkpoint store: each lease's sealed chunks and signed manifests (gpunet.checkpoint), on a
blob store that sees ciphertext and plaintext metadata only (file paths, sizes, chunk ids).

Layout, under the blob store's root (the coordinator's `state_dir/checkpoints` by default):

    leases/<lease>/chunks/<sha256 of the sealed chunk>
    leases/<lease>/manifests/<seq, 20 digits>.json          rank 0's, each a SignedManifest, written
    leases/<lease>/manifests/<seq, 20 digits>.rank<r>.json  rank r's (r > 0), once all its chunks are in

A lease's checkpoints are per rank (gpunet.checkpoint): each rank of a multi-node lease has its
own manifests, and its KEEP_MANIFESTS newest are kept; the chunks are the lease's, shared by all its
ranks (equal chunks of two ranks are stored once). Rank 0's keep the layout from before ranks, so
a stored older checkpoint is rank 0's. A manifest is accepted only when every chunk it names is
in the store, so a rank's newest manifest is always a complete checkpoint; a chunk is accepted only
when its bytes hash to its id. A lease's chunks may take at most `quota_bytes`; the chunks no kept
manifest of any rank names any more (older checkpoints') are deleted when a newer manifest comes,
once they are `orphan_grace_seconds` old (a chunk of an upload under way is named by no manifest
yet). Everything of a lease goes once the lease has ended and `retention_seconds` have passed.

The HTTP routes (`checkpoint_routes`) are for the lease's nodes only: each request is signed by
the node key (gpunet.checkpoint.signed_headers) and the node must hold a share of the lease now.
A manifest of rank r is kept, and served, only when signed by a node that holds or held rank r of
the lease (a node of another rank is refused: it may not plant another rank's state). The
coordinator never holds the lease's key (the client seals it to the nodes): it serves the client's
`GET /leases/{key}/files` a rank's newest manifest and its sealed chunks, which the client opens."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
import secrets
import shutil
import tempfile
import threading
import time
from base64 import b64encode
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Protocol

from pydantic import ValidationError
from solders.pubkey import Pubkey
from solders.signature import Signature
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from gpunet.checkpoint import (
    AT_HEADER,
    NODE_HEADER,
    SIGNATURE_HEADER,
    Manifest,
    SignedManifest,
    request_message,
)
from gpunet.limits import MAX_LEASE_NODES
from gpunet.logs import get_logger

__all__ = [
    "BlobStore",
    "CheckpointStore",
    "DiskBlobs",
    "OverQuota",
    "S3Blobs",
    "TooLargeToServe",
    "blob_store",
    "checkpoint_routes",
    "latest_sealed",
]

log = get_logger("gpunet.coordinator.checkpoints")

CLOCK_SKEW_SECONDS = 120
MAX_CHUNK_BODY = 64 * 1024 * 1024
CHUNK_ID = re.compile(r"[0-9a-f]{64}")
MAX_MANIFEST_BODY = 16 * 1024 * 1024
KEEP_MANIFESTS = 3  # per rank of a lease: the newest ones (a refused one falls back to the one before)
MANIFEST_NAME = re.compile(r"(\d{1,20})(?:\.rank([1-9]\d{0,4}))?\.json")  # <seq>.json (rank 0), <seq>.rank<r>.json
DEFAULT_QUOTA_BYTES = 64 * 2**30  # per lease, its stored chunks
ORPHAN_GRACE = 600.0  # seconds a chunk no manifest names is kept: an upload under way names it later


STREAM_BYTES = 1024 * 1024  # a chunk moves between a request and the store in parts of this size


class BlobStore(Protocol):
    """Where the bytes live: the coordinator's disk (DiskBlobs) or an S3-compatible object store.
    Chunks go in from a file (`put_file`, written under `staging` as the request streams in) and out
    as parts (`reader`), so no request holds a whole chunk in memory."""

    staging: Path

    def has(self, key: str) -> bool: ...
    def put(self, key: str, data: bytes) -> None: ...
    def put_file(self, key: str, path: Path) -> None: ...
    def get(self, key: str) -> bytes | None: ...
    def reader(self, key: str) -> Iterator[bytes] | None: ...
    def list(self, prefix: str) -> list[str]: ...
    def sizes(self, prefix: str) -> dict[str, int]: ...
    def delete(self, key: str) -> None: ...
    def delete_prefix(self, prefix: str) -> None: ...


class DiskBlobs:
    """Blobs as files under `root`; each written to a temporary file, fsynced and renamed in."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.staging = root / ".incoming"  # same file system: a finished chunk is renamed in
        self.staging.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        if ".." in key.split("/") or key.startswith("/"):
            raise ValueError(f"bad blob key {key!r}")
        return self.root / key

    def has(self, key: str) -> bool:
        return self._path(key).is_file()

    def put(self, key: str, data: bytes) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{id(data)}.tmp")
        with tmp.open("wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    def put_file(self, key: str, path: Path) -> None:
        """Moves `path` (under `staging`, fsynced by the caller) in as the blob `key`."""
        target = self._path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(path, target)

    def get(self, key: str) -> bytes | None:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            return None

    def reader(self, key: str) -> Iterator[bytes] | None:
        try:
            f = self._path(key).open("rb")
        except FileNotFoundError:
            return None

        def parts() -> Iterator[bytes]:
            with f:
                while part := f.read(STREAM_BYTES):
                    yield part

        return parts()

    def list(self, prefix: str) -> list[str]:
        base = self._path(prefix)
        if not base.is_dir():
            return []
        return sorted(
            str(p.relative_to(self.root)) for p in base.rglob("*") if p.is_file() and not p.name.startswith(".")
        )

    def sizes(self, prefix: str) -> dict[str, int]:
        out = {}
        for key in self.list(prefix):
            with contextlib.suppress(FileNotFoundError):
                out[key] = self._path(key).stat().st_size
        return out

    def delete(self, key: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._path(key).unlink()

    def delete_prefix(self, prefix: str) -> None:
        shutil.rmtree(self._path(prefix), ignore_errors=True)


class S3Blobs:
    """Blobs as objects of an S3-compatible bucket (AWS S3, MinIO, Ceph RGW, ...), under `prefix`.
    Credentials the usual boto3 way (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, a profile, a role).
    A PUT is atomic in S3: a reader sees the whole object or none."""

    def __init__(
        self, bucket: str, *, endpoint_url: str | None = None, prefix: str = "", region: str | None = None
    ) -> None:
        import boto3  # only when configured

        self.bucket, self.prefix = bucket, prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.s3 = boto3.client("s3", endpoint_url=endpoint_url, region_name=region or "us-east-1")
        self.staging = Path(tempfile.gettempdir()) / "gpunet-checkpoint-incoming"
        self.staging.mkdir(parents=True, exist_ok=True)

    def has(self, key: str) -> bool:
        try:
            self.s3.head_object(Bucket=self.bucket, Key=self.prefix + key)
        except self.s3.exceptions.ClientError as e:
            if e.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return False
            raise
        return True

    def put(self, key: str, data: bytes) -> None:
        self.s3.put_object(Bucket=self.bucket, Key=self.prefix + key, Body=data)

    def put_file(self, key: str, path: Path) -> None:
        from boto3.s3.transfer import TransferConfig

        # one PUT read from the file as it goes (a chunk is at most MAX_CHUNK_BODY), no part buffers
        whole = TransferConfig(multipart_threshold=MAX_CHUNK_BODY + 1, use_threads=False)
        try:
            self.s3.upload_file(str(path), self.bucket, self.prefix + key, Config=whole)
        finally:
            path.unlink(missing_ok=True)

    def get(self, key: str) -> bytes | None:
        try:
            return bytes(self.s3.get_object(Bucket=self.bucket, Key=self.prefix + key)["Body"].read())
        except self.s3.exceptions.NoSuchKey:
            return None

    def reader(self, key: str) -> Iterator[bytes] | None:
        try:
            body = self.s3.get_object(Bucket=self.bucket, Key=self.prefix + key)["Body"]
        except self.s3.exceptions.NoSuchKey:
            return None

        def parts() -> Iterator[bytes]:
            with contextlib.closing(body):
                yield from body.iter_chunks(STREAM_BYTES)

        return parts()

    def list(self, prefix: str) -> list[str]:
        return sorted(self.sizes(prefix))

    def sizes(self, prefix: str) -> dict[str, int]:
        out: dict[str, int] = {}
        for page in self.s3.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=self.prefix + prefix.rstrip("/") + "/"
        ):
            out |= {str(o["Key"])[len(self.prefix) :]: int(o["Size"]) for o in page.get("Contents", [])}
        return out

    def delete(self, key: str) -> None:
        self.s3.delete_object(Bucket=self.bucket, Key=self.prefix + key)

    def delete_prefix(self, prefix: str) -> None:
        keys = self.list(prefix)
        for at in range(0, len(keys), 1000):
            self.s3.delete_objects(
                Bucket=self.bucket,
                Delete={"Objects": [{"Key": self.prefix + k} for k in keys[at : at + 1000]], "Quiet": True},
            )


def blob_store(
    directory: Path, s3_bucket: str | None, s3_endpoint: str | None = None, s3_prefix: str = ""
) -> BlobStore:
    """The configured store: an S3-compatible bucket if one is named, else `directory` on this disk."""
    if s3_bucket:
        return S3Blobs(s3_bucket, endpoint_url=s3_endpoint, prefix=s3_prefix)
    return DiskBlobs(directory)


class OverQuota(ValueError):
    """A chunk that would take the lease's stored chunks over its quota."""


class CheckpointStore:
    def __init__(
        self, blobs: BlobStore, *, quota_bytes: int = DEFAULT_QUOTA_BYTES, orphan_grace_seconds: float = ORPHAN_GRACE
    ) -> None:
        self.blobs, self.quota_bytes, self.orphan_grace_seconds = blobs, quota_bytes, orphan_grace_seconds
        self._lock = threading.Lock()  # the routes call in from threads
        self._used: dict[str, int] = {}  # lease -> bytes of its stored chunks (read from the store once)
        self._put_at: dict[tuple[str, str], float] = {}  # (lease, chunk) -> when this process stored it

    def used(self, lease: str) -> int:
        """Bytes of the lease's stored chunks."""
        with self._lock:
            if lease not in self._used:
                self._used[lease] = sum(self.blobs.sizes(f"leases/{lease}/chunks").values())
            return self._used[lease]

    def _admit(self, lease: str, cid: str, size: int) -> None:
        """Counts a new chunk against the lease's quota (OverQuota, nothing counted, if over)."""
        used = self.used(lease)
        with self._lock:
            if used + size > self.quota_bytes:
                raise OverQuota(
                    f"lease {lease}'s checkpoints take {used} bytes of its {self.quota_bytes}: this chunk "
                    f"({size} bytes) does not fit (older checkpoints' chunks go as newer ones come)"
                )
            self._used[lease] = used + size
            self._put_at[(lease, cid)] = time.monotonic()

    @staticmethod
    def _chunk(lease: str, cid: str) -> str:
        return f"leases/{lease}/chunks/{cid}"

    @staticmethod
    def _manifest(lease: str, seq: int, rank: int = 0) -> str:
        return f"leases/{lease}/manifests/{seq:020d}" + (f".rank{rank}" if rank else "") + ".json"

    def missing(self, lease: str, ids: list[str]) -> list[str]:
        return [c for c in dict.fromkeys(ids) if not self.blobs.has(self._chunk(lease, c))]

    def put_chunk(self, lease: str, cid: str, data: bytes) -> bool:
        """Keeps a sealed chunk; False (nothing kept) when its bytes are not its id; OverQuota."""
        if hashlib.sha256(data).hexdigest() != cid:
            return False
        if not self.blobs.has(self._chunk(lease, cid)):
            self._admit(lease, cid, len(data))
            self.blobs.put(self._chunk(lease, cid), data)
        return True

    def put_chunk_file(self, lease: str, cid: str, path: Path) -> None:
        """Keeps a sealed chunk streamed to `path` (under the blobs' `staging`, its id checked by the
        caller); OverQuota (the file is left to the caller)."""
        if self.blobs.has(self._chunk(lease, cid)):
            path.unlink(missing_ok=True)
        else:
            self._admit(lease, cid, path.stat().st_size)
            self.blobs.put_file(self._chunk(lease, cid), path)

    def chunk(self, lease: str, cid: str) -> bytes | None:
        return self.blobs.get(self._chunk(lease, cid))

    def chunk_reader(self, lease: str, cid: str) -> Iterator[bytes] | None:
        return self.blobs.reader(self._chunk(lease, cid))

    def put_manifest(self, lease: str, signed: SignedManifest, signers: set[str]) -> str | None:
        """Keeps a node's signed manifest once all its chunks are in, when `signers` (the nodes that
        hold or held the manifest's rank of the lease) has its signer; the reason when refused."""
        try:
            manifest = signed.verified(signers)
        except ValueError as e:
            return str(e)
        if manifest.lease != lease:
            return f"the manifest is of lease {manifest.lease}, not {lease}"
        lacking = self.missing(lease, manifest.chunk_ids())
        if lacking:
            return f"{len(lacking)} of its chunks are not in the store yet"
        self.blobs.put(self._manifest(lease, manifest.seq, manifest.rank), signed.model_dump_json().encode())
        old = self.manifest_seqs(lease, manifest.rank)[KEEP_MANIFESTS:]
        for seq in old:
            self.blobs.delete(self._manifest(lease, seq, manifest.rank))
        if old:
            self._collect(lease)
        return None

    def _collect(self, lease: str) -> None:
        """Deletes the lease's chunks that no kept manifest of any rank names, once
        `orphan_grace_seconds` old (by this process's clock; one stored before it started counts as old)."""
        named: set[str] = set()
        for rank, seqs in self._manifests(lease).items():
            for seq in seqs:
                signed = self.manifest(lease, seq, rank)
                if signed is None:
                    return  # changed meanwhile: the next manifest collects
                named.update(signed.manifest.chunk_ids())
        now, freed = time.monotonic(), 0
        for key, size in self.blobs.sizes(f"leases/{lease}/chunks").items():
            cid = key.rsplit("/", 1)[-1]
            put_at = self._put_at.get((lease, cid))
            if cid in named or (put_at is not None and now - put_at < self.orphan_grace_seconds):
                continue
            self.blobs.delete(key)
            freed += size
            self._put_at.pop((lease, cid), None)
        with self._lock:
            if lease in self._used:
                self._used[lease] = max(0, self._used[lease] - freed)
        if freed:
            log.debug("checkpoint.collected", lease=lease, bytes=freed)  # chunks of older checkpoints: each upload

    def _manifests(self, lease: str) -> dict[int, list[int]]:
        """The lease's manifests: rank -> sequence numbers, newest first."""
        out: dict[int, list[int]] = {}
        for key in self.blobs.list(f"leases/{lease}/manifests"):
            found = MANIFEST_NAME.fullmatch(key.rsplit("/", 1)[-1])
            if found:
                out.setdefault(int(found[2] or 0), []).append(int(found[1]))
        return {rank: sorted(seqs, reverse=True) for rank, seqs in sorted(out.items())}

    def manifest_seqs(self, lease: str, rank: int = 0) -> list[int]:
        """The manifests of the lease's rank `rank`, newest first."""
        return self._manifests(lease).get(rank, [])

    def ranks(self, lease: str) -> list[int]:
        """The lease's ranks that have a checkpoint, in order."""
        return list(self._manifests(lease))

    def manifest(self, lease: str, seq: int, rank: int = 0) -> SignedManifest | None:
        raw = self.blobs.get(self._manifest(lease, seq, rank))
        return None if raw is None else SignedManifest.model_validate_json(raw)

    def summary(self, lease: str) -> dict[str, object] | None:
        """The newest checkpoint for the job view (its rank, sequence, node, files, bytes and chunks,
        how many its rank keeps), and each rank's newest (`ranks`: a multi-node lease's nodes
        checkpoint one each)."""
        newest: list[tuple[Manifest, int]] = []  # each rank's newest, with how many that rank keeps
        for rank, seqs in self._manifests(lease).items():
            signed = self.manifest(lease, seqs[0], rank)
            if signed is not None:
                newest.append((signed.manifest, len(seqs)))
        if not newest:
            return None

        def shown(m: Manifest) -> dict[str, object]:
            return {
                "rank": m.rank,
                "seq": m.seq,
                "taken_at": m.seq / 1000,
                "node_key": m.node_key,
                "files": len(m.files),
                "bytes": m.size,
                "chunks": len(m.chunk_ids()),
            }

        latest, kept = max(newest, key=lambda n: n[0].seq)
        return {
            **shown(latest),
            "chunks_stored": len(self.blobs.list(f"leases/{lease}/chunks")),
            "checkpoints_kept": kept,
            "ranks": [shown(m) for m, _ in newest],
        }

    def delete_lease(self, lease: str) -> None:
        self.blobs.delete_prefix(f"leases/{lease}")
        with self._lock:
            self._used.pop(lease, None)
            for key in [k for k in self._put_at if k[0] == lease]:
                del self._put_at[key]

    def leases(self) -> list[str]:
        return sorted({k.split("/")[1] for k in self.blobs.list("leases")})

    def sweep(self, ended_before: Callable[[list[str]], Awaitable[list[str]]]) -> Awaitable[int]:
        """Deletes the checkpoints of every lease `ended_before` names (ended past the grace period)."""

        async def run() -> int:
            gone = await ended_before(self.leases())
            for lease in gone:
                await asyncio.to_thread(self.delete_lease, lease)
                log.info("checkpoint.deleted", lease=lease)  # ended past the retention period
            return len(gone)

        return run()


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


Authorize = Callable[[str, str], Awaitable[bool]]  # (lease, node key) -> does the node hold a share now
Signers = Callable[[str, int], Awaitable[list[str]]]  # (lease, rank) -> the node keys that hold or held that rank


def _decimal(raw: str, digits: int) -> bool:
    """Whether `raw` is 1 to `digits` ASCII digits (str.isdigit also takes "²", which int() refuses)."""
    return 0 < len(raw) <= digits and raw.isascii() and raw.isdigit()


def _rank(request: Request) -> int | Response:
    """The `rank` query parameter (default 0): whose checkpoints of a multi-node lease are meant."""
    raw = request.query_params.get("rank", "0")
    if not _decimal(raw, 5) or int(raw) >= MAX_LEASE_NODES:
        return _error(400, f"rank: {raw[:20]!r} is not a rank of a lease (0 to {MAX_LEASE_NODES - 1})")
    return int(raw)


def checkpoint_routes(store: CheckpointStore, authorize: Authorize, signers: Signers) -> list[Route]:
    """PUT/GET chunks, POST the ids a node is about to send (answer: those missing), PUT a signed
    manifest (of the sender's rank), GET a rank's manifests (newest first; `?rank=`, default 0) and
    one of them."""

    async def _authorized(request: Request, body: bytes | str) -> tuple[str, str] | Response:
        """(lease, node key) when a node of the lease signed the request; `body`: the body, or its
        SHA-256 (hex) when it is checked against it later (a streamed chunk)."""
        body_sha256 = body if isinstance(body, str) else hashlib.sha256(body).hexdigest()
        lease = request.path_params["key"]
        try:
            Pubkey.from_string(lease)
        except ValueError:
            return _error(400, f"not a lease address: {lease[:60]!r}")
        node, at, sig = (request.headers.get(h) for h in (NODE_HEADER, AT_HEADER, SIGNATURE_HEADER))
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")  # signed with its query
        if node is None or at is None or sig is None:
            return _error(401, f"sign the request with the node key: {NODE_HEADER}, {AT_HEADER}, {SIGNATURE_HEADER}")
        try:
            at_ms = int(at, 10)
            ok = Signature.from_string(sig).verify(
                Pubkey.from_string(node),
                request_message(request.method, target, at_ms, body_sha256),
            )
        except ValueError:
            ok = False
        if not ok:
            return _error(401, "the signature is not the node's over this request")
        if abs(time.time() - at_ms / 1000) > CLOCK_SKEW_SECONDS:
            return _error(401, f"a stale request: sign it within {CLOCK_SKEW_SECONDS} s of the coordinator's clock")
        if not await authorize(lease, node):
            return _error(403, f"node {node} holds no share of lease {lease}")
        return lease, node

    async def _body(request: Request, limit: int) -> bytes | Response:
        length = request.headers.get("content-length")
        if length is not None and _decimal(length, 20) and int(length) > limit:
            return _error(413, f"at most {limit} bytes")
        chunks, size = [], 0
        async for part in request.stream():
            size += len(part)
            if size > limit:
                return _error(413, f"at most {limit} bytes")
            chunks.append(part)
        return b"".join(chunks)

    async def put_chunk(request: Request) -> Response:
        """The body is streamed to a staging file (bounded memory), hashed on the way: a chunk's id is
        its SHA-256, which is also the body hash the node signed, so the signature is checked before
        a byte is read and the bytes against the id after."""
        cid = request.path_params["id"]
        if not CHUNK_ID.fullmatch(cid):
            return _error(400, "a chunk's id is the 64-hex SHA-256 of its sealed bytes")
        who = await _authorized(request, cid)
        if isinstance(who, Response):
            return who
        length = request.headers.get("content-length")
        if length is not None and _decimal(length, 20) and int(length) > MAX_CHUNK_BODY:
            return _error(413, f"at most {MAX_CHUNK_BODY} bytes")
        staged = store.blobs.staging / f"{cid}.{os.getpid()}.{secrets.token_hex(8)}"
        digest, size = hashlib.sha256(), 0
        try:
            with staged.open("wb") as f:
                async for part in request.stream():
                    size += len(part)
                    if size > MAX_CHUNK_BODY:
                        return _error(413, f"at most {MAX_CHUNK_BODY} bytes")
                    digest.update(part)
                    f.write(part)  # into the page cache: microseconds a part
                f.flush()
                await asyncio.to_thread(os.fsync, f.fileno())
            if digest.hexdigest() != cid:
                return _error(400, "the chunk's bytes are not its id (SHA-256)")
            try:
                await asyncio.to_thread(store.put_chunk_file, who[0], cid, staged)
            except OverQuota as e:
                return _error(413, str(e))
        finally:
            staged.unlink(missing_ok=True)
        return JSONResponse({"id": cid, "stored": True}, status_code=201)

    async def get_chunk(request: Request) -> Response:
        if not CHUNK_ID.fullmatch(request.path_params["id"]):  # never a path: ".", ".." and the like
            return _error(400, "a chunk's id is the 64-hex SHA-256 of its sealed bytes")
        who = await _authorized(request, b"")
        if isinstance(who, Response):
            return who
        parts = await asyncio.to_thread(store.chunk_reader, who[0], request.path_params["id"])
        if parts is None:
            return _error(404, "no such chunk")
        return StreamingResponse(parts, media_type="application/octet-stream")  # read in a thread, part by part

    async def missing(request: Request) -> Response:
        body = await _body(request, MAX_MANIFEST_BODY)
        if isinstance(body, Response):
            return body
        who = await _authorized(request, body)
        if isinstance(who, Response):
            return who
        try:
            ids = SignedManifest.model_validate_json(body).manifest.chunk_ids()
        except ValidationError as e:
            return _error(400, f"not a signed manifest: {e.errors()[0]['msg']}")
        return JSONResponse({"missing": await asyncio.to_thread(store.missing, who[0], ids)})

    async def put_manifest(request: Request) -> Response:
        body = await _body(request, MAX_MANIFEST_BODY)
        if isinstance(body, Response):
            return body
        who = await _authorized(request, body)
        if isinstance(who, Response):
            return who
        try:
            signed = SignedManifest.model_validate_json(body)
        except ValidationError as e:
            return _error(400, f"not a signed manifest: {e.errors()[0]['msg']}")
        if signed.manifest.node_key != who[1]:
            return _error(403, "a node sends only the manifests it signed")
        rank = signed.manifest.rank
        holders = set(await signers(who[0], rank))
        if who[1] not in holders:
            return _error(
                403,
                f"node {who[1]} never held rank {rank} of lease {who[0]}: a node stores its own rank's checkpoints",
            )
        refused = await asyncio.to_thread(store.put_manifest, who[0], signed, holders)
        if refused is not None:
            return _error(409, refused)
        # debug: a job checkpointing every few seconds stores hundreds (the worker sums them up at info)
        log.debug(
            "checkpoint.stored",
            lease=who[0],
            node=who[1],
            rank=rank,
            seq=signed.manifest.seq,
            bytes=signed.manifest.size,
            chunks=len(signed.manifest.chunk_ids()),
        )
        return JSONResponse({"seq": signed.manifest.seq, "stored": True}, status_code=201)

    async def manifests(request: Request) -> Response:
        who = await _authorized(request, b"")
        if isinstance(who, Response):
            return who
        rank = _rank(request)
        if isinstance(rank, Response):
            return rank
        return JSONResponse({"seqs": await asyncio.to_thread(store.manifest_seqs, who[0], rank)})

    async def manifest(request: Request) -> Response:
        who = await _authorized(request, b"")
        if isinstance(who, Response):
            return who
        rank = _rank(request)
        if isinstance(rank, Response):
            return rank
        raw = request.path_params["seq"]
        signed = await asyncio.to_thread(store.manifest, who[0], int(raw), rank) if _decimal(raw, 20) else None
        if signed is None:
            return _error(404, "no such checkpoint")
        if signed.manifest.rank != rank:
            return _error(409, f"checkpoint {raw} of rank {rank} says it is rank {signed.manifest.rank}'s")
        if signed.manifest.node_key not in await signers(who[0], rank):
            return _error(
                409, f"checkpoint {raw} is signed by {signed.manifest.node_key}, never the lease's node of rank {rank}"
            )
        return Response(signed.model_dump_json(), media_type="application/json")

    base = "/leases/{key}/checkpoint"
    return [
        Route(base + "/chunks/{id:str}", put_chunk, methods=["PUT"]),
        Route(base + "/chunks/{id:str}", get_chunk, methods=["GET"]),
        Route(base + "/missing", missing, methods=["POST"]),
        Route(base + "/manifests", manifests, methods=["GET"]),
        Route(base + "/manifests/{seq:str}", put_manifest, methods=["PUT"]),
        Route(base + "/manifests/{seq:str}", manifest, methods=["GET"]),
    ]


FILES_ROUTE_LIMIT = 64 * 1024 * 1024


class TooLargeToServe(ValueError):
    """A stored checkpoint over what one JSON answer of `GET /leases/{key}/files` carries."""


def latest_sealed(
    store: CheckpointStore, lease: str, signers: set[str], rank: int = 0
) -> tuple[SignedManifest, dict[str, str]] | None:
    """The newest stored checkpoint of the lease's rank `rank` signed by a node that holds or held
    that rank (`signers`), of that rank, with all its chunks in the store (each checked against its id),
    as (its signed manifest, chunk id -> base64 sealed chunk) for the client's `GET /leases/{key}/files`:
    the client opens them with its key, the coordinator cannot. None if there is none;
    TooLargeToServe over 64 MiB."""
    for seq in store.manifest_seqs(lease, rank):
        signed = store.manifest(lease, seq, rank)
        if signed is None:
            continue
        try:
            manifest = signed.verified(signers)
            if manifest.rank != rank:
                raise ValueError(f"checkpoint {seq} of rank {rank} says it is rank {manifest.rank}'s")
        except ValueError as e:
            log.warning("checkpoint.refused", lease=lease, seq=seq, reason=str(e))
            continue
        if manifest.size > FILES_ROUTE_LIMIT:
            raise TooLargeToServe(
                f"the latest checkpoint is {manifest.size} bytes, over the {FILES_ROUTE_LIMIT} one answer carries"
            )
        chunks: dict[str, str] = {}
        for cid in manifest.chunk_ids():
            sealed = store.chunk(lease, cid)
            if sealed is None or hashlib.sha256(sealed).hexdigest() != cid:  # the id checks without the key
                break
            chunks[cid] = b64encode(sealed).decode()
        else:
            return signed, chunks
        log.warning("checkpoint.refused", lease=lease, seq=seq, reason="a chunk is missing or not its id")
    return None
