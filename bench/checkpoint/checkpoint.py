"""Benchmark (not a test): checkpoint upload and restore through the coordinator's checkpoint store,
over real HTTP on loopback (uvicorn serving coordinator.checkpoints' routes over the disk store, in
this process's thread; the node's side, worker.checkpoints.CheckpointStoreClient, in the main
thread), with random data (incompressible, every chunk new).

Per size: the first upload (every chunk sealed twice: once for its id, once as it is sent), an
upload of the same directory again (nothing sealed or sent: the node remembers the ids of the files
it sealed, by path, size and mtime, as the agent does), an upload after 1% of the data changed (the
changed file sealed again for its ids, one chunk sent), and a restore into an empty directory on
"another node" (every chunk's id and GCM tag checked); throughput in MiB/s of checkpoint data and
the share of the time in encryption (AES-256-GCM and the nonce's HMAC), hashing (SHA-256 ids) and
transfer (HTTP, with the store's writes/reads and the server's checks).

    .venv/bin/python bench/checkpoint/checkpoint.py [--mib 256,2048] [--dir /tmp] [--smoke]

--smoke: one 16 MiB checkpoint (two chunks), every phase and figure in about a second (for the
test suite: tests/test_bench_checkpoint.py); its figures are too small to mean anything.

Figures (2 shared CPU cores, other helpers' work on them; the server shares the client's process
and GIL, so "transfer" includes the server's streaming to a staging file, SHA-256 check and fsync):

    size      first upload         unchanged             1% changed            restore
    256 MiB   2.5 s   103 MiB/s    0.004 s (a stat)      0.63 s  409 MiB/s     2.0 s  129 MiB/s
    2 GiB     24.2 s  85 MiB/s     0.01 s                5.7 s   358 MiB/s     10.9 s 188 MiB/s

    first upload: encryption 21-32%, hashing 6-7%, transfer 49-62%, other 11-13%
    restore:      decryption 16-20%, hashing 11-13%, transfer 31-37%, other (writing the files) 30-42%

Failover with a 256 MiB checkpoint, real processes: bench/checkpoint/failover.py.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import tempfile
import threading
import time
from pathlib import Path

import uvicorn
from solders.keypair import Keypair
from starlette.applications import Starlette

from coordinator.checkpoints import CheckpointStore, DiskBlobs, checkpoint_routes
from gpunet.checkpoint import CHUNK_BYTES, lease_key
from worker.checkpoints import CheckpointStoreClient

LEASE = str(Keypair().pubkey())
CLIENT = Keypair()  # the lease's client, whose wallet the key derives from
MiB = 1 << 20


def serve(root: Path, nodes: set[str]) -> tuple[uvicorn.Server, threading.Thread, str]:
    store = CheckpointStore(DiskBlobs(root))

    async def authorize(lease: str, node: str) -> bool:
        return lease == LEASE and node in nodes

    async def signers(lease: str, rank: int) -> list[str]:
        # a 1-node lease: both nodes held its only rank (the old one first, the new one after it)
        return sorted(nodes) if rank == 0 else []

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(
            Starlette(routes=checkpoint_routes(store, authorize, signers)),
            host="127.0.0.1",
            port=port,
            log_level="warning",
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    return server, thread, f"http://127.0.0.1:{port}"


def shares(total: float, seal: float, hashing: float, transfer: float, crypto: str = "encryption") -> str:
    rest = max(0.0, total - seal - hashing - transfer)
    return (
        f"{crypto} {100 * seal / total:4.1f}%  hashing {100 * hashing / total:4.1f}%  "
        f"transfer {100 * transfer / total:4.1f}%  other {100 * rest / total:4.1f}%"
    )


def run(mib: int, base: Path) -> None:
    work = Path(tempfile.mkdtemp(prefix="gpunet-ckpt-bench-", dir=base))
    try:
        old, new = Keypair(), Keypair()
        server, thread, url = serve(work / "store", {str(old.pubkey()), str(new.pubkey())})
        src = work / "src"
        src.mkdir()
        with (src / "model.bin").open("wb") as f:
            for _ in range(mib):
                f.write(os.urandom(MiB))
        key = lease_key(CLIENT, LEASE)
        signers = {str(old.pubkey()), str(new.pubkey())}
        print(f"\n{mib} MiB checkpoint, {CHUNK_BYTES // MiB} MiB chunks ({-(-mib * MiB // CHUNK_BYTES)} chunks)")
        with CheckpointStoreClient(url, old, LEASE, key, signers=signers) as up:
            t = time.perf_counter()
            first = up.upload(src)
            total = time.perf_counter() - t
            print(
                f"  upload, first:       {total:7.2f} s  {mib / total:7.1f} MiB/s  sent {first.sent_chunks} chunks  "
                + shares(total, first.seconds_seal, first.seconds_hash, first.seconds_transfer)
            )
            t = time.perf_counter()
            same = up.upload(src, seq=first.seq + 1)
            total = time.perf_counter() - t
            print(
                f"  upload, unchanged:   {total:7.2f} s  {mib / total:7.1f} MiB/s  sent {same.sent_chunks} chunks  "
                + shares(total, same.seconds_seal, same.seconds_hash, same.seconds_transfer)
            )
            with (src / "model.bin").open("r+b") as f:
                f.seek(mib * MiB // 2)
                f.write(os.urandom(max(1, mib * MiB // 100)))
            t = time.perf_counter()
            changed = up.upload(src, seq=first.seq + 2)
            total = time.perf_counter() - t
            print(
                f"  upload, 1% changed:  {total:7.2f} s  {mib / total:7.1f} MiB/s  sent {changed.sent_chunks} chunks  "
                + shares(total, changed.seconds_seal, changed.seconds_hash, changed.seconds_transfer)
            )
        with CheckpointStoreClient(url, new, LEASE, key, signers=signers) as down:
            t = time.perf_counter()
            got = down.restore(work / "dst")
            total = time.perf_counter() - t
            assert got.seq == changed.seq and not got.refused, got
            print(
                f"  restore:             {total:7.2f} s  {mib / total:7.1f} MiB/s  "
                + shares(total, got.seconds_open, got.seconds_hash, got.seconds_transfer, crypto="decryption")
            )
        server.should_exit = True
        thread.join(10)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", default="256", help="checkpoint sizes in MiB, comma-separated (default 256)")
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()), help="where the data and store go")
    parser.add_argument("--smoke", action="store_true", help="one 16 MiB checkpoint: runs in seconds (CI)")
    args = parser.parse_args()
    print(f"{os.cpu_count()} CPUs; server and client in one process (server in a thread), loopback HTTP")
    for mib in [16] if args.smoke else (int(m) for m in args.mib.split(",")):
        run(mib, args.dir)


if __name__ == "__main__":
    main()
