"""Job secrets sealed to a node: each value encrypted to one node's key, so the coordinator stores and
relays only ciphertext and only that node's worker can open it.

A node's key is Ed25519 (its signing key); the sealing key is its X25519 counterpart (libsodium's
birational map, `crypto_sign_ed25519_pk_to_curve25519`), and each value is a libsodium sealed box
(an ephemeral X25519 key, XSalsa20-Poly1305): anyone can seal to a node, only the node opens, and a
changed byte is refused. Sealed values travel as base64 text."""

from __future__ import annotations

import base64
import binascii

from nacl.exceptions import CryptoError
from nacl.public import PrivateKey, PublicKey, SealedBox
from nacl.signing import SigningKey, VerifyKey
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from gpunet.errors import GpunetError

__all__ = ["MAX_SECRET_BYTES", "SecretError", "open_sealed", "seal", "seal_all"]

MAX_SECRET_BYTES = 32768  # a secret's value, like a plain env value


class SecretError(GpunetError, ValueError):
    """A sealed secret that is not base64, or was not sealed to this node's key, or was changed."""


def _sealing_key(node_key: Pubkey) -> PublicKey:
    return VerifyKey(bytes(node_key)).to_curve25519_public_key()


def _opening_key(node: Keypair) -> PrivateKey:
    return SigningKey(bytes(node)[:32]).to_curve25519_private_key()


def seal(node_key: Pubkey, value: str) -> str:
    """`value` sealed to the node with Ed25519 key `node_key` (base64)."""
    data = value.encode()
    if len(data) > MAX_SECRET_BYTES:
        raise SecretError(f"a secret is at most {MAX_SECRET_BYTES} bytes, this one {len(data)}")
    return base64.b64encode(SealedBox(_sealing_key(node_key)).encrypt(data)).decode()


def seal_all(node_key: Pubkey, secrets: dict[str, str]) -> dict[str, str]:
    """Every secret (name -> value) sealed to one node."""
    return {name: seal(node_key, value) for name, value in secrets.items()}


def open_sealed(node: Keypair, sealed: str) -> str:
    """A value sealed to `node`'s key, opened with it; SecretError for anything else."""
    try:
        box = base64.b64decode(sealed, validate=True)
    except (binascii.Error, ValueError):
        raise SecretError("a sealed secret is not base64") from None
    try:
        return SealedBox(_opening_key(node)).decrypt(box).decode()
    except (CryptoError, UnicodeDecodeError):
        raise SecretError(
            "a sealed secret does not open with this node's key (sealed to another node, or changed)"
        ) from None
