"""The canonical usage report a worker signs, and the Ed25519 precompile instruction that carries it.

Byte for byte the layout `programs/gpunet/src/state/usage.rs` checks on chain (144 bytes,
little-endian integers); tests/vectors/usage_message.json pins it for both languages.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from solders.instruction import Instruction
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.signature import Signature

from gpunet.idl import PROGRAM_ID

__all__ = [
    "ED25519_PROGRAM_ID",
    "USAGE_DOMAIN_TAG",
    "USAGE_MESSAGE_LEN",
    "UsageReport",
    "ed25519_instruction",
    "ed25519_verify_instruction",
]

USAGE_DOMAIN_TAG = b"gpunet-usage-v1\x00"
USAGE_MESSAGE_LEN = 144
ED25519_PROGRAM_ID = Pubkey.from_string("Ed25519SigVerify111111111111111111111111111")

_U64 = 2**64
_I64 = 2**63


@dataclass(frozen=True)
class UsageReport:
    """One period of one node's usage on one lease."""

    seq: int
    period_start: int
    period_end: int
    gpu_seconds: int

    def __post_init__(self) -> None:
        for name in ("seq", "gpu_seconds"):
            value = getattr(self, name)
            if not 0 <= value < _U64:
                raise ValueError(f"{name} must be a u64, got {value}")
        for name in ("period_start", "period_end"):
            value = getattr(self, name)
            if not -_I64 <= value < _I64:
                raise ValueError(f"{name} must be an i64 (unix seconds), got {value}")

    def message(self, lease: Pubkey, node_key: Pubkey, program_id: Pubkey = PROGRAM_ID) -> bytes:
        """The 144 bytes the node key signs."""
        return (
            USAGE_DOMAIN_TAG
            + bytes(program_id)
            + bytes(lease)
            + bytes(node_key)
            + struct.pack("<QqqQ", self.seq, self.period_start, self.period_end, self.gpu_seconds)
        )

    def signature(self, lease: Pubkey, node: Keypair, program_id: Pubkey = PROGRAM_ID) -> bytes:
        """The node's 64-byte signature over this report (what a worker sends the coordinator)."""
        return bytes(node.sign_message(self.message(lease, node.pubkey(), program_id)))

    def verify(self, lease: Pubkey, node_key: Pubkey, signature: bytes, program_id: Pubkey = PROGRAM_ID) -> bool:
        """Whether `signature` is `node_key`'s signature over this report."""
        if len(signature) != 64:
            return False
        return Signature.from_bytes(signature).verify(node_key, self.message(lease, node_key, program_id))

    def sign(self, lease: Pubkey, node: Keypair, program_id: Pubkey = PROGRAM_ID) -> Instruction:
        """The Ed25519 instruction that must directly precede `settle_usage` for this report."""
        return ed25519_instruction(node, self.message(lease, node.pubkey(), program_id))

    def signed_instruction(
        self, lease: Pubkey, node_key: Pubkey, signature: bytes, program_id: Pubkey = PROGRAM_ID
    ) -> Instruction:
        """The same Ed25519 instruction from a signature the node sent (the coordinator has no node key)."""
        return ed25519_verify_instruction(node_key, signature, self.message(lease, node_key, program_id))


# Offsets layout: one signature; public key, signature and message all inside this instruction.
_HEADER_LEN = 2 + 14
_THIS_INSTRUCTION = 0xFFFF


def ed25519_instruction(signer: Keypair, message: bytes) -> Instruction:
    """An Ed25519 precompile instruction verifying `message` signed by `signer`."""
    return ed25519_verify_instruction(signer.pubkey(), bytes(signer.sign_message(message)), message)


def ed25519_verify_instruction(public_key: Pubkey, signature: bytes, message: bytes) -> Instruction:
    """An Ed25519 precompile instruction verifying `signature` by `public_key` over `message`."""
    if len(signature) != 64:
        raise ValueError(f"an Ed25519 signature is 64 bytes, got {len(signature)}")
    if len(message) > 0xFFFF - _HEADER_LEN - 96:
        raise ValueError(f"message too long for one Ed25519 instruction: {len(message)} bytes")
    key_offset = _HEADER_LEN
    signature_offset = key_offset + 32
    message_offset = signature_offset + 64
    offsets = struct.pack(
        "<BBHHHHHHH",
        1,  # one signature
        0,  # padding
        signature_offset,
        _THIS_INSTRUCTION,
        key_offset,
        _THIS_INSTRUCTION,
        message_offset,
        len(message),
        _THIS_INSTRUCTION,
    )
    data = offsets + bytes(public_key) + signature + message
    return Instruction(ED25519_PROGRAM_ID, data, [])
