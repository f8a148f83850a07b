"""The arithmetic of bench/scale (pure, exact: fractions, no I/O): what settling a fleet costs the
chain per block and per account, for one settlement model. bench/scale/scale.py prints it; the
unit test (tests/test_scale_model.py) checks its numbers.

A settlement transaction's cost is counted as Agave's cost model counts it for block packing
(cost-model/src/block_cost_limits.rs): its executed compute units (bench/cu, SBF build), 720 per
transaction signature, 2,280 per Ed25519 precompile signature and 300 per write-locked account.
Every account a transaction write-locks is charged that whole cost against its per-block write
limit. Who writes what is data (`Writable`), so the model is corrected by editing a set."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from fractions import Fraction

SIGNATURE_CU = 720  # Agave: COMPUTE_UNIT_TO_US_RATIO (30) x 24
ED25519_VERIFY_CU = 2_280  # 30 x 76, per precompile signature
WRITE_LOCK_CU = 300  # 30 x 10, per write-locked account
LAMPORTS_PER_SOL = 1_000_000_000
SECONDS_PER_DAY = 86_400


class Scope(StrEnum):
    """How many of an account there are, which sets how many settlements write each one."""

    GLOBAL = "one for all of gpunet"  # the treasury; a single fee payer
    PAYER_POOL = "one of the fee-payer pool"  # round robin: 1/pool of the settlements
    PROVIDER = "one per provider"  # the largest provider's share of the nodes
    LEASE = "one per lease"  # the shares of one lease (its nodes)


@dataclass(frozen=True)
class Limits:
    block_cu: int
    account_cu: int  # the most CU that may write one account in a block
    transaction_bytes: int
    lamports_per_signature: int
    slot_seconds: Fraction


@dataclass(frozen=True)
class Fleet:
    gpus: int
    gpus_per_node: int = 8
    largest_provider_share: Fraction = Fraction(1, 10)  # of all nodes, behind one provider
    nodes_per_lease: int = 1  # a lease's shares, settled apart (up to MAX_LEASE_NODES)

    @property
    def nodes(self) -> int:
        return -(-self.gpus // self.gpus_per_node)


@dataclass(frozen=True)
class Settlement:
    """One settlement model: how often each node's share settles, what one transaction carries,
    what it costs and what it writes (account -> its scope)."""

    name: str
    settle_every_seconds: int  # per share
    metering_tick_seconds: int  # a node signs a receipt (or report) this often: off chain unless it settles
    settle_cu: int  # executed CU of one settlement (bench/cu: settle_usage with its Ed25519 check)
    signatures: int  # transaction signatures (fee payer, attester when another key)
    ed25519_signatures: int  # the node's signature, checked by the precompile (charged like a signature)
    writable: dict[str, Scope] = field(default_factory=dict)
    fee_payers: int = 1  # the pool's size, for PAYER_POOL accounts
    reports_per_transaction: int = 1

    @property
    def transaction_cu(self) -> int:
        """The block cost of one settlement transaction (Agave's cost model, see the module doc)."""
        r = self.reports_per_transaction
        return (
            self.settle_cu * r
            + SIGNATURE_CU * self.signatures
            + ED25519_VERIFY_CU * self.ed25519_signatures * r
            + WRITE_LOCK_CU * len(self.writable)
        )


@dataclass(frozen=True)
class Figures:
    transactions_per_second: Fraction
    cu_per_block: Fraction
    account_cu_per_block: dict[str, Fraction]  # each writable account's CU in one block (the hottest of its kind)
    lamports_per_gpu_day: Fraction
    receipts_per_second: Fraction  # signed by the nodes, off chain

    @property
    def hottest(self) -> tuple[str, Fraction]:
        return max(self.account_cu_per_block.items(), key=lambda kv: kv[1])


def figures(model: Settlement, fleet: Fleet, limits: Limits) -> Figures:
    """What settling `fleet` under `model` costs, per second, per block and per GPU-day (exact)."""
    settlements_per_second = Fraction(fleet.nodes, model.settle_every_seconds)
    tx_per_second = settlements_per_second / model.reports_per_transaction
    tx_per_block = tx_per_second * limits.slot_seconds
    cost = model.transaction_cu
    writers = {
        Scope.GLOBAL: tx_per_block,
        Scope.PAYER_POOL: tx_per_block / model.fee_payers,
        Scope.PROVIDER: tx_per_block * fleet.largest_provider_share,
        Scope.LEASE: Fraction(fleet.nodes_per_lease, model.settle_every_seconds)
        * limits.slot_seconds
        / model.reports_per_transaction,
    }
    per_account = {account: writers[scope] * cost for account, scope in model.writable.items()}
    signatures = model.signatures + model.ed25519_signatures * model.reports_per_transaction
    tx_per_gpu_day = Fraction(SECONDS_PER_DAY, model.settle_every_seconds) / fleet.gpus_per_node
    tx_per_gpu_day /= model.reports_per_transaction
    return Figures(
        transactions_per_second=tx_per_second,
        cu_per_block=tx_per_block * cost,
        account_cu_per_block=per_account,
        lamports_per_gpu_day=tx_per_gpu_day * signatures * limits.lamports_per_signature,
        receipts_per_second=Fraction(fleet.nodes, model.metering_tick_seconds),
    )


@dataclass(frozen=True)
class Verdict:
    block_share: Fraction  # gpunet's CU per block / the block limit
    account_share: Fraction  # the hottest account's CU per block / the per-account limit
    passed: bool


def verdict(f: Figures, limits: Limits, target: Fraction = Fraction(5, 100)) -> Verdict:
    """The target: no account above `target` of its per-block write limit and all of gpunet under
    `target` of a block."""
    block = f.cu_per_block / limits.block_cu
    account = f.hottest[1] / limits.account_cu
    return Verdict(block, account, block <= target and account <= target)
