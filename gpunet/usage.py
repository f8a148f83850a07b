"""The canonical usage receipt a worker signs, and the Ed25519 precompile instruction that carries it.

A receipt is cumulative: the GPU-seconds a node delivered to its share of a lease since the share
was assigned to it (the share's `epoch`), through a moment. Each one supersedes the ones before;
`settle_usage` pays the increment over what is settled. Byte for byte the layout
`programs/gpunet/src/state/usage.rs` checks on chain (136 bytes, little-endian integers);
tests/vectors/usage_receipt.json pins it for both languages.
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
    "RECEIPT_DOMAIN_TAG",
    "RECEIPT_MESSAGE_LEN",
    "Receipt",
    "ed25519_instruction",
    "ed25519_verify_instruction",
]

RECEIPT_DOMAIN_TAG = b"gpunet-receipt1\x00"
RECEIPT_MESSAGE_LEN = 136
ED25519_PROGRAM_ID = Pubkey.from_string("Ed25519SigVerify111111111111111111111111111")

_U64 = 2**64
_I64 = 2**63


@dataclass(frozen=True)
class Receipt:
    """One node's cumulative usage of its share of one lease: `gpu_seconds` since the assignment
    `epoch`, through `through` (unix seconds)."""

    epoch: int
    gpu_seconds: int
    through: int

    def __post_init__(self) -> None:
        for name in ("epoch", "gpu_seconds"):
            value = getattr(self, name)
            if not 0 <= value < _U64:
                raise ValueError(f"{name} must be a u64, got {value}")
        if not -_I64 <= self.through < _I64:
            raise ValueError(f"through must be an i64 (unix seconds), got {self.through}")

    def message(self, lease: Pubkey, node_key: Pubkey, program_id: Pubkey = PROGRAM_ID) -> bytes:
        """The 136 bytes the node key signs."""
        return (
            RECEIPT_DOMAIN_TAG
            + bytes(program_id)
            + bytes(lease)
            + bytes(node_key)
            + struct.pack("<QQq", self.epoch, self.gpu_seconds, self.through)
        )

    def signature(self, lease: Pubkey, node: Keypair, program_id: Pubkey = PROGRAM_ID) -> bytes:
        """The node's 64-byte signature over this receipt (what a worker sends the coordinator)."""
        return bytes(node.sign_message(self.message(lease, node.pubkey(), program_id)))

    def verify(self, lease: Pubkey, node_key: Pubkey, signature: bytes, program_id: Pubkey = PROGRAM_ID) -> bool:
        """Whether `signature` is `node_key`'s signature over this receipt."""
        if len(signature) != 64:
            return False
        return Signature.from_bytes(signature).verify(node_key, self.message(lease, node_key, program_id))

    def sign(self, lease: Pubkey, node: Keypair, program_id: Pubkey = PROGRAM_ID) -> Instruction:
        """The Ed25519 instruction that must directly precede `settle_usage` for this receipt."""
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
