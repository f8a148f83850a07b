"""The SDK's reward tree (gpunet.rewards) against the shared vector the program is tested with, and
the tree's own refusals: what a claim can and cannot prove."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from solders.pubkey import Pubkey

from gpunet.idl import PROGRAM_ID
from gpunet.reward_epoch import DEFAULT_MULTIPLIERS, EpochInputs, NodeUptime, PoolStake, epoch_leaves
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


# --- an epoch's leaves from its inputs (gpunet.reward_epoch)

P1, P2, P3 = (str(Pubkey.from_bytes(bytes([n] * 32))) for n in (1, 2, 3))


def _inputs(**over: object) -> EpochInputs:
    values: dict = {
        "epoch": 4,
        "emission": 1_000_003,
        "samples": 24,
        "reward_tier": 1,
        "establishment_bps": 5_000,
        "multipliers": DEFAULT_MULTIPLIERS,
        "nodes": [
            NodeUptime(str(Pubkey.from_bytes(bytes([11] * 32))), P1, 1, 8, 24, True),  # 8 H100, all day
            NodeUptime(str(Pubkey.from_bytes(bytes([12] * 32))), P2, 1, 8, 24, False),  # the same, new
            NodeUptime(str(Pubkey.from_bytes(bytes([13] * 32))), P3, 8, 1, 12, True),  # one T4, half the day
        ],
        "pools": [PoolStake(P1, 100, 0), PoolStake(P2, 100, 300), PoolStake(P3, 50, 50)],
    }
    values.update(over)
    return EpochInputs(**values)


def test_an_epoch_pays_by_observed_weight_and_splits_by_stake():
    by = {str(leaf.provider): leaf for leaf in epoch_leaves(_inputs())}
    t4 = DEFAULT_MULTIPLIERS[8]
    w1, w2, w3 = 24 * 8 * 10_000 * 10_000, 24 * 8 * 10_000 * 5_000, 12 * 1 * t4 * 10_000
    total = w1 + w2 + w3
    r1, r2, r3 = (1_000_003 * w // total for w in (w1, w2, w3))
    # P1 has no delegators: everything to the supplier; P2's delegators count up to the 1x cap (100
    # of their 300); P3's 50 of 50
    assert (by[P1].supplier_amount, by[P1].delegators_amount) == (r1, 0)
    assert (by[P2].supplier_amount, by[P2].delegators_amount) == (r2 - r2 * 100 // 200, r2 * 100 // 200)
    assert (by[P3].supplier_amount, by[P3].delegators_amount) == (r3 - r3 * 50 // 100, r3 * 50 // 100)
    assert sum(leaf.total for leaf in by.values()) <= 1_000_003  # flooring: the dust stays in the vault


def test_nothing_earns_without_samples_or_a_known_model_and_only_pools_get_leaves():
    nobody = _inputs(nodes=[NodeUptime(str(Pubkey.from_bytes(bytes([14] * 32))), P1, 999, 8, 24, True)])
    assert [leaf.total for leaf in epoch_leaves(nobody)] == [0, 0, 0]  # every pool still gets a (zero) leaf
    no_pool = _inputs(pools=[PoolStake(P1, 100, 0)])
    (only,) = epoch_leaves(no_pool)  # P2 and P3 earned, but without a pool nothing can be credited to them
    assert str(only.provider) == P1 and only.total == 1_000_003


def test_published_inputs_round_trip_and_malformed_ones_are_refused():
    inputs = _inputs()
    assert EpochInputs.from_json(json.loads(inputs.canonical())) == inputs
    good = inputs.to_json()
    for bad in (
        {**good, "emission": 5},  # an amount must be a decimal string
        {**good, "emission": "-5"},
        {**good, "pools": [*good["pools"], good["pools"][0]]},  # a pool twice
        {**good, "nodes": [{**good["nodes"][0], "eligible_samples": 25}]},  # more than the epoch's samples
        {**good, "nodes": [{**good["nodes"][0], "provider": "not a key"}]},
        {k: v for k, v in good.items() if k != "samples"},
    ):
        with pytest.raises(ValueError):
            EpochInputs.from_json(bad)
