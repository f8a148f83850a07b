"""Benchmark (not a test): GPU verification's costs and verdicts (gpunet.verification, gpunet.vram).

    .venv/bin/python bench/verification/verification.py [--backend numpy|simulator|cupy] [--smoke]

--backend numpy (the default): per model, the prover's time on the reference path (numpy on this
CPU, the simulated shape), the verifier's CPU time for its openings, and their ratio (the work is
O(products * n^2 * depth) against the verifier's O(openings * n * depth)); the real shape's verifier
time; the round trip through the worker's prover (emulating the model's speed); then the false
positives over honest simulated challenges (target 0: an 8-GPU node's challenges at once through
the worker's prover, at the coordinator's default size, the deadline applied, with every core of
this machine kept busy by another process) and the detection rate over the lie matrix
(target 100 %): a GPU slower than claimed, corrupted rows, skipped work, answers that do not match
the commitment, a replayed answer.

--backend simulator: the memory check's fill kernel (worker/gpu/memory.py) under numba's CUDA
simulator at a small size, against the numpy verifier: the prover's time, the verifier's, their
ratio (the simulator runs a kernel's threads as Python threads: its time says nothing of a GPU's).

--backend cupy (on a machine with an NVIDIA GPU and gpunet[gpu]; bench/verification/gpu-check
runs it): device 0's compute and memory checks at their real size, the measured TF32 efficiency
and fill time against what the deadlines assume (gpunet.catalog, real_efficiency,
REAL_STEP_SECONDS), and the honest margin left to each deadline.

The memory check's own figures on the reference path: bench/verification/memory.py.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import multiprocessing
import os
import re
import secrets
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from gpunet import verification as v
from gpunet import vram
from gpunet.catalog import GPU_MODELS, GpuModel, gpu_model
from gpunet.protocol import GpuInfo, Inventory, Verify, VerifyOpen
from worker.verify import Prover

TARGET_FALSE_POSITIVES = 0
TARGET_DETECTION = 1.0


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


CHALLENGE_SECONDS = 1.5  # the coordinator's default for simulated GPUs (GPUNET_VERIFY_SIMULATED_SECONDS)


@contextlib.contextmanager
def _busy_cpu() -> Iterator[int]:
    """One process spinning on each core while the body runs: an honest node must not miss a
    deadline because its machine is busy with something else (its own jobs, say)."""
    count = os.cpu_count() or 1
    spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(count)]
    for p in spinners:
        p.start()
    try:
        yield count
    finally:
        for p in spinners:
            p.terminate()
            p.join()


def _spin() -> None:
    while True:
        pass


async def _honest_node(challenges: int, gpus: int) -> tuple[int, int, float, float]:
    """(past the deadline, openings that do not hold, the slowest commitment's seconds, the deadline)
    over `challenges` honest challenges of an
    H100 node, `gpus` of them at a time as the coordinator sends them (one per GPU), each timed from
    its sending to its commitment against the deadline, as the coordinator times it."""
    missed = wrong = 0
    slowest = deadline = 0.0
    for start in range(0, challenges, gpus):
        rounds = [_round_trip("H100", "H100", CHALLENGE_SECONDS) for _ in range(min(gpus, challenges - start))]
        for elapsed, deadline, holds in await asyncio.gather(*rounds):
            missed += elapsed > deadline
            wrong += not holds
            slowest = max(slowest, elapsed)
    return missed, wrong, slowest, deadline


def _device(smoke: bool) -> None:
    """Device 0's checks at their real size (cupy), against the catalog's assumptions."""
    import cupy

    from worker.gpu import compute

    name = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    model = next((m for m in GPU_MODELS if re.search(m.nvml_pattern, name)), None)
    if model is None:
        sys.exit(f"device 0 is a {name}, not a listed model (gpunet.catalog): nothing to compare against")
    print(f"device 0: {name} ({model.name}: dense TF32 {model.tf32_tflops:g} TFLOP/s, {model.memory_tbps:g} TB/s)")
    w = v.workload_for(model, v.new_seed(), simulated=False, seconds=1.0 if smoke else 8.0)
    compute.digests(v.Workload(w.seed, w.n, w.depth, 1, w.expected_seconds, False), 0)  # compile, allocate
    t = time.monotonic()
    digests = compute.digests(w, 0)
    prove = time.monotonic() - t
    root, rows = v.commit(digests), v.choose_rows(w)
    t = time.process_time()
    problem = v.check_all(w, root, [v.open_row(w, digests, k, r) for k, r in rows], rows)
    verify = time.process_time() - t
    efficiency = w.flops / prove / (model.tf32_tflops * 1e12)
    print(
        f"compute: {w.n}x{w.depth}x{w.products} products in {prove:.2f} s (expected {w.expected_seconds:.2f} s,"
        f" deadline {w.deadline:.2f} s): measured efficiency {efficiency:.1%} of the TF32 peak against"
        f" {v.real_efficiency(model):.0%} assumed; honest margin {w.deadline - prove:+.2f} s;"
        f" verifier {verify:.2f} s CPU ({prove / verify:.0f}x); answer {'holds' if problem is None else problem}"
    )
    _device_memory(model, smoke)


def _device_memory(model: GpuModel, smoke: bool) -> None:
    from worker.gpu import memory

    w = vram.memory_workload_for(model, v.new_seed(), simulated=False)
    if smoke:
        w = dataclasses.replace(w, blocks=max(2, w.blocks // 64), expected_seconds=w.expected_seconds / 64)
    t = time.monotonic()
    filled = memory.fill_on_device(w, 0)
    root = filled.root()
    prove = time.monotonic() - t
    asked = vram.choose_blocks(w)
    t = time.monotonic()
    opened = filled.open_blocks(asked)
    answer = time.monotonic() - t
    t = time.process_time()
    problem = vram.check_memory(w, root, opened, asked)
    verify = time.process_time() - t
    step = prove / w.blocks
    bandwidth = w.total_blocks * w.block_bytes * (2 + vram.PARENTS) / prove / 1e12
    print(
        f"memory: {w.lanes} lanes x {w.blocks} blocks ({w.bytes / 2**30:.1f} GiB) filled and committed in"
        f" {prove:.2f} s (expected {w.expected_seconds:.2f} s, deadline {w.deadline:.2f} s): a step"
        f" {step * 1e6:.2f} us against REAL_STEP_SECONDS {vram.REAL_STEP_SECONDS * 1e6:g} us, traffic"
        f" {bandwidth:.3f} TB/s of the {model.memory_tbps:g} TB/s peak; honest margin {w.deadline - prove:+.2f} s;"
        f" answer {answer:.3f} s (deadline {w.answer_deadline:.1f} s); verifier {verify:.3f} s CPU;"
        f" {'holds' if problem is None else problem}"
    )


def _simulator() -> None:
    """The memory check's kernel under numba's CUDA simulator, against the numpy verifier."""
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"  # before numba is imported
    from worker.gpu import memory

    w = dataclasses.replace(
        vram.memory_workload_for(gpu_model("H100"), v.new_seed(), simulated=True), lanes=2, blocks=32
    )
    t = time.process_time()
    filled = memory.fill_on_device(w, 0)
    root = filled.root()
    prove = time.process_time() - t
    asked = vram.choose_blocks(w)
    opened = filled.open_blocks(asked)
    t = time.process_time()
    problem = vram.check_memory(w, root, opened, asked)
    verify = time.process_time() - t
    t = time.process_time()
    reference = vram.fill(w)
    numpy_prove = time.process_time() - t
    print(
        f"memory kernel under the CUDA simulator, {w.lanes} lanes x {w.blocks} blocks: prover {prove:.2f} s CPU,"
        f" verifier {verify:.4f} s ({prove / verify:.0f}x), the numpy reference's fill {numpy_prove:.3f} s;"
        f" same root as the reference: {root == reference.root()}; answer {'holds' if problem is None else problem}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=("numpy", "simulator", "cupy"), default="numpy")
    parser.add_argument("--smoke", action="store_true", help="a few challenges and models: a run that cannot rot")
    parser.add_argument("--honest", type=int, default=1000, help="honest simulated challenges for the false positives")
    parser.add_argument("--gpus", type=int, default=8, help="the honest node's GPUs, challenged at once")
    parser.add_argument("--lies", type=int, default=50, help="challenges per kind of lie")
    args = parser.parse_args()
    if args.backend == "cupy":
        return _device(args.smoke)
    if args.backend == "simulator":
        return _simulator()
    if args.smoke:
        args.honest, args.lies = 20, 3

    print("model     shape (n x depth x products)   expected  prover (CPU)  verifier CPU  prover/verifier work")
    for model in GPU_MODELS[:2] if args.smoke else GPU_MODELS:
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
        print(f"{'':<9} {shapes[1]:<22} {real.expected_seconds:>6.2f} s  {'(on a GPU)':>11}  {verify_real:>10.2f} s"
              f"  {ratios[1]:>12.0f}x")  # fmt: skip

    print("\nround trips through the worker's prover (simulated, 1.5 s at the claimed speed):")
    for claimed, actual in (("H100", "H100"), ("H100", "A100"), ("A100", "RTX4090"), ("RTX4090", "RTX3090")):
        elapsed, deadline, holds = asyncio.run(_round_trip(claimed, actual, 1.5))
        verdict = "passes" if holds and elapsed <= deadline else "caught (deadline)" if elapsed > deadline else "caught"
        print(f"  a {actual:<8} claiming {claimed:<8}: {elapsed:5.2f} s to commit, deadline {deadline:5.2f} s"
              f" -> {verdict}")  # fmt: skip

    t = time.monotonic()
    with _busy_cpu() as busy:
        missed, wrong, slowest, deadline = asyncio.run(_honest_node(args.honest, args.gpus))
    false_positives = missed + wrong
    met = "met" if false_positives <= TARGET_FALSE_POSITIVES else "MISSED"
    print(f"\nfalse positives: {false_positives} of {args.honest} honest challenges ({time.monotonic() - t:.1f} s)"
          f"  target {TARGET_FALSE_POSITIVES}: {met}")  # fmt: skip
    print(f"  an honest simulated {args.gpus}-GPU H100 node, every GPU challenged at once through the worker's"
          f" prover at the default {CHALLENGE_SECONDS} s, under {busy} busy processes (one a core):"
          f" {missed} past the deadline, {wrong} with openings that do not hold; the slowest commitment"
          f" {slowest:.2f} s against the {deadline:.2f} s deadline")  # fmt: skip
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
