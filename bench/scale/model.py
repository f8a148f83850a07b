"""The arithmetic of bench/scale (pure, exact: fractions, no I/O): what a fleet's transactions cost the
chain per block and per written account, for one settlement model alone or for several kinds of
transaction together (settlement and a lease's own transactions: open, assign, close, finalize).
bench/scale/scale.py prints it; the unit test (tests/test_scale_model.py) checks its numbers.

A transaction's cost is counted as Agave's cost model counts it for block packing
(cost-model/src/block_cost_limits.rs): its executed compute units (bench/cu, SBF build), 720 per
transaction signature, 2,280 per Ed25519 precompile signature and 300 per write-locked account.
Every account a transaction write-locks is charged that whole cost against its per-block write
limit. Each kind of transaction is a `Flow`: how often the fleet sends it, what it costs and which
accounts it writes, each with its `Scope` (how many such accounts the writes spread over). An
account's CU per block is the sum over the flows that write it of (its writes per block) x (that
flow's block cost); flows name the accounts they share alike (one name, one account: `LEASE`,
`POOL_PAYER`, ...). Who writes what is data (`writable`), so the model is corrected by editing a set."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from fractions import Fraction

SIGNATURE_CU = 720  # Agave: COMPUTE_UNIT_TO_US_RATIO (30) x 24
ED25519_VERIFY_CU = 2_280  # 30 x 76, per precompile signature
WRITE_LOCK_CU = 300  # 30 x 10, per write-locked account
LAMPORTS_PER_SOL = 1_000_000_000
SECONDS_PER_DAY = 86_400
MAX_LEASE_NODES = 8  # programs/gpunet/src/state/lease.rs

# Accounts more than one flow writes, named alike wherever they are written (their CU adds up).
TREASURY = "treasury token account"  # config.treasury: one for all of gpunet
POOL_PAYER = "fee payer (one of the pool)"  # the coordinator's GPUNET_FEE_PAYERS, round robin
LEASE = "lease"
VAULT = "lease vault"
NODE = "node"  # each of a lease's nodes
CLIENT = "client"  # the client's wallet: pays open_lease's fee and rents, gets the vault's rent back
CLIENT_TOKENS = "client token account"
PROVIDER_TOKENS = "provider token account"


class Scope(StrEnum):
    """How many of an account there are, which sets how many transactions write each one."""

    GLOBAL = "one for all of gpunet"  # the treasury; a single fee payer
    PAYER_POOL = "one of the fee-payer pool"  # round robin: 1/pool of the transactions
    PROVIDER = "one per provider"  # the largest provider's share of the nodes
    LEASE = "one per lease"  # the shares of one lease (its nodes)
    NODE = "one per node"  # written by each lease it holds (GPUs per node / GPUs per lease at once)
    CLIENT = "one per client"  # one client per lease (assumed: no client holds two leases at once)


@dataclass(frozen=True)
class Limits:
    block_cu: int
    account_cu: int  # the most CU that may write one account in a block
    transaction_bytes: int
    lamports_per_signature: int
    slot_seconds: Fraction


@dataclass(frozen=True)
class Fleet:
    """Every GPU leased, leases back to back: as one ends its GPUs are leased again (so each node
    sees gpus_per_node / gpus_per_lease leases, at least one, open, assigned, closed and finalized
    every lease_seconds)."""

    gpus: int
    gpus_per_node: int = 8
    largest_provider_share: Fraction = Fraction(1, 10)  # of all nodes, behind one provider
    gpus_per_lease: int = 8  # one node; more: whole nodes (up to MAX_LEASE_NODES), fewer: a node's leases
    lease_seconds: int = 3_600

    @property
    def nodes(self) -> int:
        return -(-self.gpus // self.gpus_per_node)

    @property
    def nodes_per_lease(self) -> int:
        """A lease's nodes: its shares, settled apart."""
        return -(-self.gpus_per_lease // self.gpus_per_node)

    @property
    def leases(self) -> Fraction:
        """Leases open at any time."""
        return Fraction(self.gpus, self.gpus_per_lease)

    @property
    def shares(self) -> Fraction:
        """(lease, node) pairs open at any time: what settles, each on its own."""
        return self.leases * self.nodes_per_lease

    @property
    def clients(self) -> Fraction:
        """One client per lease (an assumption: a client with k leases at once is written k times as often)."""
        return self.leases


Rate = Callable[[Fleet], Fraction]  # a flow's transactions per second, for the whole fleet


def per_lease(fleet: Fleet) -> Fraction:
    """Once per lease."""
    return fleet.leases / fleet.lease_seconds


def per_share(every_seconds: int, per_transaction: int = 1) -> Rate:
    """Each share every `every_seconds` and at its lease's end (ceil(lease / every) times a lease),
    `per_transaction` of them in one transaction."""

    def rate(fleet: Fleet) -> Fraction:
        times = -(-fleet.lease_seconds // every_seconds)
        return fleet.shares * Fraction(times, fleet.lease_seconds) / per_transaction

    return rate


@dataclass(frozen=True)
class Flow:
    """One kind of transaction: how often the fleet sends it, what it costs and what it writes
    (account -> its scope; `each`: how many accounts of one name a transaction writes, where more
    than one: a lease's nodes)."""

    name: str
    rate: Rate
    executed_cu: int  # bench/cu, SBF build, every instruction of the transaction
    signatures: int  # transaction signatures (fee payer, attester when another key)
    ed25519_signatures: int = 0  # signatures checked by the Ed25519 precompile
    writable: dict[str, Scope] = field(default_factory=dict)
    each: dict[str, int] = field(default_factory=dict)
    fee_payers: int = 1  # the pool's size, for PAYER_POOL accounts
    cadence: str = ""  # how often, in words

    @property
    def write_locks(self) -> int:
        return sum(self.each.get(account, 1) for account in self.writable)

    @property
    def transaction_cu(self) -> int:
        """The block cost of one transaction (Agave's cost model, see the module doc)."""
        return (
            self.executed_cu
            + SIGNATURE_CU * self.signatures
            + ED25519_VERIFY_CU * self.ed25519_signatures
            + WRITE_LOCK_CU * self.write_locks
        )

    def writes_per_second(self, fleet: Fleet) -> dict[str, Fraction]:
        """Transactions per second writing each account (of PROVIDER accounts, the largest provider's)."""
        rate = self.rate(fleet)
        one = {
            Scope.GLOBAL: rate,
            Scope.PAYER_POOL: rate / self.fee_payers,
            Scope.PROVIDER: rate * fleet.largest_provider_share,
            Scope.LEASE: rate / fleet.leases,
            Scope.NODE: rate / fleet.nodes,
            Scope.CLIENT: rate / fleet.clients,
        }
        return {account: one[scope] * self.each.get(account, 1) for account, scope in self.writable.items()}


@dataclass(frozen=True)
class Load:
    """What some flows cost the chain together."""

    transactions_per_second: Fraction
    cu_per_block: Fraction
    account_cu_per_block: dict[str, Fraction]  # each written account's CU in one block (the hottest of its kind)

    @property
    def hottest(self) -> tuple[str, Fraction]:
        return max(self.account_cu_per_block.items(), key=lambda kv: kv[1])


def load(flows: Sequence[Flow], fleet: Fleet, limits: Limits) -> Load:
    """The flows' transactions, CU per block and each account's CU per block, summed over the flows
    (exact). An account written by several flows must have the same scope (and pool) in each."""
    tx_per_second = Fraction(0)
    cu_per_block = Fraction(0)
    per_account: dict[str, Fraction] = {}
    kinds: dict[str, tuple[Scope, int]] = {}
    for flow in flows:
        rate = flow.rate(fleet)
        cost = flow.transaction_cu
        tx_per_second += rate
        cu_per_block += rate * limits.slot_seconds * cost
        for account, writes in flow.writes_per_second(fleet).items():
            scope = flow.writable[account]
            kind = (scope, flow.fee_payers if scope is Scope.PAYER_POOL else 1)
            if kinds.setdefault(account, kind) != kind:
                raise ValueError(f"{account!r} is {kinds[account]} in one flow and {kind} in {flow.name}")
            per_account[account] = per_account.get(account, Fraction(0)) + writes * limits.slot_seconds * cost
    return Load(tx_per_second, cu_per_block, per_account)


@dataclass(frozen=True)
class Settlement:
    """One settlement model: how often each share (a lease's node) settles, what one transaction
    carries, what it costs and what it writes (account -> its scope)."""

    name: str
    settle_every_seconds: int  # per share
    metering_tick_seconds: int  # a node signs a receipt (or report) this often: off chain unless it settles
    settle_cu: int  # executed CU of one settlement (bench/cu: settle_usage with its Ed25519 check)
    signatures: int  # transaction signatures (fee payer, attester when another key)
    ed25519_signatures: int  # the node's signature, checked by the precompile (charged like a signature)
    writable: dict[str, Scope] = field(default_factory=dict)
    fee_payers: int = 1  # the pool's size, for PAYER_POOL accounts
    reports_per_transaction: int = 1

    def flow(self) -> Flow:
        r = self.reports_per_transaction
        return Flow(
            f"settle_usage ({self.name})",
            per_share(self.settle_every_seconds, r),
            self.settle_cu * r,
            self.signatures,
            self.ed25519_signatures * r,
            self.writable,
            fee_payers=self.fee_payers,
            cadence=f"each share every {self.settle_every_seconds:,} s and at its lease's end",
        )

    @property
    def transaction_cu(self) -> int:
        """The block cost of one settlement transaction (Agave's cost model, see the module doc)."""
        return self.flow().transaction_cu


@dataclass(frozen=True)
class Figures(Load):
    """A settlement model's load, with its fees and the receipts the nodes sign off chain."""

    lamports_per_gpu_day: Fraction
    receipts_per_second: Fraction  # signed by the nodes, off chain


def figures(model: Settlement, fleet: Fleet, limits: Limits) -> Figures:
    """What settling `fleet` under `model` costs, per second, per block and per GPU-day (exact)."""
    flow = model.flow()
    settling = load([flow], fleet, limits)
    tx_per_gpu_day = settling.transactions_per_second * SECONDS_PER_DAY / fleet.gpus
    signatures = flow.signatures + flow.ed25519_signatures
    return Figures(
        transactions_per_second=settling.transactions_per_second,
        cu_per_block=settling.cu_per_block,
        account_cu_per_block=settling.account_cu_per_block,
        lamports_per_gpu_day=tx_per_gpu_day * signatures * limits.lamports_per_signature,
        receipts_per_second=fleet.shares / model.metering_tick_seconds,
    )


@dataclass(frozen=True)
class LeaseCU:
    """Executed CU of a lease's own instructions on the SBF build (bench/cu, as docs/program/index.md's table of
    compute units records them); assign_lease and close_lease at 1 node and at MAX_LEASE_NODES."""

    open_lease: int = 48_555  # the median over 3 keys (48,555-51,555: the bump seed search)
    assign_lease: tuple[int, int] = (23_483, 55_467)
    close_lease: tuple[int, int] = (34_260, 52_299)
    finalize_lease: int = 37_867


def by_nodes(measured: tuple[int, int], nodes: int) -> int:
    """An instruction's CU for a lease of `nodes` nodes from bench/cu's figures at 1 and at
    MAX_LEASE_NODES: exact at those two, between them on the straight line through both, rounded up."""
    if not 1 <= nodes <= MAX_LEASE_NODES:
        raise ValueError(f"a lease has 1 to {MAX_LEASE_NODES} nodes, not {nodes}")
    one, most = measured
    return one + -(-(most - one) * (nodes - 1) // (MAX_LEASE_NODES - 1))


def lifecycle(fleet: Fleet, fee_payers: int, cu: LeaseCU | None = None) -> list[Flow]:
    """A lease's own transactions besides its settlements, once per lease each, with the accounts
    each writes (docs/program/index.md's "What each instruction writes" table, plus the fee payer): the client
    opens the lease, paying its fee and the new accounts' rent; the coordinator assigns it, closes
    it at its end and finalizes it, each paid by a fee payer of its pool with the attester co-signing
    (2 signatures). The coordinator's transactions carry no Ed25519 check. `cu`: docs/program/index.md's figures
    unless given."""
    cu = cu or LeaseCU()
    n = fleet.nodes_per_lease
    nodes = {NODE: n}
    once = "once per lease"
    return [
        Flow("open_lease", per_lease, cu.open_lease, 1, 0, {
            CLIENT: Scope.CLIENT, LEASE: Scope.LEASE, VAULT: Scope.LEASE, CLIENT_TOKENS: Scope.CLIENT,
        }, cadence=f"{once}, sent by its client"),
        Flow("assign_lease", per_lease, by_nodes(cu.assign_lease, n), 2, 0, {
            POOL_PAYER: Scope.PAYER_POOL, LEASE: Scope.LEASE, NODE: Scope.NODE,
        }, nodes, fee_payers, f"{once}, sent by the coordinator"),
        Flow("close_lease", per_lease, by_nodes(cu.close_lease, n), 2, 0, {
            POOL_PAYER: Scope.PAYER_POOL, LEASE: Scope.LEASE, NODE: Scope.NODE, VAULT: Scope.LEASE,
            CLIENT_TOKENS: Scope.CLIENT,
        }, nodes, fee_payers, f"{once}, at its end, sent by the coordinator"),
        Flow("finalize_lease", per_lease, cu.finalize_lease, 2, 0, {
            POOL_PAYER: Scope.PAYER_POOL, LEASE: Scope.LEASE, VAULT: Scope.LEASE, CLIENT: Scope.CLIENT,
            CLIENT_TOKENS: Scope.CLIENT, TREASURY: Scope.GLOBAL,
        }, fee_payers=fee_payers, cadence=f"{once}, sent by the coordinator"),
    ]  # fmt: skip


@dataclass(frozen=True)
class Verdict:
    block_share: Fraction  # gpunet's CU per block / the block limit
    account_share: Fraction  # the hottest account's CU per block / the per-account limit
    passed: bool


def verdict(f: Load, limits: Limits, target: Fraction = Fraction(5, 100)) -> Verdict:
    """The target: no account above `target` of its per-block write limit and all of gpunet under
    `target` of a block."""
    block = f.cu_per_block / limits.block_cu
    account = f.hottest[1] / limits.account_cu
    return Verdict(block, account, block <= target and account <= target)
