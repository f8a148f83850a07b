"""The demo's job: a small real training run that checkpoints every step and resumes from its
last checkpoint (on this node after a restart, or on another node after a failover).

Each rank fits y = 3x + 2 by gradient descent on its own shard of a synthetic dataset
(RANK / WORLD_SIZE), and writes {"step", "w", "b", "loss"} to $GPUNET_CHECKPOINT_DIR/state.json
atomically, so a kill never leaves half a checkpoint. With CHECKPOINT_MIB, the checkpoint also
holds that many MiB of random "weights" (weights.bin, and weights.sha256 its digest), written once
at a fresh start and checked byte for byte at a resume, as a real model's would be.
env: STEPS, STEP_SECONDS, CHECKPOINT_MIB.
"""

import hashlib
import json
import os
import random
import time
from pathlib import Path
from typing import Any

rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
steps, pause = int(os.environ.get("STEPS", "1000")), float(os.environ.get("STEP_SECONDS", "0.1"))
directory = Path(os.environ["GPUNET_CHECKPOINT_DIR"])
checkpoint = directory / "state.json"
weights, digest = directory / "weights.bin", directory / "weights.sha256"
mib = int(os.environ.get("CHECKPOINT_MIB", "0"))

rng = random.Random(rank)
data = [(x, 3 * x + 2 + rng.gauss(0, 0.1)) for x in (rng.uniform(-1, 1) for _ in range(256))]

state: dict[str, Any] = (
    json.loads(checkpoint.read_text()) if checkpoint.exists() else {"step": 0, "w": 0.0, "b": 0.0, "loss": None}
)
if mib and digest.exists():  # restored with the checkpoint: every byte checked
    h = hashlib.sha256()
    with weights.open("rb") as f:
        while part := f.read(1 << 20):
            h.update(part)
    if h.hexdigest() != digest.read_text().strip():
        raise SystemExit(f"rank {rank}: the checkpoint's weights do not match their sha256")
    print(
        f"rank {rank}: weights verified, {weights.stat().st_size >> 20} MiB, sha256 {h.hexdigest()[:16]}…", flush=True
    )
elif mib:  # written whole under another name, then renamed: a kill never leaves half of it
    h, tmp = hashlib.sha256(), directory / ".weights.tmp"
    with tmp.open("wb") as f:
        for _ in range(mib):
            part = os.urandom(1 << 20)
            h.update(part)
            f.write(part)
    tmp.replace(weights)
    (directory / ".sha.tmp").write_text(h.hexdigest())
    (directory / ".sha.tmp").replace(digest)
    print(f"rank {rank}: wrote {mib} MiB of weights, sha256 {h.hexdigest()[:16]}…", flush=True)
print(f"rank {rank}/{world}: " + (f"resumed from step {state['step']}" if state["step"] else "fresh start"), flush=True)
while state["step"] < steps:
    w, b = state["w"], state["b"]
    grad_w = sum(2 * (w * x + b - y) * x for x, y in data) / len(data)
    grad_b = sum(2 * (w * x + b - y) for x, y in data) / len(data)
    w, b = w - 0.1 * grad_w, b - 0.1 * grad_b
    loss = sum((w * x + b - y) ** 2 for x, y in data) / len(data)
    state = {"step": state["step"] + 1, "w": w, "b": b, "loss": loss}
    tmp = checkpoint.with_suffix(".tmp")
    tmp.write_text(json.dumps(state))
    tmp.replace(checkpoint)
    if state["step"] % 10 == 0:
        print(f"rank {rank}: step {state['step']} loss {loss:.5f} w {w:.3f} b {b:.3f}", flush=True)
    time.sleep(pause)
print(f"rank {rank}: done, w {state['w']:.3f} b {state['b']:.3f}", flush=True)
