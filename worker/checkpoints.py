"""Moving a job's checkpoint directory between nodes: the agent sends it to the coordinator when
it changes, and a job dispatched with `restore` starts from it on a new node."""

from __future__ import annotations

import os
import shutil
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import httpx
from solders.keypair import Keypair

from gpunet.checkpoint import (
    CHUNK_BYTES,
    ChunkRefused,
    FileEntry,
    Manifest,
    SignedManifest,
    chunk_id,
    file_chunks,
    open_chunk,
    seal_chunk,
    sign_manifest,
    signed_headers,
)
from gpunet.json_input import parse_json
from gpunet.protocol import MAX_CHECKPOINT_BYTES, CheckpointFile

__all__ = [
    "CheckpointStoreClient",
    "CheckpointTooLarge",
    "RestoreStats",
    "StoreError",
    "UploadStats",
    "fingerprint",
    "restore",
    "snapshot",
]


class CheckpointTooLarge(ValueError):
    """The checkpoint is over what one message carries; it stays on this node only."""


def _files(directory: Path) -> list[Path]:
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.rglob("*") if p.is_file() and not p.is_symlink())


def open_job_file(directory: Path, path: Path) -> BinaryIO:
    """A file of the job's under `directory`, opened for the agent to read, following no link: not
    its own name, nor any directory on its way (the job runs meanwhile, as another uid than a root
    agent's, and may swap either for a link to anywhere on the machine between a listing and the
    read); a regular file only (a FIFO would block the agent). FileNotFoundError when it is not one
    (the callers skip it, as a file gone since the listing)."""
    *parents, name = path.relative_to(directory).parts
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        for part in parents:
            inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = inner
        file = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
    except OSError as e:
        raise FileNotFoundError(f"{path}: {e.strerror or e}") from None
    finally:
        os.close(fd)
    if not stat.S_ISREG(os.fstat(file).st_mode):
        os.close(file)
        raise FileNotFoundError(f"{path}: not a regular file")
    return os.fdopen(file, "rb")


def fingerprint(directory: Path) -> tuple[tuple[str, int, int], ...]:
    """Cheap change detection: (path, size, mtime) of every file."""
    out = []
    for p in _files(directory):
        try:
            st = p.stat()
        except FileNotFoundError:  # replaced while we looked (an atomic rename): seen next time
            continue
        out.append((str(p.relative_to(directory)), st.st_size, st.st_mtime_ns))
    return tuple(out)


def snapshot(directory: Path) -> list[CheckpointFile]:
    """Every file of the directory as CheckpointFiles; CheckpointTooLarge over the message limit."""
    files, total = [], 0
    for p in _files(directory):
        try:
            with open_job_file(directory, p) as f:
                data = f.read(MAX_CHECKPOINT_BYTES - total + 1)  # no more than the limit (and a byte) in memory
        except FileNotFoundError:
            continue
        total += len(data)
        if total > MAX_CHECKPOINT_BYTES:
            raise CheckpointTooLarge(f"checkpoint of {directory} is over {MAX_CHECKPOINT_BYTES} bytes")
        files.append(CheckpointFile.of(str(p.relative_to(directory)), data))
    return files


def restore(directory: Path, files: list[CheckpointFile]) -> int:
    """Writes `files` into an empty checkpoint directory (a non-empty one is this node's own, newer
    state and is kept). Returns how many files were written; ValueError on a corrupt file."""
    if not files or _files(directory):
        return 0
    contents = [(f.path, f.content()) for f in files]  # all checked before anything is written
    for path, data in contents:
        target = directory / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return len(contents)


# --- checkpoints of real size: sealed chunks and a signed manifest in the coordinator's store


class StoreError(RuntimeError):
    """The checkpoint store refused a request or could not be reached (the upload is retried)."""


@dataclass
class UploadStats:
    files: int = 0
    bytes: int = 0
    chunks: int = 0
    sent_chunks: int = 0
    sent_bytes: int = 0
    seconds_seal: float = 0.0  # encryption (AES-GCM and the nonce's HMAC)
    seconds_hash: float = 0.0  # chunk ids (SHA-256)
    seconds_transfer: float = 0.0  # HTTP
    seq: int = 0


@dataclass
class RestoreStats:
    seq: int = 0
    files: int = 0
    bytes: int = 0
    refused: list[str] = field(default_factory=list)  # manifests skipped, with why
    seconds: float = 0.0  # the whole restore
    seconds_open: float = 0.0  # GCM open (decryption and tag)
    seconds_hash: float = 0.0
    seconds_transfer: float = 0.0


class CheckpointStoreClient:
    """A node's side of the coordinator's checkpoint store (coordinator.checkpoints), for one lease.
    Blocking (httpx): the agent runs it in a thread."""

    def __init__(
        self,
        api_url: str,
        node: Keypair,
        lease: str,
        key: bytes,
        *,
        signers: set[str],
        rank: int = 0,
        known: dict[tuple[str, int, int], list[str]] | None = None,
        timeout: float = 120.0,
        chunk_bytes: int = CHUNK_BYTES,
    ) -> None:
        self.api_url, self.node, self.lease, self.key, self.chunk_bytes = (
            api_url.rstrip("/"),
            node,
            lease,
            key,
            chunk_bytes,
        )
        # this node's rank of the lease: it checkpoints that rank's state and restores that rank's only
        self.rank = rank
        self.signers = signers  # the nodes that hold or held that rank: a restore takes their manifests only
        # (path, size, mtime) -> chunk ids, kept by the caller between uploads: an unchanged file is
        # not sealed again just to learn its ids (a changed one has another mtime)
        self.known = {} if known is None else known
        self.http = httpx.Client(timeout=timeout)
        self.base = f"/leases/{lease}/checkpoint"

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> CheckpointStoreClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    @property
    def _of_rank(self) -> str:
        """The query naming this node's rank (none for rank 0: as a store from before ranks is asked)."""
        return f"?rank={self.rank}" if self.rank else ""

    def _request(self, method: str, path: str, body: bytes = b"") -> httpx.Response:
        headers = signed_headers(self.node, method, path, body)
        try:
            r = self.http.request(method, self.api_url + path, content=body or None, headers=headers)
        except httpx.HTTPError as e:
            raise StoreError(f"{method} {path}: {e}") from e
        if r.status_code >= 400 and r.status_code != 404:
            raise StoreError(f"{method} {path}: {r.status_code} {r.text[:200]}")
        return r

    def _seal_directory(self, directory: Path, stats: UploadStats) -> list[FileEntry]:
        """The files as entries of sealed chunk ids. The sealed bytes are not kept in memory:
        `self._where` says where each chunk is (file, index), to seal it again when it is sent."""
        entries: list[FileEntry] = []
        self._where: dict[str, tuple[Path, int]] = {}
        for p in _files(directory):
            rel = str(p.relative_to(directory))
            try:
                st = p.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            seen = (rel, st.st_size, st.st_mtime_ns)
            if seen in self.known:  # sealed before, unchanged since (a send checks each chunk's id again)
                for i, cid in enumerate(self.known[seen]):
                    self._where.setdefault(cid, (p, i))
                entries.append(FileEntry(path=rel, size=st.st_size, chunks=self.known[seen]))
                continue
            ids: list[str] = []
            try:
                with open_job_file(directory, p) as f:
                    size = self._seal_file(f, p, ids, stats)
            except FileNotFoundError:
                continue
            if size == st.st_size:
                for old in [k for k in self.known if k[0] == rel]:
                    del self.known[old]
                self.known[seen] = ids
            entries.append(FileEntry(path=rel, size=size, chunks=ids))
        return entries

    def _seal_file(self, f: BinaryIO, p: Path, ids: list[str], stats: UploadStats) -> int:
        """Seals the open file's chunks, their ids into `ids` (where each is into `self._where`);
        how many bytes it had."""
        size = 0
        for i, plain in enumerate(file_chunks(f, self.chunk_bytes)):
            t = time.perf_counter()
            sealed = seal_chunk(self.key, self.lease, plain)
            t2 = time.perf_counter()
            cid = chunk_id(sealed)
            stats.seconds_seal += t2 - t
            stats.seconds_hash += time.perf_counter() - t2
            ids.append(cid)
            self._where.setdefault(cid, (p, i))
            size += len(plain)
        return size

    def upload(self, directory: Path, seq: int | None = None) -> UploadStats:
        """Sends the directory as a checkpoint: only the chunks the store lacks, then the manifest."""
        stats = UploadStats()
        entries = self._seal_directory(directory, stats)
        manifest = Manifest(
            lease=self.lease,
            node_key=str(self.node.pubkey()),
            seq=seq or int(time.time() * 1000),
            chunk_bytes=self.chunk_bytes,
            files=entries,
            rank=self.rank,
        )
        signed = sign_manifest(self.node, manifest)
        body = signed.model_dump_json().encode()
        t = time.perf_counter()
        missing = parse_json(self._request("POST", f"{self.base}/missing", body).content)["missing"]
        stats.seconds_transfer += time.perf_counter() - t
        for cid in missing:
            path, index = self._where[cid]
            try:
                with open_job_file(directory, path) as f:
                    f.seek(index * self.chunk_bytes)
                    plain = f.read(self.chunk_bytes)
            except FileNotFoundError:
                plain = b""  # gone (or a link now): its chunk's id does not match, as for any change
            t = time.perf_counter()
            sealed = seal_chunk(self.key, self.lease, plain)
            stats.seconds_seal += time.perf_counter() - t
            if chunk_id(sealed) != cid:
                raise StoreError(f"{path} changed while it was sent: the next checkpoint carries it")
            t = time.perf_counter()
            self._request("PUT", f"{self.base}/chunks/{cid}", sealed)
            stats.seconds_transfer += time.perf_counter() - t
            stats.sent_chunks += 1
            stats.sent_bytes += len(sealed)
        t = time.perf_counter()
        self._request("PUT", f"{self.base}/manifests/{manifest.seq}", body)
        stats.seconds_transfer += time.perf_counter() - t
        stats.files, stats.bytes, stats.chunks, stats.seq = (
            len(entries),
            manifest.size,
            len(manifest.chunk_ids()),
            manifest.seq,
        )
        return stats

    def restore(self, directory: Path) -> RestoreStats:
        """Writes the newest checkpoint of this node's rank that checks out (its rank, the manifest's
        signature by a node that holds or held that rank, every chunk's id and tag) into an empty
        directory; one that does not is skipped for the one before. Nothing is written into a
        non-empty directory (it is this node's own, newer state), nor for an unchecked file."""
        stats = RestoreStats()
        if _files(directory):
            return stats
        started = time.perf_counter()
        try:
            self._restore_newest(directory, stats)
        finally:
            stats.seconds = time.perf_counter() - started
        return stats

    def _restore_newest(self, directory: Path, stats: RestoreStats) -> None:
        t = time.perf_counter()
        seqs = parse_json(self._request("GET", f"{self.base}/manifests{self._of_rank}").content)["seqs"]
        stats.seconds_transfer += time.perf_counter() - t
        for seq in seqs:
            try:
                self._restore_one(directory, seq, stats)
                return
            except (ValueError, StoreError) as e:
                stats.refused.append(f"checkpoint {seq}: {e}")
                for p in _files(directory):  # nothing of a refused checkpoint stays
                    p.unlink()

    def _restore_one(self, directory: Path, seq: int, stats: RestoreStats) -> None:
        r = self._request("GET", f"{self.base}/manifests/{seq}{self._of_rank}")
        if r.status_code == 404:
            raise StoreError("gone")
        manifest = SignedManifest.model_validate_json(r.content).verified(self.signers)
        if manifest.lease != self.lease:
            raise ValueError(f"the manifest is of lease {manifest.lease}")
        if manifest.rank != self.rank:  # another rank's state is never this one's
            raise ValueError(f"the manifest is rank {manifest.rank}'s, this node is rank {self.rank}")
        staging = directory.with_name(directory.name + ".restoring")
        shutil.rmtree(staging, ignore_errors=True)
        try:
            for entry in manifest.files:
                target = staging / entry.path
                target.parent.mkdir(parents=True, exist_ok=True)
                size = 0
                with target.open("wb") as out:
                    for cid in entry.chunks:
                        t = time.perf_counter()
                        got = self._request("GET", f"{self.base}/chunks/{cid}")
                        stats.seconds_transfer += time.perf_counter() - t
                        if got.status_code == 404:
                            raise ValueError(f"chunk {cid[:16]}… of {entry.path} is not in the store")
                        t = time.perf_counter()
                        if chunk_id(got.content) != cid:
                            raise ChunkRefused(f"chunk {cid[:16]}… of {entry.path}: its bytes are not its id")
                        t2 = time.perf_counter()
                        plain = open_chunk(self.key, self.lease, cid, got.content)
                        stats.seconds_hash += t2 - t
                        stats.seconds_open += time.perf_counter() - t2
                        out.write(plain)
                        size += len(plain)
                if size != entry.size:
                    raise ValueError(f"{entry.path}: {size} bytes, the manifest says {entry.size}")
            directory.mkdir(parents=True, exist_ok=True)
            for p in sorted(staging.rglob("*")):
                if p.is_file():
                    dest = directory / p.relative_to(staging)
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    os.replace(p, dest)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        stats.seq, stats.files, stats.bytes = manifest.seq, len(manifest.files), manifest.size
