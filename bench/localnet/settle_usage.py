"""Benchmark (not a test): settle_usage transactions through gpunet-localnet's JSON-RPC.

Sets up a gpunet deployment (config, an IO mint, one provider with N single-GPU
nodes, one lease per node), waits until every (lease, node) pair has enough
elapsed seconds to settle one-second usage periods, then has C concurrent
clients submit signed `settle_usage` transactions (an Ed25519 precompile
instruction with the node's signature + the program instruction) through
sendTransaction, each followed by getSignatureStatuses until it is confirmed.

Prints confirmed transactions per second and p50/p99 confirmation latency
(sendTransaction sent -> status seen) against the 500 tx/s target.

    .venv/bin/python bench/localnet/settle_usage.py             # starts its own node
    .venv/bin/python bench/localnet/settle_usage.py --url http://127.0.0.1:8899
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

warnings.filterwarnings("ignore", message="The `repr_ns` argument is deprecated", category=DeprecationWarning)

from anchorpy import Context, Program, Provider, Wallet  # noqa: E402
from solana.rpc.async_api import AsyncClient  # noqa: E402
from solders.hash import Hash  # noqa: E402
from solders.instruction import AccountMeta, Instruction  # noqa: E402
from solders.keypair import Keypair  # noqa: E402
from solders.message import Message  # noqa: E402
from solders.pubkey import Pubkey  # noqa: E402
from solders.system_program import ID as SYSTEM_PROGRAM_ID  # noqa: E402
from solders.sysvar import INSTRUCTIONS as INSTRUCTIONS_SYSVAR  # noqa: E402
from solders.transaction import Transaction  # noqa: E402
from spl.token.constants import TOKEN_PROGRAM_ID  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from gpunet.idl import PROGRAM_ID, idl_json, load_idl  # noqa: E402
from gpunet.tokens import create_mint  # noqa: E402
from localnet.helpers import create_ata, funded, mint_tokens, send  # noqa: E402

ED25519_PROGRAM_ID = Pubkey.from_string("Ed25519SigVerify111111111111111111111111111")
USAGE_TAG = b"gpunet-usage-v1\0"
IO = 1_000_000
TARGET_TPS = 500


def pda(*seeds: bytes) -> Pubkey:
    return Pubkey.find_program_address(list(seeds), PROGRAM_ID)[0]


def discriminator(name: str) -> bytes:
    ix = next(i for i in json.loads(idl_json())["instructions"] if i["name"] == name)
    return bytes(ix["discriminator"])


def ed25519_ix(signer: Keypair, message: bytes) -> Instruction:
    """The same layout as the program tests' `ed25519_ix`: key, signature, message inside its own data."""
    key_off = 16
    sig_off = key_off + 32
    msg_off = sig_off + 64
    data = bytes([1, 0]) + struct.pack("<7H", sig_off, 0xFFFF, key_off, 0xFFFF, msg_off, len(message), 0xFFFF)
    data += bytes(signer.pubkey()) + bytes(signer.sign_message(message)) + message
    return Instruction(ED25519_PROGRAM_ID, data, [])


class Pair:
    """One (lease, node) whose usage gets settled, one one-second period at a time."""

    def __init__(self, node_key: Keypair, node: Pubkey, lease: Pubkey, vault: Pubkey, settled_until: int):
        self.node_key, self.node, self.lease, self.vault = node_key, node, lease, vault
        self.seq = 0
        self.settled_until = settled_until


async def setup(client: AsyncClient, nodes: int):
    program = Program(load_idl(), PROGRAM_ID, Provider(client, Wallet.dummy()))
    admin = await funded(client, 100 * 10**9)
    mint = await create_mint(client, admin)
    treasury = await create_ata(client, admin, admin.pubkey(), mint)
    config = pda(b"config")
    await send(client, admin, [program.instruction["initialize"](dict(
        treasury=treasury, protocol_fee_bps=100, min_stake_per_gpu=10 * IO, unbonding_seconds=60,
        usage_period_seconds=3600, jail_seconds=60, slash_bps=[1000, 1000, 1000], slash_client_share_bps=5000,
        attesters=[admin.pubkey()], paused=False), ctx=Context(accounts={
            "admin": admin.pubkey(), "config": config, "io_mint": mint, "treasury": treasury,
            "system_program": SYSTEM_PROGRAM_ID}))])

    supplier = await funded(client, 100 * 10**9)
    supplier_tokens = await create_ata(client, admin, supplier.pubkey(), mint)
    await mint_tokens(client, admin, mint, supplier_tokens, 10**15)
    provider = pda(b"provider", bytes(supplier.pubkey()))
    stake_vault = pda(b"stake_vault", bytes(provider))
    await send(client, supplier, [program.instruction["register_provider"](ctx=Context(accounts={
        "authority": supplier.pubkey(), "config": config, "provider": provider, "stake_vault": stake_vault,
        "io_mint": mint, "token_program": TOKEN_PROGRAM_ID, "system_program": SYSTEM_PROGRAM_ID}))])
    await send(client, supplier, [program.instruction["stake"](10**14, ctx=Context(accounts={
        "authority": supplier.pubkey(), "config": config, "provider": provider, "stake_vault": stake_vault,
        "authority_tokens": supplier_tokens, "token_program": TOKEN_PROGRAM_ID}))])

    customer = await funded(client, 1_000 * 10**9)
    customer_tokens = await create_ata(client, admin, customer.pubkey(), mint)
    await mint_tokens(client, admin, mint, customer_tokens, 10**15)

    async def one(i: int) -> tuple[Keypair, Pubkey, Pubkey, Pubkey]:
        key = Keypair()
        node = pda(b"node", bytes(key.pubkey()))
        await send(client, supplier, [program.instruction["register_node"](dict(
            gpu_model=1, gpu_count=1, vram_gb=80, region=1, price_per_gpu_hour=2 * IO, inventory_hash=[7] * 32),
            ctx=Context(accounts={"authority": supplier.pubkey(), "config": config, "provider": provider,
                                  "node_key": key.pubkey(), "node": node, "system_program": SYSTEM_PROGRAM_ID}))],
            [key])
        lease = pda(b"lease", bytes(customer.pubkey()), struct.pack("<Q", i))
        vault = pda(b"lease_vault", bytes(lease))
        await send(client, customer, [program.instruction["open_lease"](i, dict(
            gpu_model=0, min_vram_gb=24, gpu_count=1, region=0, max_price_per_gpu_hour=3 * IO,
            duration_seconds=24 * 3600), ctx=Context(accounts={
                "client": customer.pubkey(), "config": config, "lease": lease, "lease_vault": vault,
                "client_tokens": customer_tokens, "io_mint": mint, "token_program": TOKEN_PROGRAM_ID,
                "system_program": SYSTEM_PROGRAM_ID}))])
        await send(client, admin, [program.instruction["assign_lease"](bytes([1]), ctx=Context(
            accounts={"attester": admin.pubkey(), "config": config, "lease": lease},
            remaining_accounts=[AccountMeta(node, False, True), AccountMeta(provider, False, False)]))])
        return key, node, lease, vault

    made = []
    for start in range(0, nodes, 32):
        made += await asyncio.gather(*(one(i) for i in range(start, min(nodes, start + 32))))
    pairs = []
    for key, node, lease, vault in made:
        state = await program.account["Lease"].fetch(lease)
        share = next(a for a in state.assignments if a.node == node)
        pairs.append(Pair(key, node, lease, vault, share.settled_until))
    fixed = dict(attester=admin, config=config, provider=provider, provider_tokens=supplier_tokens,
                 treasury=treasury)
    return pairs, fixed


def settle_tx(p: Pair, f: dict, blockhash: Hash) -> Transaction:
    p.seq += 1
    start, end = p.settled_until, p.settled_until + 1
    p.settled_until = end
    report = struct.pack("<QqqQ", p.seq, start, end, 1)
    message = (USAGE_TAG + bytes(PROGRAM_ID) + bytes(p.lease) + bytes(p.node_key.pubkey()) + report)
    settle = Instruction(PROGRAM_ID, discriminator("settle_usage") + report, [
        AccountMeta(f["attester"].pubkey(), True, False),
        AccountMeta(f["config"], False, False),
        AccountMeta(p.lease, False, True),
        AccountMeta(p.vault, False, True),
        AccountMeta(p.node, False, False),
        AccountMeta(f["provider"], False, True),
        AccountMeta(f["provider_tokens"], False, True),
        AccountMeta(f["treasury"], False, True),
        AccountMeta(INSTRUCTIONS_SYSVAR, False, False),
        AccountMeta(TOKEN_PROGRAM_ID, False, False),
    ])
    msg = Message.new_with_blockhash([ed25519_ix(p.node_key, message), settle], f["attester"].pubkey(), blockhash)
    return Transaction([f["attester"]], msg, blockhash)


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
        self.writer.write(b"POST / HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                          b"Content-Length: %d\r\n\r\n" % (self.host.encode(), len(body)) + body)
        head = await self.reader.readuntil(b"\r\n\r\n")
        length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:"))
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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", help="a running node (default: start target/debug/gpunet-localnet)")
    ap.add_argument("--bin", default=os.environ.get("GPUNET_LOCALNET_BIN", str(Path(os.environ.get(
        "CARGO_TARGET_DIR", Path.home() / ".cache/gpunet/target")) / "debug" / "gpunet-localnet")))
    ap.add_argument("--clients", type=int, default=8, help="concurrent JSON-RPC clients")
    ap.add_argument("--nodes", type=int, default=128, help="(lease, node) pairs settled in parallel")
    ap.add_argument("--txs", type=int, default=3000, help="settle_usage transactions to send")
    args = ap.parse_args()

    proc = None
    url = args.url
    if url is None:
        port = free_port()
        log = open(Path(tempfile.gettempdir()) / "gpunet-localnet-bench.log", "wb")
        proc = subprocess.Popen([args.bin, "--rpc-port", str(port), "--ws-port", str(free_port())],
                                stdout=log, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
    try:
        async with AsyncClient(url) as client:
            for _ in range(200):
                try:
                    if (await client.is_connected()):
                        break
                except Exception:  # noqa: BLE001 - waiting for the node to come up
                    pass
                await asyncio.sleep(0.05)
            t = time.perf_counter()
            pairs, fixed = await setup(client, args.nodes)
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
        for k in range(per_pair):
            for i, p in enumerate(pairs):
                tx = settle_tx(p, fixed, blockhash)
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
        print(f"confirmed {len(latencies)}/{total} settle_usage transactions in {elapsed:.2f} s "
              f"with {args.clients} clients")
        print(f"throughput: {tps:.0f} tx/s (target >= {TARGET_TPS} tx/s: {'met' if tps >= TARGET_TPS else 'NOT met'})")
        print(f"confirmation latency: p50 {p50:.1f} ms, p99 {p99:.1f} ms")
        if errors:
            print(f"{len(errors)} errors, first: {errors[0]}")
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=20)


if __name__ == "__main__":
    asyncio.run(main())
