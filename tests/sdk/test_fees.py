"""Transactions that land (gpunet.fees): every transaction gpunet sends carries a compute-unit limit
from its own simulation and a priority fee from what recent transactions paid to write the same
accounts (gpunet-localnet answers getRecentPrioritizationFees from the transactions it landed); a
transaction the program refuses in simulation is refused with nothing sent."""

from __future__ import annotations

import based58
import pytest
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solders.compute_budget import ID as COMPUTE_BUDGET
from solders.compute_budget import set_compute_unit_price
from solders.keypair import Keypair
from solders.message import Message
from solders.pubkey import Pubkey
from solders.system_program import TransferParams, transfer
from solders.transaction import Transaction

from gpunet import instructions as ix
from gpunet.client import TransactionFailed, send_and_confirm
from gpunet.fees import MAX_COMPUTE_UNITS, Budget, FeeError, FeePolicy, with_budget
from gpunet.testbed import funded_wallet


def test_the_bid_is_a_capped_percentile_and_the_limit_a_margin_over_the_use(monkeypatch) -> None:
    policy = FeePolicy(percentile=75, max_micro_lamports=5_000)
    assert policy.price([]) == 0
    assert policy.price([0, 10, 20, 30]) == 20  # nearest rank: the 3rd of 4
    assert policy.price([0, 0, 0, 1_000_000]) == 0
    assert FeePolicy(percentile=100, max_micro_lamports=5_000).price([1, 9_999]) == 5_000  # capped
    assert FeePolicy(max_micro_lamports=0).price([7, 8]) == 0  # off
    assert policy.limit(44_000) == 53_800 and policy.limit(10**9) == MAX_COMPUTE_UNITS
    assert Budget(200_000, 1_000_000).priority_fee_lamports == 200_000
    assert Budget(3, 1).priority_fee_lamports == 1  # rounded up: never less than it costs
    head = with_budget([], Budget(50_000, 7))
    assert [i.program_id for i in head] == [COMPUTE_BUDGET, COMPUTE_BUDGET] and len(with_budget([])) == 1
    for bad in ("-1", "101", "lots"):
        monkeypatch.setenv("GPUNET_PRIORITY_FEE_PERCENTILE", bad)
        with pytest.raises(FeeError):
            FeePolicy.from_env()


def _budget_of(raw: dict) -> tuple[int, int]:
    """(compute-unit limit, price) set by a landed transaction (getTransaction, json encoding)."""
    message = raw["transaction"]["message"]
    keys, limit, price = message["accountKeys"], None, 0
    for instruction in message["instructions"]:
        if keys[instruction["programIdIndex"]] != str(COMPUTE_BUDGET):
            continue
        data = based58.b58decode(instruction["data"].encode())
        if data[0] == 2:
            limit = int.from_bytes(data[1:5], "little")
        elif data[0] == 3:
            price = int.from_bytes(data[1:9], "little")
    assert limit is not None, "no compute-unit limit"
    return limit, price


@pytest.fixture
def one_slot_node(start_node):
    """A node whose slots outlast the test: every transaction here lands in one slot, so the slot's
    lowest price is the funding transfers' 0. (With 100 ms slots a priced transaction is often alone
    in its slot; Agave then reports its price for every account, as the slot's floor, and a control
    "nobody bid for this account" would fail by chance.)"""
    return start_node(slot_ms=60_000)


async def test_a_transaction_bids_what_writers_of_its_accounts_paid_and_a_limit_from_its_use(one_slot_node) -> None:
    node = one_slot_node
    async with AsyncClient(node.url, commitment=Confirmed) as chain:
        busy, payer, other = [await funded_wallet(chain) for _ in range(3)]
        target = Keypair().pubkey()
        # Someone paid 5,000 micro-lamports per CU to write `target` (built by hand, as a wallet would).
        blockhash = (await chain.get_latest_blockhash()).value.blockhash
        paid = [set_compute_unit_price(5_000), transfer(TransferParams(from_pubkey=busy.pubkey(), to_pubkey=target,
                                                                        lamports=10**6))]  # fmt: skip
        tx = Transaction([busy], Message.new_with_blockhash(paid, busy.pubkey(), blockhash), blockhash)
        await chain.confirm_transaction((await chain.send_raw_transaction(bytes(tx))).value)

        fees = node.call("getRecentPrioritizationFees", [[str(target)]])["result"]
        assert [f["prioritizationFee"] for f in fees] == [5_000]  # one slot
        untouched = node.call("getRecentPrioritizationFees", [[str(Keypair().pubkey())]])["result"]
        assert all(f["prioritizationFee"] == 0 for f in untouched)  # the control: nobody bid for it
        assert "max 128" in node.call("getRecentPrioritizationFees", [[str(target)] * 129])["error"]["message"]

        bids = []
        to_target = [transfer(TransferParams(from_pubkey=payer.pubkey(), to_pubkey=target, lamports=10**6))]
        sig = await send_and_confirm(chain, payer, to_target, fees=FeePolicy(percentile=100), on_budget=bids.append)
        landed = node.call("getTransaction", [str(sig), {"encoding": "json"}])["result"]
        limit, price = _budget_of(landed)
        assert price == 5_000 and bids == [Budget(limit, 5_000)]
        assert landed["meta"]["computeUnitsConsumed"] <= limit <= landed["meta"]["computeUnitsConsumed"] * 1.2 + 1_000
        # Writing nothing anyone bid for: no priority fee, still a limit from its use.
        elsewhere = [
            transfer(TransferParams(from_pubkey=other.pubkey(), to_pubkey=Pubkey.new_unique(), lamports=10**6))
        ]
        sig = await send_and_confirm(chain, other, elsewhere, fees=FeePolicy(percentile=100))
        assert _budget_of(node.call("getTransaction", [str(sig), {"encoding": "json"}])["result"])[1] == 0

        # A transaction the program refuses is refused in simulation, with its program error, nothing sent.
        count = node.call("getTransactionCount")["result"]
        with pytest.raises(TransactionFailed) as refused:
            await send_and_confirm(chain, payer, [ix.update_config(payer.pubkey(), _params(payer))])
        assert node.call("getTransactionCount")["result"] == count
        assert refused.value.signature is None and "AccountNotInitialized" in str(refused.value), str(refused.value)


def _params(payer: Keypair) -> ix.ConfigParams:
    return ix.ConfigParams(treasury=payer.pubkey(), protocol_fee_bps=0, min_stake_per_gpu=1, unbonding_seconds=0,
                           usage_period_seconds=60, jail_seconds=0, slash_bps=(0, 0, 0),
                           slash_client_share_bps=0)  # fmt: skip
