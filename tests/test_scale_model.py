"""bench/scale's arithmetic (bench/scale/model.py, pure functions): exact figures for a fleet under
the settlement models before and after cumulative receipts, with a lease's own transactions (open,
assign, close, finalize) added, and the verdict against the target. Every expected figure is worked
out here by hand from the README's CU and writes tables."""

from __future__ import annotations

import importlib.util
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

_spec = importlib.util.spec_from_file_location(
    "bench_scale_model", Path(__file__).resolve().parents[1] / "bench" / "scale" / "model.py"
)
assert _spec is not None and _spec.loader is not None
model = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = model  # dataclasses look their module up while the class is made
_spec.loader.exec_module(model)

CURRENT = model.Limits(60_000_000, 24_000_000, 1_232, 5_000, Fraction(2, 5))
S = model.Scope
BEFORE = model.Settlement(
    "before", 60, 60, 47_830, signatures=1, ed25519_signatures=1,
    writable={"treasury": S.GLOBAL, "attester": S.GLOBAL, "provider": S.PROVIDER, "provider tokens": S.PROVIDER,
              "lease": S.LEASE, "vault": S.LEASE},
)  # fmt: skip
AFTER = model.Settlement(
    "after", 3_600, 5, 47_830, signatures=2, ed25519_signatures=1,
    writable={"payer": S.PAYER_POOL, "provider tokens": S.PROVIDER, "lease": S.LEASE, "vault": S.LEASE},
    fee_payers=8,
)  # fmt: skip
MILLION = model.Fleet(1_000_000)  # 8 GPUs per node, the largest provider behind 1/10 of the nodes


def test_a_transaction_s_block_cost_is_its_cu_signatures_precompile_checks_and_write_locks() -> None:
    assert BEFORE.transaction_cu == 47_830 + 720 + 2_280 + 6 * 300 == 52_630
    assert AFTER.transaction_cu == 47_830 + 2 * 720 + 2_280 + 4 * 300 == 52_750


def test_a_million_gpus_settled_every_minute_put_the_treasury_over_its_write_limit() -> None:
    f = model.figures(BEFORE, MILLION, CURRENT)
    assert MILLION.nodes == 125_000
    assert f.transactions_per_second == Fraction(125_000, 60)
    assert f.cu_per_block == Fraction(125_000, 60) * Fraction(2, 5) * 52_630 == Fraction(131_575_000, 3)
    assert f.hottest == ("treasury", Fraction(131_575_000, 3))
    assert f.account_cu_per_block["attester"] == f.cu_per_block, "the one fee payer is as hot"
    assert f.account_cu_per_block["provider"] == f.cu_per_block / 10
    assert f.lamports_per_gpu_day == 180 * 2 * 5_000 == 1_800_000  # 1,440 settlements a node-day over 8 GPUs
    v = model.verdict(f, CURRENT)
    assert v.account_share == Fraction(131_575_000, 3 * 24_000_000) and not v.passed


def test_a_million_gpus_settled_hourly_spread_over_the_pool_pass_the_target() -> None:
    f = model.figures(AFTER, MILLION, CURRENT)
    assert f.transactions_per_second == Fraction(625, 18)
    assert f.cu_per_block == Fraction(125, 9) * 52_750 == Fraction(6_593_750, 9)
    assert f.account_cu_per_block == {
        "payer": Fraction(6_593_750, 72),
        "provider tokens": Fraction(659_375, 9),
        "lease": Fraction(52_750, 9_000),
        "vault": Fraction(52_750, 9_000),
    }
    assert f.hottest == ("payer", Fraction(6_593_750, 72))
    assert f.lamports_per_gpu_day == 3 * 3 * 5_000 == 45_000
    assert f.receipts_per_second == 25_000
    v = model.verdict(f, CURRENT)
    assert (v.block_share, v.account_share, v.passed) == (
        Fraction(6_593_750, 9 * 60_000_000),
        Fraction(6_593_750, 72 * 24_000_000),
        True,
    )


def test_the_verdict_fails_on_either_share_alone() -> None:
    one_payer = model.Settlement("one payer", 3_600, 5, 47_830, 2, 1, {"payer": S.PAYER_POOL}, fee_payers=1)
    big = model.figures(one_payer, model.Fleet(16_000_000), CURRENT)  # 2 M nodes hourly: 11.7 M CU a block
    v = model.verdict(big, CURRENT)
    assert v.block_share > Fraction(5, 100) and v.account_share > Fraction(5, 100) and not v.passed
    spread = model.Settlement("spread", 3_600, 5, 47_830, 2, 1, {"payer": S.PAYER_POOL}, fee_payers=1_000)
    v = model.verdict(model.figures(spread, model.Fleet(16_000_000), CURRENT), CURRENT)
    assert v.account_share < Fraction(5, 100) < v.block_share and not v.passed, "a block over 5 % fails alone"


HISTORICAL = model.Limits(60_000_000, 12_000_000, 1_232, 5_000, Fraction(2, 5))
# "after" as bench/scale/scale.py has it: settle_usage at 37,137 CU, its accounts named as the lease's own
# transactions name them, so that their CU adds up
RECEIPTS = model.Settlement(
    "after", 3_600, 5, 37_137, signatures=2, ed25519_signatures=1,
    writable={model.POOL_PAYER: S.PAYER_POOL, model.PROVIDER_TOKENS: S.PROVIDER, model.LEASE: S.LEASE,
              model.VAULT: S.LEASE},
    fee_payers=8,
)  # fmt: skip


def _all(fleet: Any) -> list[Any]:  # model.Fleet -> [model.Flow]
    return [RECEIPTS.flow(), *model.lifecycle(fleet, 8)]


def test_a_lease_s_own_transactions_cost_their_cu_signatures_and_write_locks() -> None:
    costs = {flow.name: flow.transaction_cu for flow in model.lifecycle(MILLION, 8)}
    assert costs == {
        "open_lease": 48_555 + 720 + 4 * 300,  # the client signs; lease, vault, client, its tokens
        "assign_lease": 23_483 + 2 * 720 + 3 * 300,  # payer and attester; payer, lease, its node
        "close_lease": 34_260 + 2 * 720 + 5 * 300,  # payer, lease, node, vault, client's tokens
        "finalize_lease": 37_867 + 2 * 720 + 6 * 300,  # payer, lease, vault, client, its tokens, treasury
    }
    assert costs["finalize_lease"] == 41_107
    assert RECEIPTS.transaction_cu == 37_137 + 2 * 720 + 2_280 + 4 * 300 == 42_057
    cluster = model.Fleet(1_000_000, gpus_per_lease=64)  # leases of 8 nodes
    eight_nodes = {flow.name: flow.transaction_cu for flow in model.lifecycle(cluster, 8)}
    assert eight_nodes["assign_lease"] == 55_467 + 2 * 720 + (2 + 8) * 300 == 59_907  # each node write-locked
    assert eight_nodes["close_lease"] == 52_299 + 2 * 720 + (4 + 8) * 300 == 57_339
    two = {f.name: f.executed_cu for f in model.lifecycle(model.Fleet(1_000_000, gpus_per_lease=16), 8)}
    assert two["assign_lease"] == 23_483 + 4_570  # (55,467 - 23,483) / 7 = 4,569.1..., rounded up


def test_a_million_gpus_in_hourly_8_gpu_leases_keep_the_treasury_under_the_target() -> None:
    f = model.load(_all(MILLION), MILLION, CURRENT)
    # 125,000 leases of one node, each lasting 3,600 s: 125,000 / 3,600 = 625/18 a second of each lease
    # transaction, 625/18 x 2/5 = 125/9 a block; and as many settlements (one per share an hour)
    assert f.transactions_per_second == 5 * Fraction(625, 18)
    assert f.account_cu_per_block[model.TREASURY] == Fraction(125, 9) * 41_107 == Fraction(5_138_375, 9)
    assert f.hottest == (model.TREASURY, Fraction(5_138_375, 9))
    # the pool's payer: settle, assign, close and finalize, over 8 payers
    assert f.account_cu_per_block[model.POOL_PAYER] == Fraction(125, 9) * (42_057 + 25_823 + 37_200 + 41_107) / 8
    assert f.account_cu_per_block[model.PROVIDER_TOKENS] == Fraction(125, 9) * 42_057 / 10
    # one lease: each of its transactions once an hour: 1/3,600 x 2/5 = 1/9,000 a block
    assert f.account_cu_per_block[model.LEASE] == Fraction(42_057 + 50_475 + 25_823 + 37_200 + 41_107, 9_000)
    assert f.account_cu_per_block[model.CLIENT] == Fraction(50_475 + 41_107, 9_000)
    assert f.account_cu_per_block[model.NODE] == Fraction(25_823 + 37_200, 9_000)
    assert f.cu_per_block == Fraction(125, 9) * 196_662 == Fraction(24_582_750, 9)
    v = model.verdict(f, CURRENT)
    assert (v.block_share, v.account_share, v.passed) == (
        Fraction(24_582_750, 9 * 60_000_000),  # 4.55 %
        Fraction(5_138_375, 9 * 24_000_000),  # 2.38 %
        True,
    )
    v = model.verdict(f, HISTORICAL)
    assert v.account_share == Fraction(5_138_375, 9 * 12_000_000) and v.passed  # 4.76 %: 5,138,375 x 20 < 108 M


def test_single_gpu_leases_make_the_treasury_8_times_hotter_and_over_the_target() -> None:
    single = model.Fleet(1_000_000, gpus_per_lease=1)
    assert (single.leases, single.shares, single.nodes_per_lease) == (1_000_000, 1_000_000, 1)
    f = model.load(_all(single), single, CURRENT)
    eight = model.load(_all(MILLION), MILLION, CURRENT)
    # 1,000,000 leases an hour: 1,000,000 / 3,600 x 2/5 = 1,000/9 finalizations a block
    assert f.account_cu_per_block[model.TREASURY] == Fraction(1_000, 9) * 41_107 == Fraction(41_107_000, 9)
    assert f.account_cu_per_block[model.TREASURY] == 8 * eight.account_cu_per_block[model.TREASURY]
    # a node holds 8 leases: 8 assignments and 8 closes an hour, 8/3,600 x 2/5 = 1/1,125 a block
    assert f.account_cu_per_block[model.NODE] == Fraction(25_823 + 37_200, 1_125)
    assert f.account_cu_per_block[model.NODE] == 8 * eight.account_cu_per_block[model.NODE]
    assert f.account_cu_per_block[model.LEASE] == eight.account_cu_per_block[model.LEASE], "a lease's own rate"
    assert f.hottest[0] == model.TREASURY
    v = model.verdict(f, CURRENT)
    assert v.account_share == Fraction(41_107_000, 9 * 24_000_000) > Fraction(5, 100) and not v.passed  # 19.0 %
    assert f.cu_per_block == Fraction(1_000, 9) * 196_662  # 36.4 % of the block
    payer = Fraction(1_000, 9) * (42_057 + 25_823 + 37_200 + 41_107) / 8
    assert f.account_cu_per_block[model.POOL_PAYER] == payer and payer / 24_000_000 > Fraction(5, 100)  # 8.46 %


def test_the_hottest_account_across_flows_is_the_hottest_of_their_sum() -> None:
    # 1,000 leases of 8 GPUs an hour: 1,000 / 3,600 x 2/5 = 1/9 of each flow a block; the largest
    # provider behind 6/10 of the nodes
    fleet = model.Fleet(8_000, largest_provider_share=Fraction(6, 10))
    a = model.Flow("a", model.per_lease, 10_000, 1, writable={"a": S.GLOBAL, "shared": S.PROVIDER})
    b = model.Flow("b", model.per_lease, 12_000, 1, writable={"b": S.GLOBAL, "shared": S.PROVIDER})
    assert (a.transaction_cu, b.transaction_cu) == (10_000 + 720 + 600, 12_000 + 720 + 600) == (11_320, 13_320)
    assert model.load([a], fleet, CURRENT).hottest == ("a", Fraction(11_320, 9))
    assert model.load([b], fleet, CURRENT).hottest == ("b", Fraction(13_320, 9))
    both = model.load([a, b], fleet, CURRENT)
    assert both.account_cu_per_block == {
        "a": Fraction(11_320, 9),
        "shared": Fraction(6, 10) * Fraction(11_320 + 13_320, 9),
        "b": Fraction(13_320, 9),
    }
    assert both.hottest == ("shared", Fraction(14_784, 9))  # hotter than either flow's hottest alone
    assert both.cu_per_block == Fraction(11_320 + 13_320, 9)
    clash = model.Flow("c", model.per_lease, 1, 1, writable={"shared": S.GLOBAL})
    with pytest.raises(ValueError, match="shared"):
        model.load([a, clash], fleet, CURRENT)


def test_a_share_settles_at_its_lease_s_end_too() -> None:
    # leases of 5,400 s settled hourly: at 3,600 s and at the end, 2 settlements a share in 5,400 s
    longer = model.Fleet(1_000_000, lease_seconds=5_400)
    assert RECEIPTS.flow().rate(longer) == Fraction(125_000 * 2, 5_400)
    assert RECEIPTS.flow().rate(MILLION) == Fraction(125_000, 3_600)
    assert RECEIPTS.flow().rate(model.Fleet(1_000_000, gpus_per_lease=1)) == Fraction(1_000_000, 3_600)
