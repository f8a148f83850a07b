"""Which shares the settlement loop settles on its regular pass (`Settlement.due`): a share once its
newest receipt runs the configured interval past its last settlement and is worth the minimum
amount, any share whose lease's escrow needs it, and none the ledger does not know yet."""

from __future__ import annotations

from solders.pubkey import Pubkey

from coordinator.db.usage import PendingReceipt
from coordinator.fleet import Fleet
from coordinator.leader import Fence
from coordinator.loops.settlement import Settlement, unpaid
from coordinator.metrics import Metrics
from coordinator.settlement import SignedUsage
from gpunet.usage import Receipt

PRICE = 3_600_000  # per GPU-hour: 1,000 base units per GPU-second
LEASE, OTHER = Pubkey.new_unique(), Pubkey.new_unique()


def pending(
    lease: Pubkey, through: int, gpu_seconds: int, *, settled_until: int = 0, escrow_left: int = 10**12
) -> PendingReceipt:
    usage = SignedUsage(lease, Pubkey.new_unique(), Receipt(1, gpu_seconds, through), bytes(64))
    return PendingReceipt(usage, PRICE, settled_until, 0, 0, escrow_left)


def loop(interval: float = 3_600, min_amount: int = 10_000) -> Settlement:
    return Settlement(
        None,  # type: ignore[arg-type]  # `due` reads no database
        None,  # type: ignore[arg-type]
        Fleet(),
        started_at=0,
        reconnect_grace_seconds=0,
        interval_seconds=interval,
        min_amount=min_amount,
        fence=Fence(None, "test", 0, lambda: False, Metrics()),  # type: ignore[arg-type]  # `due` decides nothing
    )


def test_a_share_is_due_once_its_receipt_runs_an_interval_past_its_settlement_and_is_worth_it() -> None:
    early = pending(LEASE, through=3_599, gpu_seconds=8 * 3_599)
    ripe = pending(LEASE, through=3_600, gpu_seconds=8 * 3_600)
    petty = pending(OTHER, through=7_200, gpu_seconds=9)  # 9,000 units: under the minimum
    assert unpaid(ripe) == 8 * 3_600 * 1_000
    assert loop().due([early, ripe, petty], now=10_000) == [ripe]
    # control: with no minimum the petty one goes too; with a short interval the early one
    assert loop(min_amount=0).due([early, ripe, petty], now=10_000) == [ripe, petty]
    assert loop(interval=60).due([early, ripe, petty], now=10_000) == [early, ripe]


def test_the_interval_counts_to_the_clock_not_past_it() -> None:
    ahead = pending(LEASE, through=5_000, gpu_seconds=8 * 5_000)  # a node whose clock runs ahead
    assert loop().due([ahead], now=3_000) == []
    assert loop().due([ahead], now=3_600) == [ahead]


def test_a_lease_whose_unpaid_usage_reaches_half_its_escrow_is_settled_at_once() -> None:
    # 60 GPU-seconds unpaid (60,000 units) on each of two shares of one lease: 120,000 owed
    calm = [pending(LEASE, through=60, gpu_seconds=60, escrow_left=300_000) for _ in range(2)]
    assert loop().due(calm, now=60) == []  # under half of the 300,000 left: the interval decides
    needy = [pending(LEASE, through=60, gpu_seconds=60, escrow_left=200_000) for _ in range(2)]
    assert loop().due(needy, now=60) == needy  # half of the 200,000 left or more: settled at once


def test_a_share_the_ledger_does_not_know_yet_waits() -> None:
    unknown = PendingReceipt(
        SignedUsage(LEASE, Pubkey.new_unique(), Receipt(1, 8 * 7_200, 7_200), bytes(64)), None, None, None, None, None
    )
    assert unpaid(unknown) is None
    assert loop(interval=0, min_amount=0).due([unknown], now=10_000) == []
