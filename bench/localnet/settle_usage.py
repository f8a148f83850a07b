"""Benchmark (not a test): settle_usage transactions through gpunet-localnet's JSON-RPC.

Sets up a gpunet deployment (config, an IO mint, one provider with N single-GPU
nodes, one lease per node), waits until every (lease, node) pair has enough
elapsed seconds to settle one-second usage periods, then has C concurrent
clients submit signed `settle_usage` transactions (an Ed25519 precompile
instruction with the node's signature + the program instruction) through
sendTransaction, each followed by getSignatureStatuses until it is confirmed.

Prints confirmed transactions per second and p50/p99 confirmation latency
(sendTransaction sent -> status seen) against the 500 tx/s target.

Every instruction, address and usage message comes from the SDK (gpunet.*), the set-up is
sent with gpunet.client.send_and_confirm; only the measured path sends the signed
transactions itself, over a bare keep-alive connection, so it times the node.

    .venv/bin/python bench/localnet/settle_usage.py             # starts its own node
    .venv/bin/python bench/localnet/settle_usage.py --url http://127.0.0.1:8899
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import tempfile
import time
from pathlib import Path

from solana.rpc.async_api import AsyncClient
from solders.hash import Hash
from solders.keypair import Keypair
from solders.message import Message
from solders.pubkey import Pubkey
from solders.transaction import Transaction

from gpunet import instructions as ix
from gpunet.accounts import fetch
from gpunet.amounts import IO
from gpunet.client import send_and_confirm
from gpunet.localnet import LocalnetProcess
from gpunet.pda import lease_pda, node_pda
from gpunet.testbed import Market, funded_wallet
from gpunet.usage import Receipt

TARGET_TPS = 500


class Pair:
    """One (lease, node) whose usage gets settled, one more second at a time."""

    def __init__(self, node_key: Keypair, lease: Pubkey, epoch: int, settled_until: int):
        self.node_key, self.lease, self.epoch = node_key, lease, epoch
        self.gpu_seconds = 0
        self.settled_until = settled_until


class SettlementAccounts:
    """The accounts the settlements name: the attester who sends them and the supplier paid."""

    def __init__(self, attester: Keypair, treasury: Pubkey, supplier: Pubkey, supplier_tokens: Pubkey):
        self.attester, self.treasury = attester, treasury
        self.supplier, self.supplier_tokens = supplier, supplier_tokens


async def setup(client: AsyncClient, nodes: int) -> tuple[list[Pair], SettlementAccounts]:
    # The admin (the node's upgrade authority) is also the attester.
    market = await Market.create(
        client, usage_period_seconds=3600, protocol_fee_bps=100, unbonding_seconds=60, jail_seconds=60
    )
    admin, mint, treasury = market.admin, market.mint, market.treasury

    supplier = await funded_wallet(client, 100)
    supplier_tokens = await market.fund(supplier.pubkey(), 10**15)
    await send_and_confirm(
        client,
        supplier,
        [
            ix.register_provider(supplier.pubkey(), mint),
            ix.stake(supplier.pubkey(), supplier_tokens, 10**14),
        ],
    )

    customer = await funded_wallet(client, 1_000)
    customer_tokens = await market.fund(customer.pubkey(), 10**15)
    spec = ix.NodeSpec(
        gpu_model=1, gpu_count=1, vram_gb=80, region=1, price_per_gpu_hour=2 * IO, inventory_hash=bytes([7] * 32)
    )
    terms = ix.LeaseTerms(
        gpu_model=ix.ANY,
        min_vram_gb=24,
        gpu_count=1,
        region=ix.ANY,
        max_price_per_gpu_hour=3 * IO,
        duration_seconds=24 * 3600,
    )

    async def one(i: int) -> tuple[Keypair, Pubkey]:
        key = Keypair()
        await send_and_confirm(client, supplier, [ix.register_node(supplier.pubkey(), key.pubkey(), spec)], [key])
        await send_and_confirm(client, customer, [ix.open_lease(customer.pubkey(), customer_tokens, mint, i, terms)])
        lease = lease_pda(customer.pubkey(), i)
        await send_and_confirm(
            client,
            admin,
            [
                ix.assign_lease(
                    admin.pubkey(), lease, [ix.Share(key.pubkey(), supplier.pubkey(), 1, spec.price_per_gpu_hour)]
                )
            ],
        )
        return key, lease

    made: list[tuple[Keypair, Pubkey]] = []
    for start in range(0, nodes, 32):
        made += await asyncio.gather(*(one(i) for i in range(start, min(nodes, start + 32))))
    pairs = []
    for key, lease in made:
        state = await fetch(client, lease, "Lease")
        share = next(a for a in state.assignments if a.node == node_pda(key.pubkey()))
        pairs.append(Pair(key, lease, share.epoch, share.settled_until))
    return pairs, SettlementAccounts(admin, treasury, supplier.pubkey(), supplier_tokens)


def settle_tx(p: Pair, accounts: SettlementAccounts, blockhash: Hash) -> Transaction:
    """The node's next receipt (one GPU-second more), signed by the node, settled by the attester."""
    p.gpu_seconds += 1
    p.settled_until += 1
    receipt = Receipt(p.epoch, p.gpu_seconds, p.settled_until)
    attester = accounts.attester
    instructions = ix.signed_settlement(
        attester.pubkey(), p.lease, p.node_key, accounts.supplier, accounts.supplier_tokens, receipt, 1
    )
    return Transaction([attester], Message.new_with_blockhash(instructions, attester.pubkey(), blockhash), blockhash)


class RawRpc:
    """A minimal keep-alive HTTP/1.1 JSON-RPC connection: much lighter than httpx, so the
    benchmark measures the node rather than the client library."""

    def __init__(self, url: str):
        host_port = url.split("//", 1)[1].rstrip("/")
        self.host, port = host_port.rsplit(":", 1)
        self.port = int(port)
        self.reader = self.writer = None

    async def call(self, method: str, params: list) -> dict:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode()
        self.writer.write(
            b"POST / HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % (self.host.encode(), len(body)) + body
        )
        head = await self.reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")
        )
        return json.loads(await self.reader.readexactly(length))

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


async def worker(url, txs: list[tuple[str, str]], latencies: list[float], errors: list[str]):
    conn = RawRpc(url)
    try:
        for sig, enc in txs:
            t0 = time.perf_counter()
            r = await conn.call("sendTransaction", [enc, {"encoding": "base64"}])
            if "error" in r:
                errors.append(json.dumps(r["error"])[:300])
                continue
            while (await conn.call("getSignatureStatuses", [[sig]]))["result"]["value"][0] is None:
                await asyncio.sleep(0.005)
            latencies.append(time.perf_counter() - t0)
    finally:
        conn.close()


async def measure(url: str, args: argparse.Namespace) -> None:
    async with AsyncClient(url) as client:
        t = time.perf_counter()
        pairs, accounts = await setup(client, args.nodes)
        print(f"setup: {args.nodes} nodes + leases in {time.perf_counter() - t:.1f} s")
        per_pair = -(-args.txs // len(pairs))
        # Every period must have ended by the node's clock: wait until enough seconds passed.
        while True:
            now = (await client.get_block_time((await client.get_slot()).value)).value
            if now - max(p.settled_until for p in pairs) >= per_pair:
                break
            await asyncio.sleep(0.5)
        blockhash = (await client.get_latest_blockhash()).value.blockhash

    t = time.perf_counter()
    plan: list[list[tuple[str, str]]] = [[] for _ in range(args.clients)]
    for _ in range(per_pair):
        for i, p in enumerate(pairs):
            tx = settle_tx(p, accounts, blockhash)
            plan[i % args.clients].append((str(tx.signatures[0]), base64.b64encode(bytes(tx)).decode()))
    total = sum(len(x) for x in plan)
    print(f"signed {total} settle_usage transactions in {time.perf_counter() - t:.1f} s")

    latencies: list[float] = []
    errors: list[str] = []
    t = time.perf_counter()
    await asyncio.gather(*(worker(url, txs, latencies, errors) for txs in plan))
    elapsed = time.perf_counter() - t
    latencies.sort()
    tps = len(latencies) / elapsed
    p50 = latencies[len(latencies) // 2] * 1000 if latencies else float("nan")
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000 if latencies else float("nan")
    print(
        f"confirmed {len(latencies)}/{total} settle_usage transactions in {elapsed:.2f} s with {args.clients} clients"
    )
    print(f"throughput: {tps:.0f} tx/s (target >= {TARGET_TPS} tx/s: {'met' if tps >= TARGET_TPS else 'NOT met'})")
    print(f"confirmation latency: p50 {p50:.1f} ms, p99 {p99:.1f} ms")
    if errors:
        print(f"{len(errors)} errors, first: {errors[0]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", help="a running node (default: start gpunet-localnet)")
    ap.add_argument(
        "--bin",
        type=Path,
        help="the node binary to start (default: $GPUNET_LOCALNET_BIN, else the scripts/setup build)",
    )
    ap.add_argument("--clients", type=int, default=8, help="concurrent JSON-RPC clients")
    ap.add_argument("--nodes", type=int, default=128, help="(lease, node) pairs settled in parallel")
    ap.add_argument("--txs", type=int, default=3000, help="settle_usage transactions to send")
    args = ap.parse_args()

    if args.url:
        asyncio.run(measure(args.url, args))
        return
    with LocalnetProcess(Path(tempfile.gettempdir()) / "gpunet-localnet-bench.log", binary=args.bin) as node:
        asyncio.run(measure(node.url, args))


if __name__ == "__main__":
    main()
