"""A cluster job that proves its nodes met through the addresses the coordinator handed them, the way
torch.distributed's TCP rendezvous does (without torch: its wheels pull gigabytes of CUDA libraries):
rank 0 listens on exactly MASTER_ADDR:MASTER_PORT, every other rank connects there and sends its
RANK; once all WORLD_SIZE ranks are in, rank 0 sends the full list back to each. Every rank prints
"met ranks 0,1,... at MASTER_ADDR:MASTER_PORT" and exits 0; 1 after 60 s without it."""

import os
import socket
import sys
import time

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
master = (os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
print(
    " ".join(
        f"{k}={os.environ.get(k, '-')}"
        for k in [
            *("RANK", "WORLD_SIZE", "NODE_RANK", "LOCAL_WORLD_SIZE", "PET_NNODES", "PET_NODE_RANK"),
            *("PET_MASTER_ADDR", "PET_MASTER_PORT", "GPUNET_CLUSTER_PORTS"),
        ]
    ),
    flush=True,
)
deadline = time.monotonic() + 60

if rank == 0:
    with socket.create_server(master) as server:
        server.settimeout(60)
        peers = []
        while len(peers) < world - 1:
            conn, _ = server.accept()
            peers.append((int(conn.recv(16).decode()), conn))
        ranks = ",".join(str(r) for r in sorted([0, *(r for r, _ in peers)]))
        for _, conn in peers:
            conn.sendall(ranks.encode())
            conn.close()
else:
    while True:
        try:
            conn = socket.create_connection(master, timeout=5)
            break
        except OSError:
            if time.monotonic() > deadline:
                print(f"rank {rank}: nobody listens at {master[0]}:{master[1]}", file=sys.stderr, flush=True)
                sys.exit(1)
            time.sleep(0.2)
    with conn:
        conn.sendall(str(rank).encode())
        ranks = conn.recv(1024).decode()
print(f"met ranks {ranks} at {master[0]}:{master[1]}", flush=True)
