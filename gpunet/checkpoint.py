"""Checkpoints of real size: a job's checkpoint directory as encrypted, content-addressed chunks
and a manifest signed by the node key, moved over HTTP through the coordinator's checkpoint store.

- Each file is cut into chunks of `CHUNK_BYTES`; each chunk is sealed with AES-256-GCM under the
  lease's checkpoint key. The nonce is HMAC-SHA256(key, chunk)[:12] (deterministic: the same
  chunk of the same lease seals to the same bytes), so a chunk's id, the SHA-256 of its sealed
  bytes, is stable: an upload cut off halfway, or redone after an agent restart, sends only the
  chunks the store lacks, and a later checkpoint only the chunks that changed. Equal chunks of one
  lease are visible as equal; nothing else of the plaintext is.
- The lease's key is HKDF-SHA256 over the client's Ed25519 signature of the lease's job 1
  (`job_message`; deterministic, so the client's wallet derives it again at will) with the lease
  as salt. Who can derive it: the client, the lease's nodes (their dispatch carries that
  signature) and the coordinator (it verified and keeps it). The store (the coordinator's disk or
  an object store) holds ciphertext only.
- The manifest (files -> chunk ids and sizes, the node, the lease, a sequence number) is signed by
  the node key; a restore checks the signature, each chunk's id and each chunk's GCM tag, and a
  manifest that fails any of them is refused (the previous one is used).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.signature import Signature

from gpunet.errors import GpunetError

__all__ = [
    "AT_HEADER",
    "CHUNK_BYTES",
    "NODE_HEADER",
    "SIGNATURE_HEADER",
    "ChunkRefused",
    "FileEntry",
    "Manifest",
    "SignedManifest",
    "chunk_id",
    "lease_key",
    "open_chunk",
    "request_message",
    "seal_chunk",
    "sign_manifest",
]

CHUNK_BYTES = 8 * 1024 * 1024
NONCE_BYTES = 12
NODE_HEADER = "X-Gpunet-Node"
AT_HEADER = "X-Gpunet-At"
SIGNATURE_HEADER = "X-Gpunet-Signature"
ChunkId = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


class ChunkRefused(GpunetError, ValueError):
    """A chunk whose bytes are not its id, or that does not open under the lease's key."""


def lease_key(lease: str, seed_signature: str) -> bytes:
    """The lease's 32-byte checkpoint key (see the module's note for who can derive it)."""
    hkdf = HKDF(
        algorithm=hashes.SHA256(), length=32, salt=bytes(Pubkey.from_string(lease)), info=b"gpunet-checkpoint-v1"
    )
    return hkdf.derive(bytes(Signature.from_string(seed_signature)))


def seal_chunk(key: bytes, lease: str, plain: bytes) -> bytes:
    """nonce || AES-256-GCM(plain) with the lease as associated data; deterministic per (key, plain)."""
    nonce = hmac.new(key, plain, hashlib.sha256).digest()[:NONCE_BYTES]
    return nonce + AESGCM(key).encrypt(nonce, plain, lease.encode())


def open_chunk(key: bytes, lease: str, cid: str, sealed: bytes) -> bytes:
    """The plaintext of a sealed chunk, after checking its id and its tag (ChunkRefused if not)."""
    if hashlib.sha256(sealed).hexdigest() != cid:
        raise ChunkRefused(f"chunk {cid[:16]}…: its bytes are not its id")
    try:
        return AESGCM(key).decrypt(sealed[:NONCE_BYTES], sealed[NONCE_BYTES:], lease.encode())
    except Exception:
        raise ChunkRefused(f"chunk {cid[:16]}…: does not open under the lease's key") from None


def chunk_id(sealed: bytes) -> str:
    return hashlib.sha256(sealed).hexdigest()


def _relative_path(path: str) -> str:
    p = Path(path)
    if p.is_absolute() or ".." in p.parts or not path or path != p.as_posix():
        raise ValueError(f"not a relative path inside the checkpoint directory: {path!r}")
    return path


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FileEntry(_Model):
    path: Annotated[str, AfterValidator(_relative_path), Field(max_length=1024)]
    size: Annotated[int, Field(ge=0)]
    chunks: list[ChunkId]  # in order; every chunk but the last is CHUNK_BYTES of plaintext


class Manifest(_Model):
    """One checkpoint of a lease: what a node wrote, as chunk ids. `seq` orders a lease's checkpoints
    (unix milliseconds when it was taken)."""

    lease: str
    node_key: str
    seq: Annotated[int, Field(ge=1, lt=2**63)]
    chunk_bytes: Annotated[int, Field(ge=1)] = CHUNK_BYTES
    files: list[FileEntry]

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    def chunk_ids(self) -> list[str]:
        return list(dict.fromkeys(c for f in self.files for c in f.chunks))

    def message(self) -> bytes:
        return b"gpunet-checkpoint-manifest-v1\n" + json.dumps(self.model_dump(), sort_keys=True).encode()


class SignedManifest(_Model):
    manifest: Manifest
    signature: str  # base58, the node key's over manifest.message()

    def verified(self) -> Manifest:
        """The manifest if its node key signed it (ValueError if not)."""
        try:
            ok = Signature.from_string(self.signature).verify(
                Pubkey.from_string(self.manifest.node_key), self.manifest.message()
            )
        except ValueError:
            ok = False
        if not ok:
            raise ValueError(f"checkpoint {self.manifest.seq}: the manifest's signature is not its node's")
        return self.manifest


def sign_manifest(node: Keypair, manifest: Manifest) -> SignedManifest:
    return SignedManifest(manifest=manifest, signature=str(node.sign_message(manifest.message())))


def request_message(method: str, path: str, at_ms: int, body_sha256: str) -> bytes:
    """What a node signs for a checkpoint-store request (headers NODE, AT, SIGNATURE)."""
    return f"gpunet-checkpoint-request-v1\n{method.upper()}\n{path}\n{at_ms}\n{body_sha256}".encode()


def signed_headers(node: Keypair, method: str, path: str, body: bytes = b"") -> dict[str, str]:
    at_ms = int(time.time() * 1000)
    signature = node.sign_message(request_message(method, path, at_ms, hashlib.sha256(body).hexdigest()))
    return {NODE_HEADER: str(node.pubkey()), AT_HEADER: str(at_ms), SIGNATURE_HEADER: str(signature)}


def file_chunks(path: Path, chunk_bytes: int = CHUNK_BYTES) -> Iterator[bytes]:
    """The file's plaintext chunks (one empty chunk for an empty file: none)."""
    with path.open("rb") as f:
        while block := f.read(chunk_bytes):
            yield block
