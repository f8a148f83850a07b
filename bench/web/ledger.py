"""The benchmark's ledger: a market of providers, nodes and cluster leases on gpunet-localnet, then N
real settle_usage transactions (one UsageSettled event each, as the coordinator's settlement sends
them: the node's Ed25519-signed receipt, then settle_usage, fee paid and signed by the attester),
which the coordinator's own indexer writes into its PostgreSQL as they land.

The chain's clock follows the wall clock, and a receipt may end no later than now and must end
later than the share's last one: each settlement here pays one more second of its share, so the
set-up spreads the N settlements over many shares (N / shares seconds to wait, not N)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import httpx
from solana.rpc.async_api import AsyncClient
from solana.rpc.types import TxOpts
from solders.hash import Hash
from solders.keypair import Keypair
from solders.message import Message
from solders.pubkey import Pubkey
from solders.signature import Signature
from solders.transaction import Transaction

from gpunet import instructions as ix
from gpunet.accounts import fetch
from gpunet.amounts import IO
from gpunet.client import send_and_confirm
from gpunet.testbed import Market, Supplier
from gpunet.usage import Receipt

GPUS_PER_NODE = 8
NODES_PER_LEASE = 2  # every lease a 16-GPU cluster over two nodes (of two providers)
NODES_PER_PROVIDER = 10
LEASES_PER_CLIENT = 10
PRICE = 2 * IO  # per GPU-hour, every node
MAX_PRICE = 3 * IO  # what Market.open_lease's terms accept
LEASE_SECONDS = 24 * 3_600  # none ends during the benchmark (the coordinator would close it)
SENDERS = 4  # concurrent senders of the burst, each with its own shares (their receipts stay in order)


@dataclass(frozen=True)
class Shape:
    """How N settlements spread: `shares` (lease, node) pairs, `per_share` settlements each at most."""

    settlements: int
    shares: int

    @classmethod
    def for_settlements(cls, n: int) -> Shape:
        # 50 a share at 10,000 (a lease settled hourly for two days), between 20 and 200 nodes.
        shares = min(200, max(20, n // 50))
        return cls(n, shares - shares % NODES_PER_LEASE)

    @property
    def per_share(self) -> int:
        return -(-self.settlements // self.shares)

    @property
    def leases(self) -> int:
        return self.shares // NODES_PER_LEASE

    @property
    def providers(self) -> int:
        return max(2, self.shares // NODES_PER_PROVIDER)

    def describe(self) -> str:
        return (
            f"{self.providers} providers, {self.shares} nodes of {GPUS_PER_NODE} GPUs, {self.leases} leases of "
            f"{NODES_PER_LEASE} nodes ({self.shares} shares), up to {self.per_share} settlements a share"
        )


class Share:
    """One node's share of a lease, settled one second (GPUS_PER_NODE GPU-seconds) more each time."""

    def __init__(self, lease: Pubkey, supplier: Supplier, epoch: int, settled_until: int) -> None:
        self.lease, self.supplier, self.epoch = lease, supplier, epoch
        self.gpu_seconds, self.through = 0, settled_until

    def next_settlement(self, attester: Pubkey) -> list[ix.Instruction]:
        self.gpu_seconds += GPUS_PER_NODE
        self.through += 1
        s = self.supplier
        receipt = Receipt(self.epoch, self.gpu_seconds, self.through)
        return ix.signed_settlement(
            attester, self.lease, s.node_key, s.wallet.pubkey(), s.tokens, receipt, GPUS_PER_NODE
        )


async def _bounded(limit: int, jobs: list) -> list:
    gate = asyncio.Semaphore(limit)

    async def one(job):  # type: ignore[no-untyped-def]
        async with gate:
            return await job

    return await asyncio.gather(*(one(j) for j in jobs))


async def build_market(market: Market, shape: Shape) -> list[Share]:
    """Providers with NODES_PER_PROVIDER nodes each, clients, and the leases assigned (billing from now):
    their shares."""
    chain = market.chain
    stake = NODES_PER_PROVIDER * GPUS_PER_NODE * market.params.min_stake_per_gpu
    firsts = await _bounded(16, [market.supplier(GPUS_PER_NODE, PRICE, stake) for _ in range(shape.providers)])
    suppliers: list[Supplier] = []
    for i in range(shape.shares):
        first = firsts[i % shape.providers]
        suppliers.append(
            first if i < shape.providers else Supplier(first.wallet, Keypair(), first.tokens, GPUS_PER_NODE, PRICE)
        )
    spec = ix.NodeSpec(1, GPUS_PER_NODE, 80, 1, PRICE, bytes(32))
    await _bounded(
        32,
        [
            market.send(s.wallet, [ix.register_node(s.wallet.pubkey(), s.node_key.pubkey(), spec)], [s.node_key])
            for s in suppliers[shape.providers :]
        ],
    )
    escrow = LEASES_PER_CLIENT * NODES_PER_LEASE * GPUS_PER_NODE * MAX_PRICE * LEASE_SECONDS // 3_600
    clients = await _bounded(16, [market.client(escrow) for _ in range(-(-shape.leases // LEASES_PER_CLIENT))])

    async def lease(i: int) -> list[Share]:
        client = clients[i // LEASES_PER_CLIENT]
        address = await market.open_lease(
            client, i % LEASES_PER_CLIENT + 1, NODES_PER_LEASE * GPUS_PER_NODE, LEASE_SECONDS
        )
        # consecutive nodes belong to different providers: each lease spans two
        pair = suppliers[NODES_PER_LEASE * i : NODES_PER_LEASE * (i + 1)]
        await market.assign(address, [(s, GPUS_PER_NODE) for s in pair])
        account = await fetch(chain, address, "Lease")
        assigned = {a.node: a for a in account.assignments[: account.node_count]}
        return [Share(address, s, assigned[s.node].epoch, assigned[s.node].settled_until) for s in pair]

    return [share for group in await _bounded(32, [lease(i) for i in range(shape.leases)]) for share in group]


class Blockhash:
    """A recent blockhash for the burst, fetched again every few seconds (they expire after 150 slots)."""

    def __init__(self, chain: AsyncClient) -> None:
        self.chain, self.value, self.at = chain, Hash.default(), 0.0

    async def get(self) -> Hash:
        if time.monotonic() - self.at > 5:
            self.value, self.at = (await self.chain.get_latest_blockhash()).value.blockhash, time.monotonic()
        return self.value


def spread(shares: list[Share], total: int) -> list[int]:
    """How many of `total` settlements each share gets."""
    return [total // len(shares) + (1 if i < total % len(shares) else 0) for i in range(len(shares))]


async def wait_for_clock(chain: AsyncClient, until: int) -> None:
    """Until the chain's clock reaches unix second `until`."""
    while ((await chain.get_block_time((await chain.get_slot()).value)).value or 0) < until:
        await asyncio.sleep(0.05)


@dataclass
class Burst:
    signatures: list[Signature]  # in the order they were sent
    rounds: int
    sending_seconds: float  # inside the rounds' sends, not waiting for the clock


async def burst(market: Market, shares: list[Share], total: int) -> Burst:
    """`total` settlements, in rounds: round r sends every share's r-th settlement (SENDERS senders,
    without waiting for confirmations) once the chain's clock has passed the second it bills, so the
    clock's pace and the sending overlap; then all are confirmed. Raises if any failed."""
    chain, attester = market.chain, market.attester
    blockhash = Blockhash(chain)
    counts = spread(shares, total)
    opts = TxOpts(skip_preflight=True, skip_confirmation=True)
    signatures: list[Signature] = []
    sending = 0.0

    async def sender(mine: list[Share]) -> None:
        for share in mine:
            recent = await blockhash.get()
            message = Message.new_with_blockhash(share.next_settlement(attester.pubkey()), attester.pubkey(), recent)
            tx = Transaction([attester], message, recent)
            signatures.append((await chain.send_raw_transaction(bytes(tx), opts=opts)).value)

    for r in range(max(counts)):
        due = [share for share, count in zip(shares, counts, strict=True) if count > r]
        await wait_for_clock(chain, max(share.through for share in due) + 1)  # the second each bills has passed
        t0 = time.perf_counter()
        await asyncio.gather(*(sender(due[k::SENDERS]) for k in range(SENDERS)))
        sending += time.perf_counter() - t0
    await confirm_all(chain, signatures)
    return Burst(signatures, max(counts), sending)


async def confirm_all(chain: AsyncClient, signatures: list[Signature]) -> None:
    pending = list(signatures)
    while pending:
        statuses = []
        for i in range(0, len(pending), 256):
            statuses += (await chain.get_signature_statuses(pending[i : i + 256])).value
        failed = [s for s, st in zip(pending, statuses, strict=True) if st is not None and st.err is not None]
        if failed:
            raise RuntimeError(f"{len(failed)} settlements failed on chain, e.g. {failed[0]}")
        pending = [s for s, st in zip(pending, statuses, strict=True) if st is None]
        await asyncio.sleep(0.05)


async def settlements_indexed(api_url: str, count: int, timeout: float = 300) -> None:
    """Until the coordinator's ledger (its read API) holds at least `count` settlements."""
    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient(base_url=api_url, timeout=30) as http:
        while time.monotonic() < deadline:
            page = (await http.get("/settlements", params={"limit": 1, "offset": count - 1})).json()
            if page["items"]:
                return
            await asyncio.sleep(0.1)
    raise TimeoutError(f"the coordinator indexed fewer than {count} settlements in {timeout:.0f} s")


async def settle_live(market: Market, share: Share) -> tuple[Signature, float]:
    """One settlement sent as the coordinator sends it (gpunet.client.send_and_confirm); its signature
    and the wall-clock time it was first seen confirmed (polled every 5 ms)."""
    attester = market.attester
    signature = await send_and_confirm(
        market.chain, attester, share.next_settlement(attester.pubkey()), poll_seconds=0.005
    )
    return signature, time.time()
