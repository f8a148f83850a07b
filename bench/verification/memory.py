"""Benchmark (not a test): GPU verification's memory check, its costs and verdicts (gpunet.vram).

Prints, per model: the fill's size (real and simulated), the prover's time over the simulated fill
on the reference path (hashlib on this CPU), the verifier's CPU time to check the named blocks and
their ratio, and the same ratio in hashes for the real fill (the prover hashes every block, the
verifier 2 + PARENTS per named block); the real
fill's expected time at the model's bandwidth against the answer deadline; then, for simulated
GPUs holding a share of their model's VRAM, the least time their answer takes (recomputing what
they could not keep) against the answer deadline, with the share caught; then the false positives
over honest simulated challenges (target 0) and the detection rate over the lie matrix (target
100 %): short of memory (a quarter of it), blocks filled with something else, answers that do not
match the commitment, a replay of an old seed's answers. With --real-lane, the recomputation's
longest chain on one lane of a real length, as a time at the assumed step against the real answer
deadline (the lane's length is what makes that chain long: it grows with the lane).

    .venv/bin/python bench/verification/memory.py [--honest 1000] [--lies 50] [--real-lane 2097152]

No GPU backend exists yet: the real shapes are sized, not run.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import secrets
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from gpunet import verification as v
from gpunet import vram
from gpunet.catalog import GPU_MODELS, gpu_model

TARGET_FALSE_POSITIVES = 0
TARGET_DETECTION = 1.0
SECONDS = 10.0  # the simulated fill's time (the coordinator's default verify_simulated_memory_seconds)


def _workload() -> vram.MemoryWorkload:
    return vram.memory_workload_for(gpu_model("H100"), v.new_seed(), simulated=True, simulated_seconds=SECONDS)


def _honest(filled: vram.Filled) -> str | None:
    asked = vram.choose_blocks(filled.workload)
    return vram.check_memory(filled.workload, filled.root(), vram.open_blocks(filled, asked), asked)


def _caught(kind: str, filled: vram.Filled) -> bool:
    """Whether the lie is caught: by the answer's deadline or the check."""
    w = filled.workload
    asked = vram.choose_blocks(w)
    if kind == "short of memory (a quarter of it)":
        stored = vram.kept_share(w, 0.25 / vram.MEMORY_FRACTION)
        return vram.short_answer_seconds(filled, stored, asked) > w.answer_deadline
    if kind == "blocks filled with something else":
        # Half the blocks of every lane (from its middle on) random: their digests committed as they are.
        forged = [lane[: w.blocks // 2] + [secrets.token_bytes(w.block_bytes) for _ in lane[w.blocks // 2 :]]
                  for lane in filled.blocks]  # fmt: skip
        raw = b"".join(hashlib.sha256(b).digest()[:8] for lane in forged for b in lane)
        bad = vram.Filled(w, forged, np.frombuffer(raw, dtype="<u4").copy(), filled.parents)
        return vram.check_memory(w, bad.root(), vram.open_blocks(bad, asked), asked) is not None
    if kind == "answers not of the commitment":
        opened = vram.open_blocks(filled, asked)
        first = next(i for i, o in enumerate(opened) if o.content is not None) if any(
            o.content is not None for o in opened) else None  # fmt: skip
        if first is None:  # only blocks 0 named: a wrong digest word instead
            opened[0] = dataclasses.replace(opened[0], chunk=[c ^ 1 for c in opened[0].chunk])
        else:
            opened[first] = dataclasses.replace(opened[first], content=secrets.token_bytes(w.block_bytes))
        return vram.check_memory(w, filled.root(), opened, asked) is not None
    if kind == "replay of an old seed's answers":
        old = vram.fill(dataclasses.replace(w, seed=v.new_seed()))
        return vram.check_memory(w, old.root(), vram.open_blocks(old, asked), asked) is not None
    raise ValueError(kind)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--honest", type=int, default=1000, help="honest simulated challenges for the false positives")
    parser.add_argument("--lies", type=int, default=50, help="challenges per kind of lie")
    parser.add_argument("--real-lane", type=int, default=0, help="also measure the chain on one lane this long "
                        "(2097152 is a real lane: minutes here)")  # fmt: skip
    args = parser.parse_args()

    print(f"memory check: {vram.MEMORY_FRACTION:.0%} of the claimed VRAM, {vram.PARENTS} parents per block, "
          f"{vram.OPENINGS} blocks named")  # fmt: skip
    print("model    real fill (lanes x blocks x bytes)   expected  sim fill   prover CPU  verifier CPU  ratio"
          "  real work ratio")  # fmt: skip
    for model in GPU_MODELS:
        real = vram.memory_workload_for(model, v.new_seed(), simulated=False)
        w = vram.memory_workload_for(model, v.new_seed(), simulated=True)
        t = time.process_time()
        filled = vram.fill(w)
        prove = time.process_time() - t
        root, asked = filled.root(), vram.choose_blocks(w)
        opened = vram.open_blocks(filled, asked)
        t = time.process_time()
        assert vram.check_memory(w, root, opened, asked) is None
        verify = time.process_time() - t
        shape = f"{real.lanes}x{real.blocks}x{real.block_bytes} = {real.bytes / 2**30:.0f} GiB"
        print(f"{model.name:<8} {shape:<36} {real.expected_seconds:>6.2f} s  {w.bytes / 2**20:>5.2f} MiB"
              f"  {prove:>8.3f} s  {verify:>10.4f} s  {prove / verify:>5.0f}x"
              f"  {real.total_blocks / (vram.OPENINGS * (2 + vram.PARENTS)):>12.0f}x")  # fmt: skip
    print(f"(real: the expected fill is a lane's {vram.REAL_LANE_BLOCKS} steps of an assumed "
          f"{vram.REAL_STEP_SECONDS * 1e6:.0f} us, against an answer deadline of {vram.REAL_ANSWER_SECONDS:.0f} s; "
          "no GPU backend has measured the step yet)")  # fmt: skip

    w = _workload()
    filled = vram.fill(w)
    print(f"\nsimulated H100 short of memory: fill {SECONDS:.0f} s, answer deadline {w.answer_deadline:.1f} s; "
          "least answer time over 200 challenges each")  # fmt: skip
    for share in (1.0, 0.75, 0.6, 0.5, 0.4, 0.25, 0.125):
        kept = min(1.0, share / vram.MEMORY_FRACTION)
        times = []
        for _ in range(200):
            stored = vram.kept_share(w, kept) if kept < 1 else np.ones((w.lanes, w.blocks), bool)
            times.append(vram.short_answer_seconds(filled, stored, vram.choose_blocks(w)))
        a = np.array(times)
        caught = (a > w.answer_deadline).mean()
        print(f"  holds {share:>6.1%} of its VRAM (keeps {kept:>5.1%} of the blocks): answer min {a.min():5.2f} s, "
              f"median {np.median(a):5.2f} s -> caught in {caught:.0%}")  # fmt: skip

    if args.real_lane:
        lane = vram.MemoryWorkload(v.new_seed(), 1, args.real_lane, 64, 1.0, True)  # small blocks: same graph
        t = time.monotonic()
        filled = vram.fill(lane)
        print(f"\none real lane of {args.real_lane} blocks (filled in {time.monotonic() - t:.0f} s here): the longest "
              f"chain a GPU short of memory recomputes, at the assumed {vram.REAL_STEP_SECONDS * 1e6:.0f} us a step, "
              f"against the {vram.REAL_ANSWER_SECONDS:.0f} s answer deadline")  # fmt: skip
        for share in (0.6, 0.5, 0.4, 0.25):
            kept = share / vram.MEMORY_FRACTION
            depths = [vram.recompute_cost(filled, vram.kept_share(lane, kept), vram.choose_blocks(lane))[1]
                      for _ in range(3)]  # fmt: skip
            least = min(depths) * vram.REAL_STEP_SECONDS * vram.REAL_LANE_BLOCKS / args.real_lane
            verdict = "caught" if least > vram.REAL_ANSWER_SECONDS else "NOT caught"
            print(f"  holds {share:.0%} of its VRAM: chain {min(depths) / args.real_lane:.3f} of the lane -> at least "
                  f"{least:.1f} s on a lane of {vram.REAL_LANE_BLOCKS} -> {verdict}")  # fmt: skip

    t = time.monotonic()
    false_positives = sum(_honest(vram.fill(_workload())) is not None for _ in range(args.honest))
    met = "met" if false_positives <= TARGET_FALSE_POSITIVES else "MISSED"
    print(f"\nfalse positives: {false_positives} of {args.honest} honest memory challenges "
          f"({time.monotonic() - t:.1f} s)  target {TARGET_FALSE_POSITIVES}: {met}")  # fmt: skip
    kinds = ["short of memory (a quarter of it)", "blocks filled with something else", "answers not of the commitment",
             "replay of an old seed's answers"]  # fmt: skip
    caught = total = 0
    for kind in kinds:
        found = sum(_caught(kind, vram.fill(_workload())) for _ in range(args.lies))
        caught, total = caught + found, total + args.lies
        print(f"  {kind:<36} caught {found} of {args.lies}")
    rate = caught / total
    print(
        f"detection rate: {rate:.1%}  target {TARGET_DETECTION:.0%}: {'met' if rate >= TARGET_DETECTION else 'MISSED'}"
    )


if __name__ == "__main__":
    main()
