"""Benchmark (not a test): GPU verification's costs and verdicts (gpunet.verification).

Prints, per model: the prover's time on the reference path (numpy on this CPU), the verifier's
CPU time for its openings, and their ratio (the work is O(products * n^2 * depth) against the
verifier's O(openings * n * depth)); for the simulated shape, the round trip through the worker's
prover (emulating the model's speed); then the false positives over honest simulated challenges
(target 0) and the detection rate over the lie matrix (target 100 %): a GPU slower than claimed,
corrupted rows, skipped work, answers that do not match the commitment, a replayed answer.

    .venv/bin/python bench/verification/verification.py [--honest 1000]

No GPU backend exists yet: the real shape is timed on the CPU for the verifier's side only. The
memory check's figures: bench/verification/memory.py.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from gpunet import verification as v
from gpunet.catalog import GPU_MODELS, gpu_model
from gpunet.protocol import GpuInfo, Inventory, Verify, VerifyOpen
from worker.verify import Prover

TARGET_FALSE_POSITIVES = 0
TARGET_DETECTION = 1.0


def _honest(w: v.Workload) -> str | None:
    digests = v.digests_of(w)
    rows = v.choose_rows(w)
    return v.check_all(w, v.commit(digests), [v.open_row(w, digests, k, r) for k, r in rows], rows)


def _lie(kind: str, w: v.Workload) -> str | None:
    digests = v.digests_of(w)
    if kind == "corrupted rows (half of them)":
        bad = digests.copy()
        bad[::2] ^= 1
        rows = v.choose_rows(w)
        return v.check_all(w, v.commit(bad), [v.open_row(w, bad, k, r) for k, r in rows], rows)
    if kind == "skipped work (random digests)":
        guessed = np.frombuffer(secrets.token_bytes(4 * len(digests)), dtype=np.uint32).copy()
        rows = v.choose_rows(w)
        return v.check_all(w, v.commit(guessed), [v.open_row(w, guessed, k, r) for k, r in rows], rows)
    if kind == "openings not of the commitment":
        other = digests.copy()
        other[-1] ^= 1
        rows = v.choose_rows(w)
        return v.check_all(w, v.commit(digests), [v.open_row(w, other, k, r) for k, r in rows[:1]] + [
            v.open_row(w, digests, k, r) for k, r in rows[1:]], rows)  # fmt: skip
    if kind == "replayed answer (another seed)":
        old = v.Workload(v.new_seed(), w.n, w.depth, w.products, w.expected_seconds, True)
        replayed = v.digests_of(old)
        rows = v.choose_rows(w)
        return v.check_all(w, v.commit(replayed), [v.open_row(w, replayed, k, r) for k, r in rows], rows)
    raise ValueError(kind)


def _inventory(model: str) -> Inventory:
    gpu = GpuInfo(index=0, uuid="GPU-bench", name=f"Simulated {model}", model=model, vram_mib=1024,
                  compute_capability="0.0", pcie_gen=0, pcie_width=0, power_limit_w=0)  # fmt: skip
    return Inventory(driver_version="simulated", cuda_version="simulated", simulated=True, gpus=[gpu])


async def _round_trip(claimed: str, actual: str, seconds: float) -> tuple[float, float, bool]:
    """(seconds to the commitment, the deadline, the openings hold) for a simulated `actual` GPU
    answering a challenge sized for `claimed`."""
    w = v.workload_for(gpu_model(claimed), v.new_seed(), simulated=True, seconds=seconds)
    slowdown = v.simulated_seconds(w, gpu_model(actual)) / v.simulated_seconds(w, gpu_model(claimed))
    prover = Prover(_inventory(claimed), slowdown=slowdown)
    challenge = Verify(id=secrets.token_hex(16), gpu=0, seed=w.seed.hex(), n=w.n, depth=w.depth,
                       products=w.products, expected_seconds=w.expected_seconds)  # fmt: skip
    started = time.monotonic()
    commit = await prover.commit(challenge, True)
    elapsed = time.monotonic() - started
    rows = v.choose_rows(w)
    answer = prover.open(VerifyOpen(id=challenge.id, rows=[[k, r] for k, r in rows]), True)
    openings = [v.Opening(o.product, o.row, o.chunk, [bytes.fromhex(p) for p in o.path]) for o in answer.openings]
    return elapsed, w.deadline, v.check_all(w, bytes.fromhex(commit.root), openings, rows) is None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--honest", type=int, default=1000, help="honest simulated challenges for the false positives")
    parser.add_argument("--lies", type=int, default=50, help="challenges per kind of lie")
    args = parser.parse_args()

    print("model     shape (n x depth x products)   expected  prover (CPU)  verifier CPU  prover/verifier work")
    for model in GPU_MODELS:
        w = v.workload_for(model, v.new_seed(), simulated=True, seconds=1.5)
        t = time.process_time()
        digests = v.digests_of(w)
        prove = time.process_time() - t
        root, rows = v.commit(digests), v.choose_rows(w)
        openings = [v.open_row(w, digests, k, r) for k, r in rows]
        t = time.process_time()
        assert v.check_all(w, root, openings, rows) is None
        verify = time.process_time() - t
        real = v.workload_for(model, v.new_seed(), simulated=False, seconds=8.0)
        t = time.process_time()
        for k, r in v.choose_rows(real):  # the verifier's whole cost: B once, then each row (a wrong chunk here)
            v.check_opening(real, b"\0" * 32, v.Opening(k, r, [0] * v.CHUNK, []))
        verify_real = time.process_time() - t
        shapes = (f"sim {w.n}x{w.depth}x{w.products}", f"real {real.n}x{real.depth}x{real.products}")
        ratios = (w.flops / (v.OPENINGS * 2 * w.n * w.depth), real.flops / (v.OPENINGS * 2 * real.n * real.depth))
        print(f"{model.name:<9} {shapes[0]:<22} {w.expected_seconds:>6.2f} s  {prove:>9.3f} s  {verify:>10.4f} s"
              f"  {ratios[0]:>12.0f}x")  # fmt: skip
        print(f"{'':<9} {shapes[1]:<22} {real.expected_seconds:>6.2f} s  {'(no GPU)':>11}  {verify_real:>10.2f} s"
              f"  {ratios[1]:>12.0f}x")  # fmt: skip

    print("\nround trips through the worker's prover (simulated, 1.5 s at the claimed speed):")
    for claimed, actual in (("H100", "H100"), ("H100", "A100"), ("A100", "RTX4090"), ("RTX4090", "RTX3090")):
        elapsed, deadline, holds = asyncio.run(_round_trip(claimed, actual, 1.5))
        verdict = "passes" if holds and elapsed <= deadline else "caught (deadline)" if elapsed > deadline else "caught"
        print(f"  a {actual:<8} claiming {claimed:<8}: {elapsed:5.2f} s to commit, deadline {deadline:5.2f} s"
              f" -> {verdict}")  # fmt: skip

    t = time.monotonic()
    false_positives = sum(_honest(v.workload_for(gpu_model("H100"), v.new_seed(), simulated=True, seconds=0.05))
                          is not None for _ in range(args.honest))  # fmt: skip
    met = "met" if false_positives <= TARGET_FALSE_POSITIVES else "MISSED"
    print(f"\nfalse positives: {false_positives} of {args.honest} honest challenges ({time.monotonic() - t:.1f} s)"
          f"  target {TARGET_FALSE_POSITIVES}: {met}")  # fmt: skip
    kinds = ["corrupted rows (half of them)", "skipped work (random digests)", "openings not of the commitment",
             "replayed answer (another seed)"]  # fmt: skip
    caught = total = 0
    for kind in kinds:
        found = sum(_lie(kind, v.workload_for(gpu_model("H100"), v.new_seed(), simulated=True, seconds=0.05))
                    is not None for _ in range(args.lies))  # fmt: skip
        caught, total = caught + found, total + args.lies
        print(f"  {kind:<34} caught {found} of {args.lies}")
    rate = caught / total
    print(
        f"detection rate: {rate:.1%}  target {TARGET_DETECTION:.0%}: {'met' if rate >= TARGET_DETECTION else 'MISSED'}"
        " (plus the slower GPUs above, caught by the deadline)"
    )


if __name__ == "__main__":
    main()
