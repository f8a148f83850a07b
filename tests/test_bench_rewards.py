"""bench/rewards/rewards.py at smoke size, so it cannot rot: it builds two reward trees, opens two pools
on gpunet-localnet with a delegator each, posts a root, claims both pools' leaves and settles usage of
two suppliers, and prints every figure: the trees' build times, the claim's CU (metered on the SBF
build when GPUNET_PROGRAM_SO names it, else marked not metered), its transaction's size, the chain
cost of a claim, and what a settlement and a claim write. Timings and CU are not checked: a benchmark
reports them, a test does not. Which accounts are written, and shared by every pool's transaction, is
the program's shape, not a measurement: that the claim's three are named is checked."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.benchmarks import run_benchmark

NUMBER = r"[\d,]+"
CLAIM_CU = (
    rf"^claim CU: {NUMBER} median \(range {NUMBER}-{NUMBER} over 2 claims; proof of 11 hashes, tree of 2,000 pools\)"
    rf" on the (SBF build, [\d.]+% of the default \(target < 200,000: (met|NOT met)\)"
    r"|native build: NOT METERED \(target < 200,000: not judged; set GPUNET_PROGRAM_SO=target/deploy/gpunet.so\))$"
)
CHAIN_COST = (
    rf"^claim chain cost: fee {NUMBER} lamports \+ RewardIndex rent {NUMBER} lamports \(\d+ bytes, never closed\)"
    rf" = {NUMBER} lamports = [\d.]+ SOL per claim \(one per pool and epoch\); an epoch's claims:"
    rf" 10,000 pools {NUMBER} lamports = [\d,.]+ SOL, 100,000 pools {NUMBER} lamports = [\d,.]+ SOL;"
    r" RewardIndex rent locked in a year of the default 24 h epochs: [\d,.]+ SOL for 100,000 pools \(report only\)$"
)


def _tree(pools: str, hashes: int, verdict: str) -> str:
    return (
        rf"^tree: {pools} pools: {pools} leaves hashed, the root and {pools} proofs \({hashes} hashes\)"
        rf" in [\d.]+ s, [\d.]+ us a pool \({verdict}\)$"
    )


@pytest.mark.timeout(90)
def test_the_rewards_benchmark_prints_every_figure(localnet_bin: Path) -> None:
    out = run_benchmark(["bench/rewards/rewards.py", "--smoke"], timeout=80, localnet_bin=localnet_bin)
    assert re.search(_tree("1,000", 10, r"target for 100,000: < 10 s"), out, re.MULTILINE), out
    assert re.search(_tree("2,000", 11, r"target for 100,000: < 10 s"), out, re.MULTILINE), out
    assert re.search(CLAIM_CU, out, re.MULTILINE), out
    assert re.search(
        r"^claim transaction: [\d,]+ bytes of 1,232 with a proof of 11 hashes; a proof of \d+ hashes still fits"
        r" \(trees up to [\d,]+ pools\)$",
        out,
        re.MULTILINE,
    ), out
    assert re.search(CHAIN_COST, out, re.MULTILINE), out

    settle = re.search(r"^writes: settle_usage: (\d+) accounts: (.*)$", out, re.MULTILINE)
    assert settle, out
    assert {"lease", "lease_vault", "provider_tokens"} <= set(settle[2].split(", ")), out
    assert re.search(
        r"^shared: settle_usage writes no account shared by all pools \(target: none: met\)", out, re.MULTILINE
    ), out

    claim = re.search(r"^writes: claim_reward: (\d+) accounts: (.*)$", out, re.MULTILINE)
    assert claim, out
    roles = set(claim[2].split(", "))
    assert {"staking [SHARED]", "reward_vault [SHARED]", "reward_root [SHARED]", "pool", "reward_index"} <= roles, out
    shared = r"(reward_root|staking|reward_vault)"
    assert re.search(
        rf"^shared: claim_reward writes 3 accounts shared by all pools \({shared}(, {shared}){{2}}\):"
        r" an epoch's claims serialise on them \(a known serialisation point\), at most [\d,]+ claims a block"
        r" \(24,000,000 CU per written account / [\d,]+ CU a claim's block cost\), 100,000 pools' claims"
        r" >= [\d,]+ blocks \([\d,]+ s at 400 ms slots\)",
        out,
        re.MULTILINE,
    ), out
    assert re.search(r"^left out: ", out, re.MULTILINE), out
