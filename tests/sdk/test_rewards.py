"""The SDK's reward tree (gpunet.rewards) against the shared vector the program is tested with, and
the tree's own refusals: what a claim can and cannot prove."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from solders.pubkey import Pubkey

from gpunet.idl import PROGRAM_ID
from gpunet.rewards import RewardLeaf, RewardTree, node_hash, verify

VECTOR = json.loads((Path(__file__).parents[1] / "vectors" / "reward_tree.json").read_text())
MINT = Pubkey.from_string(VECTOR["mint"])


def _leaves() -> list[RewardLeaf]:
    return [
        RewardLeaf(e["epoch"], Pubkey.from_string(e["provider"]), e["supplier_amount"], e["delegators_amount"])
        for e in VECTOR["leaves"]
    ]


def test_the_tree_matches_the_shared_vector():
    assert VECTOR["program_id"] == str(PROGRAM_ID)
    tree = RewardTree(_leaves(), MINT)
    assert tree.root.hex() == VECTOR["root"]
    for i, (leaf, entry) in enumerate(zip(tree.leaves, VECTOR["leaves"], strict=True)):
        assert leaf.hash(MINT).hex() == entry["hash"]
        assert [p.hex() for p in tree.proof(i)] == entry["proof"]
        assert verify(leaf.hash(MINT), tree.proof(i), tree.root)


def test_a_proof_proves_its_own_leaf_and_nothing_else():
    leaves = _leaves()
    tree = RewardTree(leaves, MINT)
    proof = tree.proof(0)
    leaf = leaves[0]
    # another amount, epoch, pool or mint: the leaf hash differs, the proof fails
    for other in (
        RewardLeaf(leaf.epoch, leaf.provider, leaf.supplier_amount + 1, leaf.delegators_amount),
        RewardLeaf(leaf.epoch + 1, leaf.provider, leaf.supplier_amount, leaf.delegators_amount),
        RewardLeaf(leaf.epoch, leaves[1].provider, leaf.supplier_amount, leaf.delegators_amount),
    ):
        assert not verify(other.hash(MINT), proof, tree.root)
    assert not verify(leaf.hash(Pubkey.from_bytes(bytes(32))), proof, tree.root)
    assert not verify(leaf.hash(MINT, program_id=Pubkey.from_bytes(bytes([1] * 32))), proof, tree.root)
    # an over-long proof fails
    assert not verify(leaf.hash(MINT), [*proof, proof[-1]], tree.root)


def test_an_odd_leaf_is_carried_up_not_paired_with_itself():
    leaves = _leaves()[:3]
    tree = RewardTree(leaves, MINT)
    a, b, c = (leaf.hash(MINT) for leaf in leaves)
    assert tree.root == node_hash(node_hash(a, b), c)
    assert tree.proof(2) == [node_hash(a, b)]
    # a fourth leaf equal to the third (the duplicated-last-leaf bug) is refused, not absorbed
    with pytest.raises(ValueError, match="one leaf per provider"):
        RewardTree([*leaves, leaves[2]], MINT)


def test_bad_leaves_and_trees_are_refused():
    provider = Pubkey.from_bytes(bytes([1] * 32))
    for bad in ((-1, 0, 0), (0, -1, 0), (0, 0, 2**64)):
        with pytest.raises(ValueError):
            RewardLeaf(bad[0], provider, bad[1], bad[2])
    with pytest.raises(ValueError, match="one epoch"):
        RewardTree([RewardLeaf(1, provider, 1, 1), RewardLeaf(2, Pubkey.from_bytes(bytes([2] * 32)), 1, 1)], MINT)
    with pytest.raises(ValueError, match="u64"):
        RewardTree(
            [RewardLeaf(1, provider, 2**63, 0), RewardLeaf(1, Pubkey.from_bytes(bytes([2] * 32)), 2**63, 0)], MINT
        )
    assert RewardTree([], MINT).root == bytes(32)
    with pytest.raises(IndexError):
        RewardTree([RewardLeaf(1, provider, 1, 1)], MINT).proof(1)
