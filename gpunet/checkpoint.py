"""Checkpoints of real size: a job's checkpoint directory as encrypted, content-addressed chunks
and a manifest signed by the node key, moved over HTTP through the coordinator's checkpoint store.

- Each file is cut into chunks of `CHUNK_BYTES`; each chunk is sealed with AES-256-GCM under the
  lease's checkpoint key. The nonce is HMAC-SHA256(key, chunk)[:12] (deterministic: the same
  chunk of the same lease seals to the same bytes), so a chunk's id, the SHA-256 of its sealed
  bytes, is stable: an upload cut off halfway, or redone after an agent restart, sends only the
  chunks the store lacks, and a later checkpoint only the chunks that changed. Equal chunks of one
  lease are visible as equal; nothing else of the plaintext is.
- The lease's key is the client's: HKDF-SHA256 over the client wallet's secret key with the lease
  as salt (`lease_key`), computed on the client's machine from nothing it ever sends, so the
  client derives it again at will (`gpunet lease files` decrypts with it). The client seals it to
  each node the lease is placed on, as it seals a job's secrets (`seal_key`, gpunet.secrets), and
  seals it again to the node a failover moves the lease to (`gpunet lease status`); the node
  opens it with its node key (`open_key`). Who holds it: the client and the lease's nodes. The
  coordinator relays the sealed key and the store (the coordinator's disk or an object store)
  holds ciphertext only: neither can derive it.
- The manifest (files -> chunk ids and sizes, the node, the lease, the node's rank in the lease, a
  sequence number) is signed by the node key. A lease's checkpoints are per rank: a node of a
  multi-node lease checkpoints its own rank's state, and a node that takes rank r over restores
  rank r's. The store keeps a manifest only from a node that holds or held its rank of the lease,
  and a restore checks the signature, that the signer holds or held that rank (no other node key,
  not even another rank's node, may plant a checkpoint), the rank, each chunk's id and each
  chunk's GCM tag: a manifest that fails any of them is refused (the previous one is used).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Annotated, Any, BinaryIO

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.signature import Signature

from gpunet.errors import GpunetError
from gpunet.limits import MAX_LEASE_NODES
from gpunet.secrets import SecretError, open_sealed, seal

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
    "open_checkpoint",
    "open_chunk",
    "open_key",
    "request_message",
    "seal_chunk",
    "seal_key",
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


KEY_BYTES = 32


def lease_key(client: Keypair, lease: str) -> bytes:
    """The lease's 32-byte checkpoint key, derived by its client from the wallet's secret key (see
    the module's note): deterministic, so any of the client's machines with the wallet has it."""
    hkdf = HKDF(
        algorithm=hashes.SHA256(),
        length=KEY_BYTES,
        salt=bytes(Pubkey.from_string(lease)),
        info=b"gpunet-checkpoint-key-v2",
    )
    return hkdf.derive(bytes(client)[:32])


def seal_key(node_key: Pubkey, key: bytes) -> str:
    """The lease's checkpoint key sealed to one node's key (base64, as a job's secrets are sealed)."""
    return seal(node_key, base64.b64encode(key).decode())


def open_key(node: Keypair, sealed: str) -> bytes:
    """The checkpoint key sealed to `node`, opened with its node key; SecretError for anything else."""
    text = open_sealed(node, sealed)
    try:
        key = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        key = b""
    if len(key) != KEY_BYTES:
        raise SecretError("the sealed checkpoint key is not a 32-byte key")
    return key


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
    """One checkpoint of a lease's rank: what a node wrote, as chunk ids. `seq` orders a rank's
    checkpoints (unix milliseconds when it was taken); `rank` is the writer's rank in the lease (0
    for a single-node lease, and for a manifest from before the field)."""

    lease: str
    node_key: str
    seq: Annotated[int, Field(ge=1, lt=2**63)]
    chunk_bytes: Annotated[int, Field(ge=1)] = CHUNK_BYTES
    files: list[FileEntry]
    rank: Annotated[int, Field(ge=0, lt=MAX_LEASE_NODES)] = 0

    @model_serializer(mode="wrap")
    def _rank_0_as_before(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Rank 0's is written, and signed, as before the field existed: a stored older manifest
        still checks, and a node from before ranks still reads a single-node lease's."""
        body: dict[str, Any] = handler(self)
        if not body.get("rank"):
            body.pop("rank", None)
        return body

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

    def verified(self, signers: Collection[str]) -> Manifest:
        """The manifest if its node key signed it and is one of `signers`, the nodes that hold or
        held the manifest's rank of the lease (ValueError if not): no other node key may plant a
        checkpoint, nor one rank's node another rank's."""
        if self.manifest.node_key not in signers:
            raise ValueError(
                f"checkpoint {self.manifest.seq}: signed by {self.manifest.node_key}, never the lease's node of "
                f"rank {self.manifest.rank}"
            )
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
    """What a node signs for a checkpoint-store request (headers NODE, AT, SIGNATURE); `path` with
    its query, if any (`?rank=`)."""
    return f"gpunet-checkpoint-request-v1\n{method.upper()}\n{path}\n{at_ms}\n{body_sha256}".encode()


def signed_headers(node: Keypair, method: str, path: str, body: bytes = b"") -> dict[str, str]:
    at_ms = int(time.time() * 1000)
    signature = node.sign_message(request_message(method, path, at_ms, hashlib.sha256(body).hexdigest()))
    return {NODE_HEADER: str(node.pubkey()), AT_HEADER: str(at_ms), SIGNATURE_HEADER: str(signature)}


def file_chunks(f: BinaryIO, chunk_bytes: int = CHUNK_BYTES) -> Iterator[bytes]:
    """The open file's plaintext chunks (one empty chunk for an empty file: none)."""
    while block := f.read(chunk_bytes):
        yield block


def open_checkpoint(
    key: bytes, signed: SignedManifest, sealed: dict[str, bytes], signers: Collection[str]
) -> list[tuple[str, bytes]]:
    """A checkpoint's files (path, plaintext) from its signed manifest and its sealed chunks, each
    checked (the signer, every chunk's id and tag, every file's size): ChunkRefused or ValueError if not."""
    manifest = signed.verified(signers)
    out = []
    for entry in manifest.files:
        parts = []
        for cid in entry.chunks:
            if cid not in sealed:
                raise ChunkRefused(f"chunk {cid[:16]}… of {entry.path} is missing")
            parts.append(open_chunk(key, manifest.lease, cid, sealed[cid]))
        data = b"".join(parts)
        if len(data) != entry.size:
            raise ValueError(f"{entry.path}: {len(data)} bytes, the manifest says {entry.size}")
        out.append((entry.path, data))
    return out
