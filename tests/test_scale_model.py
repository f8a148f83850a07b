"""bench/scale's arithmetic (bench/scale/model.py, a pure function): exact figures for a fleet under
the settlement models before and after cumulative receipts, and the verdict against the target."""

from __future__ import annotations

import importlib.util
import sys
from fractions import Fraction
from pathlib import Path

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
