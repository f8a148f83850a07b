"""The explorer's settlement check (coordinator/web/explorer/rule.py) without a chain: the SDK's copy
of the program's rule (gpunet.amounts.settle) agrees with math.rs's own cases, and a settlement whose
amount, fee or payout is not what the rule gives is shown as a mismatch, beside its honest twin."""

from __future__ import annotations

from typing import Any

import pytest

from coordinator.web.explorer.rule import FeeHistory, ShareBook, check_settlement
from gpunet.amounts import IO, AmountError, SettlementSplit, settle

U64_MAX = 2**64 - 1


def test_the_sdk_rule_is_the_programs() -> None:
    # programs/gpunet/src/math.rs settlement_conserves_and_caps_at_escrow
    assert settle(3_600, 0, 100, 500, U64_MAX) == SettlementSplit(100, 95, 5)
    assert settle(3_600, 0, 100, 500, 40) == SettlementSplit(40, 38, 2)  # capped by the escrow left
    assert settle(3_600, 0, 19, 500, U64_MAX) == SettlementSplit(19, 18, 1)  # the fee rounds up
    assert settle(3_600, 0, 100, 500, 0) == SettlementSplit(0, 0, 0)
    # cumulative rounding: 1 GPU-second at a time pays what the whole would (math.rs cumulative test)
    paid = sum(settle(1_000, settled, 1, 0, U64_MAX).amount for settled in range(3_600))
    assert paid == settle(1_000, 0, 3_600, 0, U64_MAX).amount == 1_000
    with pytest.raises(AmountError):
        settle(3_600, 0, 1, 10_001, U64_MAX)


def _settled(
    gpu_seconds: int, amount: int, fee: int, payout: int, escrow_left: int, epoch: int = 1, to_pool: int = 0
) -> dict[str, Any]:
    return {
        "to_pool": to_pool,
        "node": "N",
        "epoch": epoch,
        "gpu_seconds": gpu_seconds,
        "amount": amount,
        "fee": fee,
        "payout": payout,
        "escrow_left": escrow_left,
    }


PRICE = 360 * IO  # 0.1 IO a GPU-second


def test_an_honest_settlement_is_checked_and_a_tampered_one_is_a_mismatch() -> None:
    honest = _settled(12, 1_200_000, 60_000, 1_140_000, 5 * IO)
    assert check_settlement(honest, PRICE, 0, 500).status == "checked"
    for field, value in (("fee", 59_999), ("payout", 1_140_001), ("amount", 1_200_001), ("gpu_seconds", 13)):
        tampered = check_settlement({**honest, field: value}, PRICE, 0, 500)
        assert tampered.status == "mismatch", field
    # an amount under the cost is right only where the escrow ran out (left 0 after it)
    assert check_settlement(_settled(12, 1_000_000, 50_000, 950_000, 0), PRICE, 0, 500).status == "checked"
    assert check_settlement(_settled(12, 1_000_000, 50_000, 950_000, 1), PRICE, 0, 500).status == "mismatch"
    # the fee in force, not today's
    assert check_settlement(honest, PRICE, 0, 400).status == "mismatch"
    # a pooled supplier's delegators get a part of the payout, never more than all of it
    assert check_settlement({**honest, "to_pool": 1_140_000}, PRICE, 0, 500).status == "checked"
    over = check_settlement({**honest, "to_pool": 1_140_001}, PRICE, 0, 500)
    assert (over.status, over.reason) == ("mismatch", "to_pool 1140001 exceeds the payout 1140000")


def test_a_settlement_without_its_inputs_is_never_checked() -> None:
    honest = _settled(12, 1_200_000, 60_000, 1_140_000, 5 * IO)
    assert check_settlement(honest, None, 0, 500).status == "unknown"
    assert check_settlement(honest, PRICE, 0, None).status == "unknown"
    book = ShareBook()
    assert book.settle(honest, 500).status == "unknown"  # no assignment of (N, 1) seen


def test_shares_count_from_their_assignment_and_fees_from_the_change_in_force() -> None:
    book = ShareBook()
    book.assigned({"node": "N", "epoch": 1, "price_per_gpu_hour": 1_000})
    # 1 GPU-second at 1,000/h is 0 (rounded down); the second makes 2/3600*1000 = 0; at 4 s: 1
    assert book.settle(_settled(1, 0, 0, 0, IO), 500).status == "checked"
    assert book.settle(_settled(3, 1, 1, 0, IO), 500).status == "checked"  # cumulative: cost(4) - cost(1)
    book.assigned({"node": "N", "epoch": 2, "price_per_gpu_hour": 1_000})  # moved back: counts from 0
    assert book.settle(_settled(3, 0, 0, 0, IO, epoch=2), 500).status == "checked"
    fees = FeeHistory([(10, 500), (50, 300)])
    assert (fees.at(5), fees.at(11), fees.at(50), fees.at(51)) == (None, 500, 500, 300)
