"""A small training-like job for the worker tests: counts steps, checkpoints each one in
$GPUNET_CHECKPOINT_DIR and resumes from the last checkpoint when started again.

env: STEPS (total), STEP_SECONDS, FAIL_AT (exit 1 once on reaching this step), IGNORE_TERM=1,
TRACE_FILE (each step appends "unix-time run rank" there, run naming this process: tests see from it
whether two copies ran at once; a host job writes only in its own directories, so a relative path).
"""

import os
import signal
import sys
import time
from pathlib import Path

checkpoint = Path(os.environ["GPUNET_CHECKPOINT_DIR"]) / "step"
steps, pause = int(os.environ.get("STEPS", "3")), float(os.environ.get("STEP_SECONDS", "0.05"))
fail_at = int(os.environ.get("FAIL_AT", "0"))
if os.environ.get("IGNORE_TERM") == "1":
    signal.signal(signal.SIGTERM, lambda *_: print("ignoring SIGTERM", flush=True))

step = int(checkpoint.read_text()) if checkpoint.exists() else 0
print(f"resumed from {step}" if step else "fresh start", flush=True)
print(
    "env "
    + " ".join(
        f"{k}={os.environ.get(k, '-')}"
        for k in (
            "CUDA_VISIBLE_DEVICES",
            "GPUNET_LEASE",
            "RANK",
            "WORLD_SIZE",
            "MASTER_ADDR",
            "MASTER_PORT",
            "MODE",
            "SECRET_OF_THE_AGENT",
        )
    ),
    file=sys.stderr,
    flush=True,
)
print(f"pid {os.getpid()}", file=sys.stderr, flush=True)
run = f"{os.getpid()}.{time.time_ns()}"  # sandboxed jobs have pids of their own namespace
while step < steps:
    time.sleep(pause)
    step += 1
    tmp = checkpoint.with_suffix(".tmp")
    tmp.write_text(str(step))
    tmp.replace(checkpoint)  # atomic: a kill never leaves half a checkpoint
    print(f"step {step}", flush=True)
    if trace := os.environ.get("TRACE_FILE"):
        with open(trace, "a") as f:
            f.write(f"{time.time():.3f} {run} {os.environ.get('RANK', '0')}\n")
    if step == fail_at and not (checkpoint.parent / "failed-once").exists():
        (checkpoint.parent / "failed-once").touch()
        print("failing on purpose", file=sys.stderr, flush=True)
        sys.exit(1)
print("done", flush=True)
