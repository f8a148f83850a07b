"""The reward tree: one leaf per pool and epoch, its root posted on chain, a proof per claim.

The same tree as the program's (programs/gpunet/src/merkle.rs; tests/vectors/reward_tree.json
pins both): leaf and inner-node hashes carry different prefixes, so an inner node never passes as
a leaf; a leaf binds the program, the epoch, the IO mint and the pool's provider; inner nodes hash
their children in sorted order; an odd node is carried up a level unpaired (never paired with a
copy of itself, the duplicated-last-leaf bug of some distributors).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from solders.pubkey import Pubkey

from gpunet.idl import PROGRAM_ID

__all__ = ["REWARD_DOMAIN", "RewardLeaf", "RewardTree", "node_hash", "verify"]

LEAF_PREFIX = b"\x00"
NODE_PREFIX = b"\x01"
REWARD_DOMAIN = b"gpunet-reward1"
U64 = 2**64


@dataclass(frozen=True)
class RewardLeaf:
    """One pool's reward for one epoch: the supplier's part (for its own stake) and the delegators'."""

    epoch: int
    provider: Pubkey
    supplier_amount: int
    delegators_amount: int

    def __post_init__(self) -> None:
        if not 0 <= self.epoch < 2**63:
            raise ValueError(f"reward epoch must be a non-negative i64, got {self.epoch}")
        for name in ("supplier_amount", "delegators_amount"):
            if not 0 <= getattr(self, name) < U64:
                raise ValueError(f"{name} must be a u64, got {getattr(self, name)}")

    @property
    def total(self) -> int:
        return self.supplier_amount + self.delegators_amount

    def hash(self, mint: Pubkey, program_id: Pubkey = PROGRAM_ID) -> bytes:
        return hashlib.sha256(
            LEAF_PREFIX
            + REWARD_DOMAIN
            + bytes(program_id)
            + self.epoch.to_bytes(8, "little", signed=True)
            + bytes(mint)
            + bytes(self.provider)
            + self.supplier_amount.to_bytes(8, "little")
            + self.delegators_amount.to_bytes(8, "little")
        ).digest()


def node_hash(a: bytes, b: bytes) -> bytes:
    low, high = sorted((a, b))
    return hashlib.sha256(NODE_PREFIX + low + high).digest()


def verify(leaf: bytes, proof: list[bytes], root: bytes) -> bool:
    """Whether `proof` leads from the leaf hash to `root` (what the program checks)."""
    hashed = leaf
    for sibling in proof:
        hashed = node_hash(hashed, sibling)
    return hashed == root


class RewardTree:
    """The tree over one epoch's leaves, in the order given (one leaf per provider)."""

    def __init__(self, leaves: list[RewardLeaf], mint: Pubkey, program_id: Pubkey = PROGRAM_ID) -> None:
        epochs = {leaf.epoch for leaf in leaves}
        if len(epochs) > 1:
            raise ValueError(f"a reward tree is for one epoch; leaves name {sorted(epochs)}")
        providers = [leaf.provider for leaf in leaves]
        if len(set(providers)) != len(providers):
            raise ValueError("a reward tree has at most one leaf per provider")
        if sum(leaf.total for leaf in leaves) >= U64:
            raise ValueError("a reward tree's total must fit a u64")
        self.leaves = list(leaves)
        self.levels = [[leaf.hash(mint, program_id) for leaf in leaves]]
        while len(self.levels[-1]) > 1:
            level = self.levels[-1]
            self.levels.append(
                [node_hash(level[i], level[i + 1]) if i + 1 < len(level) else level[i] for i in range(0, len(level), 2)]
            )

    @property
    def root(self) -> bytes:
        return self.levels[-1][0] if self.levels[-1] else bytes(32)

    @property
    def total(self) -> int:
        return sum(leaf.total for leaf in self.leaves)

    def index(self, provider: Pubkey) -> int:
        for i, leaf in enumerate(self.leaves):
            if leaf.provider == provider:
                return i
        raise KeyError(f"no leaf for provider {provider} in this tree")

    def proof(self, index: int) -> list[bytes]:
        if not 0 <= index < len(self.leaves):
            raise IndexError(f"leaf {index} is not in a tree of {len(self.leaves)}")
        proof = []
        for level in self.levels[:-1]:
            sibling = index ^ 1
            if sibling < len(level):
                proof.append(level[sibling])
            index //= 2
        return proof
