"""Benchmark (not a test): what an epoch of co-staking rewards costs (issue 33).

1. Tree: the epoch's reward tree (gpunet.rewards.RewardTree) over 10,000 and 100,000 pools, in Python
   on one core: every leaf hashed, the root, and every pool's proof. Target: 100,000 pools < 10 s.
   The largest tree is the one this run posts: the measured pools' leaves are among its synthetic ones.
2. Claim CU: `claim_reward` of the measured pools' leaves of that tree (a proof of ceil(log2 n)
   hashes), on gpunet-localnet, each sent alone in a legacy transaction with no compute-budget
   instruction, the cranker paying, as bench/cu measures: the figure is the transaction's total (its
   CPIs into SPL Token and the System program included). Creating the RewardIndex account searches
   its bump seed on chain (1,500 CU per seed tried), so the cost depends on the pool: median and
   range. Every pool has a delegator, so the claim takes the commission and reward-per-share path.
   Metered only on the SBF build: set GPUNET_PROGRAM_SO=target/deploy/gpunet.so (scripts/build-sbf);
   the native build's figure is printed as not metered. Target: < 200,000 CU (the default budget of
   one instruction). Also printed: the claim transaction's size, and the deepest proof (the largest
   tree) that still fits a packet.
3. Chain cost of an epoch's claims (one claim per pool and epoch): the transaction's fee (from its
   meta: the 5,000-lamport base fee of its one signature) plus the rent-exempt balance of the
   RewardIndex account the claim creates (read from the account), per claim, and for 10,000 and
   100,000 pools. RewardIndex accounts are never closed: their rent stays locked (a year of the
   default daily epochs is printed too). Report only.
4. Writes: the accounts one settlement (the node's Ed25519 instruction + settle_usage) and one claim
   write-lock, by role, for two pools (two suppliers: two leases, two claims), and which of them both
   transactions write: an account every pool's transaction writes serialises them. Settlement must
   write no account shared by all pools (target), the fee payer aside (the sender's choice: the
   coordinator round-robins a pool of fee payers). A claim DOES write three accounts shared by all
   pools: the `staking` config (reward_reserved, reward_paid), the `reward_vault` token account (the
   payout's source) and the epoch's `reward_root` (claimed): the claims of one epoch serialise on them,
   a known serialisation point. The output bounds it with Agave's per-account write limit
   (bench/scale's current mainnet limits): the most claims a block can hold, and the fewest blocks
   100,000 pools' claims take.

Left out: computing the amounts (uptime sampling, the emission's split over pools) and building the
RewardLeaf objects (the tree's input, not timed); posting the root (one transaction per epoch);
getting each pool's proof to whoever cranks its claim; priority fees (none are paid here); the claims'
landing rate on a busy cluster (the write-lock bound above is the ceiling, not a measurement); the
Python SDK's own work per claim (building and signing the transaction).

    .venv/bin/python bench/rewards/rewards.py [--sizes 10000 100000] [--claims 8] [--smoke]
    GPUNET_PROGRAM_SO=target/deploy/gpunet.so .venv/bin/python bench/rewards/rewards.py   # metered CU

--smoke: trees of 1,000 and 2,000 pools, 2 claims (the fewest that can show which writes every pool
shares), 100 ms slots: every figure printed, none meaningful (tests/test_bench_rewards.py).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solana.rpc.types import TxOpts
from solders.instruction import Instruction
from solders.keypair import Keypair
from solders.message import Message
from solders.pubkey import Pubkey
from solders.signature import Signature
from solders.transaction import Transaction

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scale"))

from model import LAMPORTS_PER_SOL, SIGNATURE_CU, WRITE_LOCK_CU  # bench/scale: Agave's cost model
from scale import LIMITS  # bench/scale: mainnet's block limits, with their sources

from gpunet import staking
from gpunet.accounts import chain_clock, fetch
from gpunet.amounts import IO
from gpunet.idl import PROGRAM_ID, load_idl
from gpunet.localnet import PROGRAM_SO_ENV, LocalnetProcess, program_build
from gpunet.pda import pool_pda, reward_index_pda, reward_root_pda
from gpunet.rewards import RewardLeaf, RewardTree
from gpunet.testbed import Market, Supplier, at_most, funded_wallet

TARGET_TREE_S = 10.0  # for 100,000 pools
TARGET_TREE_POOLS = 100_000
TARGET_CLAIM_CU = 200_000  # the runtime's default compute limit of one instruction
PACKET_BYTES = 1_232
POOLS_PRICED = (10_000, 100_000)  # the epoch's chain cost is printed for these
DEFAULT_EPOCH_S = staking.StakingParams(0).epoch_seconds  # the network's epoch (a day)
YEAR_S = 365 * 86_400
EPOCH = 1  # the epoch rewarded: pools open in epoch 0 and earn from epoch 1
# Every leaf: the supplier's part and the delegators' (uniform: the amounts do not change the costs).
SUPPLIER_AMOUNT, DELEGATORS_AMOUNT = 2 * IO, IO
COMMISSION_BPS = 1_000
DELEGATED = 10 * IO


def synthetic_leaves(count: int, real: list[Pubkey]) -> list[RewardLeaf]:
    """`count` leaves of random providers, with the `real` pools' leaves spread among them."""
    providers = [Pubkey(os.urandom(32)) for _ in range(count)]
    for i, provider in enumerate(real):
        providers[(2 * i + 1) * count // (2 * len(real))] = provider
    return [RewardLeaf(EPOCH, p, SUPPLIER_AMOUNT, DELEGATORS_AMOUNT) for p in providers]


def build_tree(leaves: list[RewardLeaf], mint: Pubkey) -> tuple[RewardTree, list[list[bytes]], float]:
    """The tree, every leaf's proof, and the seconds both took."""
    t0 = time.perf_counter()
    tree = RewardTree(leaves, mint)
    proofs = [tree.proof(i) for i in range(len(leaves))]
    return tree, proofs, time.perf_counter() - t0


@dataclass
class Landed:
    """A confirmed transaction as the node recorded it (getTransaction): the transaction and its meta."""

    tx: Transaction
    meta: dict[str, Any]

    @property
    def cu(self) -> int:
        return int(self.meta["computeUnitsConsumed"])

    @property
    def fee(self) -> int:
        return int(self.meta["fee"])

    @property
    def size(self) -> int:
        """Bytes on the wire."""
        return len(bytes(self.tx))

    @property
    def payer(self) -> Pubkey:
        return self.tx.message.account_keys[0]

    def writable(self) -> list[Pubkey]:
        """The accounts the transaction write-locks, in its message's order (the legacy header:
        writable signers first, then writable unsigned accounts)."""
        message = self.tx.message
        keys, h = message.account_keys, message.header
        signed, unsigned_end = h.num_required_signatures, len(keys) - h.num_readonly_unsigned_accounts
        return [
            k for i, k in enumerate(keys) if i < signed - h.num_readonly_signed_accounts or signed <= i < unsigned_end
        ]

    def roles(self) -> dict[Pubkey, str]:
        """Each account's role: its name in the gpunet instruction that names it (the IDL's), the fee
        payer marked as such."""
        by_discriminator = {bytes(i.discriminator): [a.name for a in i.accounts] for i in load_idl().instructions}
        keys = self.tx.message.account_keys
        roles: dict[Pubkey, str] = {}
        for instruction in self.tx.message.instructions:
            if keys[instruction.program_id_index] != PROGRAM_ID:
                continue
            names = by_discriminator.get(bytes(instruction.data)[:8], [])
            for index, name in zip(bytes(instruction.accounts), names, strict=False):
                roles.setdefault(keys[index], name)
        payer_role = roles.get(self.payer)
        roles[self.payer] = f"{payer_role} (fee payer)" if payer_role else "fee payer"
        return roles


async def landed(chain: AsyncClient, node: LocalnetProcess, sig: Signature) -> Landed:
    """The confirmed transaction `sig`, read back from the node; it must have succeeded."""
    await chain.confirm_transaction(sig, Confirmed, sleep_seconds=0.05)
    raw = node.call("getTransaction", [str(sig), {"encoding": "base64", "commitment": "confirmed"}])["result"]
    if raw is None or raw["meta"]["err"] is not None:
        raise RuntimeError(f"transaction {sig} is missing or failed: {raw and raw['meta']}")
    return Landed(Transaction.from_bytes(base64.b64decode(raw["transaction"][0])), raw["meta"])


async def send_alone(
    chain: AsyncClient, node: LocalnetProcess, payer: Keypair, instructions: list[Instruction]
) -> Landed:
    """One legacy transaction with no compute-budget instruction (the runtime's default limits), the
    payer signing alone, as bench/cu sends each instruction; confirmed and read back."""
    blockhash = (await chain.get_latest_blockhash()).value.blockhash
    tx = Transaction([payer], Message.new_with_blockhash(instructions, payer.pubkey(), blockhash), blockhash)
    sig = (await chain.send_raw_transaction(bytes(tx), opts=TxOpts(preflight_commitment=Confirmed))).value
    return await landed(chain, node, sig)


async def balance(chain: AsyncClient, account: Pubkey) -> tuple[int, int]:
    """The account's lamports and data length."""
    info = (await chain.get_account_info(account)).value
    if info is None:
        raise RuntimeError(f"no account at {account}")
    return info.lamports, len(bytes(info.data))


def sol(lamport_count: float) -> str:
    return f"{lamport_count / LAMPORTS_PER_SOL:,.9f}".rstrip("0").rstrip(".") + " SOL"


def writes(name: str, a: Landed, b: Landed) -> tuple[str, list[str], str | None]:
    """The line listing what `a` writes by role, each account `b` (another pool's) writes too marked
    SHARED; the roles of those shared accounts, the fee payer apart (its role, when shared)."""
    roles, other = a.roles(), set(b.writable())
    parts, shared, payer = [], [], None
    for key in a.writable():
        role = roles.get(key, str(key))
        if key not in other:
            parts.append(role)
            continue
        parts.append(f"{role} [SHARED]")
        if key == a.payer:
            payer = role
        else:
            shared.append(role)
    return f"writes: {name}: {len(parts)} accounts: {', '.join(parts)}", shared, payer


async def main(args: argparse.Namespace) -> int:
    work = Path(tempfile.mkdtemp(prefix="gpunet-bench-rewards-"))
    try:
        return await run(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)  # the node's ledger and log, the node stopped by now


async def run(args: argparse.Namespace, work: Path) -> int:
    sizes = sorted(args.sizes)
    sbf = bool(os.environ.get(PROGRAM_SO_ENV))
    print(f"gpunet-localnet, {args.slot_ms} ms slots, program: {program_build()}")
    with LocalnetProcess(work / "localnet.log", slot_ms=args.slot_ms) as node:
        async with AsyncClient(node.url, commitment=Confirmed) as chain:
            market = await Market.create(chain)
            suppliers: list[Supplier] = await at_most(8, [market.supplier() for _ in range(args.claims)])
            fan = await market.client(io=args.claims * DELEGATED)
            dev = await market.client()
            leases = [await market.open_lease(dev, i, gpus=s.gpus) for i, s in enumerate(suppliers[:2])]
            for lease, s in zip(leases, suppliers[:2], strict=True):
                await market.assign(lease, [(s, s.gpus)])

            # Staking: epoch 0 begins now; every measured pool opens (with one delegator) within it.
            largest = sizes[-1]
            emission = largest * (SUPPLIER_AMOUNT + DELEGATORS_AMOUNT)
            params = staking.StakingParams(
                emission, epoch_seconds=args.epoch_seconds, root_timelock_seconds=1, claim_epochs=2
            )
            admin = market.admin
            funds = await market.fund(admin.pubkey(), emission)
            await market.send(
                admin,
                [
                    staking.configure_staking(admin.pubkey(), market.mint, params),
                    staking.fund_rewards(admin.pubkey(), funds, emission),
                ],
            )
            await at_most(
                8,
                [
                    market.send(
                        fan.wallet,
                        [
                            staking.open_pool(s.wallet.pubkey(), s.provider, COMMISSION_BPS),
                            staking.delegate(fan.wallet.pubkey(), fan.tokens, s.provider, 0, DELEGATED),
                        ],
                        [s.wallet],
                    )
                    for s in suppliers
                ],
            )
            pools = [await fetch(chain, pool_pda(s.provider), "Pool") for s in suppliers]
            if late := [p.credited_through for p in pools if p.credited_through != EPOCH - 1]:
                raise SystemExit(f"bench/rewards: pools opened in epoch {late[0]}, not 0: try a longer --epoch-seconds")

            # 4 (settlement half): one settlement of each of two suppliers' leases, while epoch 1 runs.
            settles = [
                await landed(chain, node, await market.settle(lease, s))
                for lease, s in zip(leases, suppliers[:2], strict=True)
            ]

            # 1. Trees (the node idles meanwhile: epoch 1 has to end before its root may be posted).
            real = [s.provider for s in suppliers]
            posted: RewardTree | None = None
            proofs: list[list[bytes]] = []
            for n in sizes:
                leaves = synthetic_leaves(n, real if n == largest else [])
                tree, tree_proofs, seconds = build_tree(leaves, market.mint)
                depth = max(len(p) for p in tree_proofs)
                verdict = (
                    f" (target < {TARGET_TREE_S:g} s: {'met' if seconds < TARGET_TREE_S else 'NOT met'})"
                    if n == TARGET_TREE_POOLS
                    else f" (target for {TARGET_TREE_POOLS:,}: < {TARGET_TREE_S:g} s)"
                )
                print(
                    f"tree: {n:,} pools: {n:,} leaves hashed, the root and {n:,} proofs ({depth} hashes)"
                    f" in {seconds:.2f} s, {seconds / n * 1e6:.1f} us a pool{verdict}"
                )
                if n == largest:
                    posted, proofs = tree, tree_proofs
            assert posted is not None

            # 2. and 3.: the root of epoch 1, posted in epoch 2, and the measured pools' claims.
            await market.wait_epoch(EPOCH + 1)
            attester = market.attester
            await market.send(
                attester,
                [staking.post_reward_root(attester.pubkey(), EPOCH, posted.root, posted.total, len(posted.leaves))],
            )
            claimable_at = (await fetch(chain, reward_root_pda(EPOCH), "RewardRoot")).claimable_at
            while await chain_clock(chain) < claimable_at:
                await asyncio.sleep(0.1)
            cranker = await funded_wallet(chain, 10)
            index = {leaf.provider: i for i, leaf in enumerate(posted.leaves)}

            async def claim(s: Supplier) -> Landed:
                i = index[s.provider]
                ixs = [staking.claim_reward(cranker.pubkey(), posted.leaves[i], proofs[i])]
                return await send_alone(chain, node, cranker, ixs)

            claims = await asyncio.gather(*(claim(s) for s in suppliers))
            depth = len(proofs[index[suppliers[0].provider]])
            cus = sorted(c.cu for c in claims)
            median = int(statistics.median(cus))
            spread = f"range {cus[0]:,}-{cus[-1]:,} over {len(cus)} claims"
            where = f"proof of {depth} hashes, tree of {largest:,} pools"
            if sbf:
                print(
                    f"claim CU: {median:,} median ({spread}; {where}) on the SBF build,"
                    f" {median * 100 / TARGET_CLAIM_CU:.1f}% of the default"
                    f" (target < {TARGET_CLAIM_CU:,}: {'met' if cus[-1] < TARGET_CLAIM_CU else 'NOT met'})"
                )
            else:
                print(
                    f"claim CU: {median:,} median ({spread}; {where}) on the native build: NOT METERED"
                    f" (target < {TARGET_CLAIM_CU:,}: not judged; set {PROGRAM_SO_ENV}=target/deploy/gpunet.so)"
                )
            size = claims[0].size
            fits = depth + (PACKET_BYTES - size) // 32
            print(
                f"claim transaction: {size:,} bytes of {PACKET_BYTES:,} with a proof of {depth} hashes;"
                f" a proof of {fits} hashes still fits (trees up to {2**fits:,} pools)"
            )

            rent, space = await balance(chain, reward_index_pda(suppliers[0].provider, EPOCH))
            fee = claims[0].fee
            per_claim = fee + rent
            epochs = ", ".join(f"{n:,} pools {per_claim * n:,} lamports = {sol(per_claim * n)}" for n in POOLS_PRICED)
            print(
                f"claim chain cost: fee {fee:,} lamports + RewardIndex rent {rent:,} lamports ({space} bytes,"
                f" never closed) = {per_claim:,} lamports = {sol(per_claim)} per claim (one per pool and epoch);"
                f" an epoch's claims: {epochs}; RewardIndex rent locked in a year of the default"
                f" {DEFAULT_EPOCH_S // 3_600} h epochs: {sol(rent * YEAR_S // DEFAULT_EPOCH_S * POOLS_PRICED[-1])}"
                f" for {POOLS_PRICED[-1]:,} pools (report only)"
            )

            # 4.: what each transaction writes, and what every pool's transaction writes alike.
            for name, a, b, target in (
                ("settle_usage", settles[0], settles[1], True),
                ("claim_reward", claims[0], claims[1], False),
            ):
                line, shared, payer = writes(name, a, b)
                print(line)
                payer_note = (
                    f"; its fee payer ({payer.removesuffix(' (fee payer)')}) is the same key in both here:"
                    " the sender's choice, not the program's"
                    if payer
                    else ""
                )
                if target:
                    print(
                        f"shared: {name} writes {', '.join(shared) if shared else 'no account'} shared by all pools"
                        f" (target: none: {'met' if not shared else 'NOT met'}){payer_note}"
                    )
                else:
                    limits = LIMITS["current"]
                    slot_s = float(limits.slot_seconds)
                    block_cost = median + SIGNATURE_CU + WRITE_LOCK_CU * len(a.writable())
                    per_block = limits.account_cu // block_cost
                    blocks = math.ceil(TARGET_TREE_POOLS / per_block)
                    print(
                        f"shared: {name} writes {len(shared)} accounts shared by all pools ({', '.join(shared)}):"
                        " an epoch's claims serialise on them (a known serialisation point),"
                        f" at most {per_block:,} claims a block ({limits.account_cu:,} CU per written account"
                        f" / {block_cost:,} CU a claim's block cost), {TARGET_TREE_POOLS:,} pools' claims"
                        f" >= {blocks:,} blocks ({blocks * slot_s:,.0f} s at {slot_s * 1000:.0f} ms slots)"
                        + ("" if sbf else ", from the native build's CU: not meaningful")
                        + payer_note
                    )
    print(
        "left out: the amounts' computation and the leaves' construction, posting the root, delivering"
        " proofs, priority fees, the claims' landing rate on a busy cluster"
    )
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000], help="pools per tree")
    parser.add_argument("--claims", type=int, default=8, help="pools on chain, each claimed once (at least 2)")
    parser.add_argument("--epoch-seconds", type=int, default=5, help="the staking epoch on the local node")
    parser.add_argument("--slot-ms", type=int, default=100)
    parser.add_argument("--smoke", action="store_true", help="trees of 1,000 and 2,000 pools, 2 claims (CI)")
    args = parser.parse_args()
    if args.smoke:
        args.sizes, args.claims = [1_000, 2_000], 2
    if args.claims < 2:
        parser.error("--claims must be >= 2 (two pools show which writes every pool shares)")
    if args.claims > min(args.sizes):
        parser.error("--claims must be at most the smallest tree")
    sys.exit(asyncio.run(main(args)))
