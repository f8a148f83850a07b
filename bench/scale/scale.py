"""Benchmark (not a test): what settling a fleet of 10 k, 100 k and 1 M GPUs (8 per node) costs the
chain, before and after cumulative receipts, and what the current design ("after") costs with a
lease's own transactions added (open_lease, assign_lease, close_lease, finalize_lease), against
mainnet's limits (cited in the output).

From bench/cu's CU on the SBF build (its output read from a file, run here, or given; else the
docs/program/index.md's table) and the accounts each transaction writes (bench/scale/model.py, as data), for a
metering tick and a settlement cadence it prints settlement transactions per second, CU per block,
the most CU any one account takes per block, and the base fees in SOL per GPU-day, with PASS/FAIL
against the target: 1 M GPUs settled hourly with no account above 5 % of its per-block write limit
and all of gpunet under 5 % of a block.

  before:   one settle_usage per share (a lease's node) per 60 s usage period, each writing the
            treasury (one for all of gpunet: the hot account), the provider and its token account,
            the lease and its vault, with the attester as the one fee payer;
  after:    cumulative receipts signed every metering tick, settled hourly, each settlement writing
            only the lease, its vault and the provider's token account; the fees spread over the
            coordinator's fee-payer pool (the attester co-signs: one more signature);
  combined: "after" and, once per lease, open_lease (the client), assign_lease, close_lease and
            finalize_lease (the coordinator: a payer of the pool and the attester), every GPU leased,
            leases back to back (--lease-seconds, default an hour; --gpus-per-lease, default 8: one
            node), one client per lease. finalize_lease writes the treasury: every lease, one account.

    .venv/bin/python bench/scale/scale.py                          # bench/cu's figures, see --cu
    .venv/bin/python bench/scale/scale.py --cu cu.txt               # bench/cu's output, saved
    .venv/bin/python bench/scale/scale.py --run-cu                  # runs bench/cu (needs scripts/build-sbf)
    .venv/bin/python bench/scale/scale.py --settle-cu 47830 --settle-cu-after 37137 --fee-payers 16
    .venv/bin/python bench/scale/scale.py --gpus-per-lease 1        # single-GPU leases, 8 to a node
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from model import (  # noqa: E402
    CLIENT_TOKENS,
    LEASE,
    POOL_PAYER,
    PROVIDER_TOKENS,
    TREASURY,
    VAULT,
    Fleet,
    Flow,
    LeaseCU,
    Limits,
    Load,
    Scope,
    Settlement,
    figures,
    lifecycle,
    load,
    verdict,
)
from solders.hash import Hash  # noqa: E402
from solders.message import Message  # noqa: E402
from solders.pubkey import Pubkey  # noqa: E402
from solders.transaction import Transaction  # noqa: E402

from gpunet import instructions as ix  # noqa: E402
from gpunet.fees import MAX_COMPUTE_UNITS, Budget, with_budget  # noqa: E402
from gpunet.usage import Receipt  # noqa: E402

FLEETS = (10_000, 100_000, 1_000_000)
TARGET = Fraction(5, 100)
# settle_usage on the SBF build (bench/cu): per-period reports before receipts (the last figure the
# README's table recorded for them), and the receipt settlement as docs/program/index.md's table records it now
# (used when bench/cu's output is neither given nor run). A lease's own instructions: model.LeaseCU.
BEFORE_SETTLE_CU = 47_830
README_SETTLE_CU = 37_137
LEASE_GPUS_SHOWN = (8, 1)  # the combined verdict at 1 M GPUs: leases of one node, and single-GPU leases

# Mainnet's limits, late 2026, with where each comes from.
LIMITS = {
    "current": Limits(60_000_000, 24_000_000, 1_232, 5_000, Fraction(2, 5)),
    "historical": Limits(60_000_000, 12_000_000, 1_232, 5_000, Fraction(2, 5)),
    "simd-0286": Limits(100_000_000, 40_000_000, 1_232, 5_000, Fraction(2, 5)),
}
SOURCES = """limits (mainnet, late 2026):
  block: 60,000,000 CU (SIMD-0256, feature raise_block_limits_to_60m, active; Agave
    cost-model/src/block_cost_limits.rs MAX_BLOCK_UNITS = MAX_BLOCK_UNITS_SIMD_0256). SIMD-0286 (100 M)
    has a feature gate (raise_block_limits_to_100m) that was not active as of August 2026
    (solana-improvement-documents issue #603, reading Agave at 3eeb5658: CostTrackerLimits::new(24_000_000,
    60_000_000, ...), scaled by 100/60 when the gate is on): --limits simd-0286 shows 100 M / 40 M.
  per account written: 24,000,000 CU = 40 % of the block (SIMD-0306, feature raise_account_cu_limit,
    Agave PR #7127); 12,000,000 before it (SIMD-0256's table; --limits historical).
  transaction: 1,232 bytes (PACKET_DATA_SIZE); base fee 5,000 lamports per signature, the Ed25519
    precompile's signatures included; slot 400 ms (2.5 blocks per second).
  block cost of a transaction (Agave's cost model): executed CU + 720 per signature + 2,280 per Ed25519
    precompile signature + 300 per write-locked account; each written account is charged all of it."""


def settle_cu_from(text: str) -> int:
    """settle_usage's CU from bench/cu's output (its per-instruction table)."""
    m = re.search(r"^settle_usage\b.*?\s(\d{4,})\s", text, re.MULTILINE)
    if not m:
        raise SystemExit("bench/scale: no settle_usage row in bench/cu's output")
    return int(m.group(1))


def lease_cu_from(text: str) -> LeaseCU:
    """open_lease, assign_lease, close_lease and finalize_lease's CU from bench/cu's output (its median)."""

    def row(label: str) -> int:
        m = re.search(rf"^{re.escape(label)} +(\d+) ", text, re.MULTILINE)
        if not m:
            raise SystemExit(f"bench/scale: no {label} row in bench/cu's output")
        return int(m.group(1))

    return LeaseCU(
        open_lease=row("open_lease"),
        assign_lease=(row("assign_lease (1 node)"), row("assign_lease (8 nodes)")),
        close_lease=(row("close_lease (1 node)"), row("close_lease (8 nodes)")),
        finalize_lease=row("finalize_lease"),
    )


def run_cu() -> str:
    out = subprocess.run(["cargo", "run", "-q", "-p", "gpunet", "--example", "cu"], cwd=ROOT, capture_output=True,
                         text=True)  # fmt: skip
    if out.returncode:
        raise SystemExit(f"bench/scale: bench/cu failed (build the SBF program first: scripts/build-sbf)\n{out.stderr}")
    return out.stdout


def transaction_bytes(distinct_payer: bool) -> int:
    """The wire size of one settlement transaction as the coordinator sends it (today's settle_usage with
    its Ed25519 instruction and a compute budget with a price), paid by the attester or by another key."""
    keys = [Pubkey.new_unique() for _ in range(7)]  # attester, lease, node key, authority, ...
    attester, lease, node_key, authority, tokens, payer, _ = keys
    receipt = Receipt(1, 8 * 3_600, 3_600)
    signed = receipt.signed_instruction(lease, node_key, bytes(64))
    settle = ix.settle_usage(attester, lease, node_key, authority, tokens, receipt, 8 * 3_600)
    instructions = with_budget([signed, settle], Budget(MAX_COMPUTE_UNITS, 1))
    message = Message.new_with_blockhash(instructions, payer if distinct_payer else attester, Hash.default())
    return len(bytes(Transaction.new_unsigned(message)))


def models(
    settle_cu: int, settle_cu_after: int, fee_payers: int, tick: int, period: int, every: int
) -> list[Settlement]:
    before = Settlement(
        "before",
        settle_every_seconds=period,
        metering_tick_seconds=period,  # a report per period, each one settled
        settle_cu=settle_cu,
        signatures=1,  # the attester signs and pays
        ed25519_signatures=1,
        writable={  # the treasury first: as hot as the attester, and no pool can spread it
            TREASURY: Scope.GLOBAL,
            "fee payer (the attester)": Scope.GLOBAL,
            "provider": Scope.PROVIDER,
            PROVIDER_TOKENS: Scope.PROVIDER,
            LEASE: Scope.LEASE,
            VAULT: Scope.LEASE,
        },
    )
    after = Settlement(
        "after",
        settle_every_seconds=every,
        metering_tick_seconds=tick,
        settle_cu=settle_cu_after,
        signatures=2,  # a payer of the pool, and the attester
        ed25519_signatures=1,
        writable={  # named as the lease's own transactions name them (model.py): their CU adds up
            POOL_PAYER: Scope.PAYER_POOL,
            PROVIDER_TOKENS: Scope.PROVIDER,
            LEASE: Scope.LEASE,
            VAULT: Scope.LEASE,
        },
        fee_payers=fee_payers,
    )
    return [before, after]


def _pct(x: Fraction) -> str:
    percent = float(x) * 100
    return f"{percent:.0f} %" if percent >= 100 else f"{percent:#.3g} %"


_target = f"{float(TARGET) * 100:g} %"


def _leases(gpus_per_lease: int, gpus_per_node: int = 8) -> str:
    if gpus_per_lease >= gpus_per_node:
        nodes = -(-gpus_per_lease // gpus_per_node)
        return f"{gpus_per_lease}-GPU leases ({nodes} node{'s' if nodes > 1 else ''})"
    return f"{gpus_per_lease}-GPU leases ({Fraction(gpus_per_node, gpus_per_lease)} a node)"


def _signers(flow: Flow) -> str:
    if flow.signatures == 1:
        return "1 signature (the client pays)"
    return f"{flow.signatures} signatures (a payer of the pool, and the attester)"


def _writers(flows: list[Flow], account: str) -> str:
    return ", ".join(flow.name.split(" ")[0] for flow in flows if account in flow.writable)


def _over(combined: Load, limits: Limits) -> list[str]:
    """Every account above the target, hottest first."""
    ranked = sorted(combined.account_cu_per_block.items(), key=lambda kv: -kv[1])
    return [f"{account} {_pct(cu / limits.account_cu)}" for account, cu in ranked if cu / limits.account_cu > TARGET]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cu", type=Path, help="bench/cu's output, saved to a file")
    p.add_argument("--run-cu", action="store_true", help="run bench/cu (needs target/deploy/gpunet.so)")
    p.add_argument("--settle-cu", type=int, help=f"a per-period settlement's CU (before; default {BEFORE_SETTLE_CU:,})")
    p.add_argument("--settle-cu-after", type=int, help="a receipt settlement's CU (default: bench/cu's figure)")
    p.add_argument("--fee-payers", type=int, default=8,
                   help="the coordinator's fee-payer pool (after; GPUNET_FEE_PAYERS, default 8)")  # fmt: skip
    p.add_argument("--tick", type=int, default=5, help="metering tick in seconds (after; off chain)")
    p.add_argument("--period", type=int, default=60, help="usage period in seconds (before)")
    p.add_argument("--settle-every", type=int, default=3_600, help="settlement cadence in seconds (after)")
    p.add_argument("--lease-seconds", type=int, default=3_600, help="how long each lease lasts (back to back)")
    p.add_argument("--gpus-per-lease", type=int, default=8,
                   help="GPUs per lease: 8 = one node; 1 = 8 leases to a node, each writing it; up to 64")  # fmt: skip
    p.add_argument("--provider-share", type=Fraction, default=Fraction(1, 10),
                   help="the largest provider's share of the nodes, e.g. 1/10")  # fmt: skip
    p.add_argument("--limits", choices=sorted(LIMITS), default="current")
    a = p.parse_args()
    if not 1 <= a.gpus_per_lease <= 64:
        p.error("--gpus-per-lease: 1 to 64 (8 nodes of 8 GPUs)")
    if a.fee_payers < 1:
        p.error("--fee-payers: at least 1 (the attester paying alone is one account, as a pool of 1)")

    settle_cu = a.settle_cu if a.settle_cu is not None else BEFORE_SETTLE_CU
    cu_text = a.cu.read_text() if a.cu else run_cu() if a.run_cu else None
    if a.settle_cu_after is not None:
        after_cu, source = a.settle_cu_after, "given (--settle-cu-after)"
    elif cu_text is not None:
        after_cu = settle_cu_from(cu_text)
        source = f"bench/cu ({a.cu or 'run now'})"
    else:
        after_cu, source = README_SETTLE_CU, "bench/cu on the SBF build, as docs/program/index.md's table records it"
    if cu_text is not None:
        lease_cu, lease_source = lease_cu_from(cu_text), f"bench/cu ({a.cu or 'run now'})"
    else:
        lease_cu, lease_source = LeaseCU(), "bench/cu on the SBF build, as docs/program/index.md's table records it"
    limits = LIMITS[a.limits]

    def fleet(gpus: int, gpus_per_lease: int = a.gpus_per_lease) -> Fleet:
        return Fleet(gpus, largest_provider_share=a.provider_share, gpus_per_lease=gpus_per_lease,
                     lease_seconds=a.lease_seconds)  # fmt: skip

    print("bench/scale: settling a fleet on Solana mainnet, before and after cumulative receipts, and a lease's own "
          "transactions\n")  # fmt: skip
    print(SOURCES)
    print(f"  chosen: {a.limits}: block {limits.block_cu:,} CU, per account {limits.account_cu:,} CU\n")
    print(f"settle_usage: before {settle_cu:,} CU executed (per-period reports); after {after_cu:,} CU ({source})")
    print(f"one settlement transaction: {transaction_bytes(False):,} bytes paid by the attester, "
          f"{transaction_bytes(True):,} paid by a pool key (limit {limits.transaction_bytes:,})")  # fmt: skip
    example = fleet(8)
    per_node = Fraction(example.shares, example.nodes)
    print(f"fleet: every GPU leased, 8 GPUs a node, {_leases(a.gpus_per_lease)} of {a.lease_seconds:,} s back to "
          f"back (each node: {per_node} lease(s) opened, assigned, closed and finalized every {a.lease_seconds:,} s); "
          f"the largest provider behind {_pct(a.provider_share)} of the nodes; one client per lease (assumed: no "
          f"client holds two leases at once)\n")  # fmt: skip

    header = (f"{'model':<8} {'GPUs':>9} {'nodes':>7} {'settle tx/s':>11} {'CU/block':>12} {'of block':>9} "
              f"{'hottest account':<28} {'CU/block':>12} {'of limit':>9} {'SOL/GPU-day':>12} "
              f"{'receipts/s':>10}")  # fmt: skip
    verdicts = []
    settlements = models(settle_cu, after_cu, a.fee_payers, a.tick, a.period, a.settle_every)
    for model in settlements:
        print(f"{model.name}: settle every {model.settle_every_seconds} s per share, metering tick "
              f"{model.metering_tick_seconds} s, {model.transaction_cu:,} CU of block cost per transaction "
              f"({model.signatures} signature(s) + {model.ed25519_signatures} Ed25519, "
              f"{len(model.writable)} accounts written; fee payers: {model.fee_payers})")  # fmt: skip
        for account, scope in model.writable.items():
            print(f"    writes {account}: {scope.value}")
        print(header)
        for gpus in FLEETS:
            f = figures(model, fleet(gpus), limits)
            v = verdict(f, limits, TARGET)
            hot, hot_cu = f.hottest
            print(f"{model.name:<8} {gpus:>9,} {fleet(gpus).nodes:>7,} {float(f.transactions_per_second):>11.2f} "
                  f"{float(f.cu_per_block):>12,.0f} {_pct(v.block_share):>9} {hot:<28} {float(hot_cu):>12,.0f} "
                  f"{_pct(v.account_share):>9} {float(f.lamports_per_gpu_day) / 1e9:>12.6f} "
                  f"{float(f.receipts_per_second):>10.1f}")  # fmt: skip
            if gpus == 1_000_000:
                verdicts.append((model, v))
        print()

    after = settlements[-1].flow()

    def flows(f: Fleet) -> list[Flow]:
        return [after, *lifecycle(f, a.fee_payers, lease_cu)]

    print(f"a lease's own transactions (after, {_leases(a.gpus_per_lease)}; executed CU: {lease_source}):")
    for flow in flows(example)[1:]:
        print(f"{flow.name}: {flow.cadence}: {flow.executed_cu:,} CU executed + {_signers(flow)} + "
              f"{flow.write_locks} write locks = {flow.transaction_cu:,} CU of block cost")  # fmt: skip
        for account, scope in flow.writable.items():
            count = flow.each.get(account, 1)
            print(f"    writes {account}{f' (x{count}: each of its nodes)' if count > 1 else ''}: {scope.value}")
    print()

    print(f"combined: settle_usage (after) and a lease's own transactions, {_leases(a.gpus_per_lease)} of "
          f"{a.lease_seconds:,} s back to back, {a.fee_payers} fee payers")  # fmt: skip
    print(f"{'model':<8} {'GPUs':>9} {'leases':>9} {'tx/s':>9} {'CU/block':>12} {'of block':>9} "
          f"{'hottest account':<28} {'CU/block':>12} {'of limit':>9}")  # fmt: skip
    for gpus in FLEETS:
        combined = load(flows(fleet(gpus)), fleet(gpus), limits)
        v = verdict(combined, limits, TARGET)
        hot, hot_cu = combined.hottest
        print(f"{'combined':<8} {gpus:>9,} {float(fleet(gpus).leases):>9,.0f} "
              f"{float(combined.transactions_per_second):>9.2f} {float(combined.cu_per_block):>12,.0f} "
              f"{_pct(v.block_share):>9} {hot:<28} {float(hot_cu):>12,.0f} {_pct(v.account_share):>9}")  # fmt: skip
    million = fleet(1_000_000)
    combined = load(flows(million), million, limits)
    print(f"\neach account at 1,000,000 GPUs, combined ({_leases(a.gpus_per_lease)}; {a.limits} limits: "
          f"{limits.account_cu:,} CU per account):")  # fmt: skip
    scopes = {account: scope for flow in flows(million) for account, scope in flow.writable.items()}
    for account, cu in sorted(combined.account_cu_per_block.items(), key=lambda kv: -kv[1]):
        share = float(cu / limits.account_cu) * 100
        print(f"  {account:<28} {scopes[account].value:<26} {float(cu):>12,.1f} CU/block {share:>10.6f} %  "
              f"written by {_writers(flows(million), account)}")  # fmt: skip
    client_tokens = combined.account_cu_per_block[CLIENT_TOKENS]
    most = TARGET * limits.account_cu / client_tokens
    print(f"  (a client holding k leases at once has its token account written k times as often: it reaches "
          f"{_target} at k = {int(most):,} leases open at once)\n")  # fmt: skip

    print(f"target: 1,000,000 GPUs settled hourly, no account above {_target} of its per-block write limit "
          f"and all of gpunet under {_target} of a block ({a.limits} limits)")  # fmt: skip
    for model, v in verdicts:
        outcome = "PASS" if v.passed else "FAIL"
        print(
            f"  {model.name:<7} {outcome}: block {_pct(v.block_share)}, hottest account {_pct(v.account_share)}"
            + ("" if model.settle_every_seconds == 3_600 else f" (settled every {model.settle_every_seconds} s)")
        )
    shown = [*LEASE_GPUS_SHOWN, *([] if a.gpus_per_lease in LEASE_GPUS_SHOWN else [a.gpus_per_lease])]
    for gpus_per_lease in shown:
        leased = fleet(1_000_000, gpus_per_lease)
        combined = load(flows(leased), leased, limits)
        v = verdict(combined, limits, TARGET)
        over = _over(combined, limits)
        print(f"  after + lease lifecycle, {_leases(gpus_per_lease)} of {a.lease_seconds:,} s: "
              f"{'PASS' if v.passed else 'FAIL'}: block {_pct(v.block_share)}, hottest account "
              f"{combined.hottest[0]} {_pct(v.account_share)}"
              + (f"; over {_target}: {', '.join(over)}" if over else ""))  # fmt: skip

    print(f"\nhottest account at 1,000,000 GPUs, after + lease lifecycle (leases of {a.lease_seconds:,} s), by limits:")
    for name, lim in LIMITS.items():
        cells = []
        for gpus_per_lease in shown:
            leased = fleet(1_000_000, gpus_per_lease)
            combined = load(flows(leased), leased, lim)
            v = verdict(combined, lim, TARGET)
            cells.append(f"{gpus_per_lease}-GPU: {combined.hottest[0]} {_pct(v.account_share)}, "
                         f"block {_pct(v.block_share)} {'PASS' if v.passed else 'FAIL'}")  # fmt: skip
        print(f"  {name:<10} (block {lim.block_cu / 1e6:g} M, account {lim.account_cu / 1e6:g} M): {'; '.join(cells)}")
    print("\nfees: base fees only (priority fees come on top: the coordinator bids the 75th percentile of recent "
          "fees for the accounts it writes, capped by GPUNET_PRIORITY_FEE_MAX)")  # fmt: skip


if __name__ == "__main__":
    main()
