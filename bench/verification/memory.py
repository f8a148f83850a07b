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
match the commitment, a replay of an old seed's answers. With --real-lane N, the recomputation's
longest chain on one lane of N blocks, as a share of the lane and so as a time on a real lane
(LANE_ANSWER_DEADLINES answer deadlines long, whatever the step's time) against the real answer
deadline (the lane's length is what makes that chain long: it grows with the lane). That lane is
its dependency graph only: each block's parents drawn by vram.parents_of from random words, as
the blocks' pseudo-random first words would draw them, so a real lane's length takes seconds.

    .venv/bin/python bench/verification/memory.py [--honest 1000] [--lies 50] [--real-lane 2000000] [--smoke]

The fill here is the reference's (numpy). The GPU kernel's figures: bench/verification/
verification.py --backend simulator (under numba's CUDA simulator, against this reference) and
--backend cupy (on a GPU, against REAL_STEP_SECONDS and the bandwidth assumed).
"""

from __future__ import annotations

import argparse
import dataclasses
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
        forged = filled.blocks.copy()
        forged[:, w.blocks // 2 :] = np.random.default_rng().integers(0, 2**64, forged[:, w.blocks // 2 :].shape,
                                                                      dtype=np.uint64)  # fmt: skip
        bad = vram.Filled(w, forged, vram.block_digests(forged), filled.parents)
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


def _graph(blocks: int, rng: np.random.Generator) -> vram.Filled:
    """One lane's dependency graph without its contents: block j's parents drawn by parents_of's
    rule from random words in place of block j-1's first words (all recompute_cost reads)."""
    w = vram.MemoryWorkload(v.new_seed(), 1, blocks, vram.BLOCK_BYTES, 1.0, True)
    j = np.arange(1, blocks, dtype=np.uint64)[:, None]
    bits = np.array([int(x).bit_length() for x in j[:, 0]], dtype=np.uint64)[:, None]
    words = rng.integers(0, 2**64, (blocks - 1, vram.PARENTS), dtype=np.uint64, endpoint=False)
    low = np.uint64(1) << (words % bits)
    high = np.minimum(low * np.uint64(2) - np.uint64(1), j)
    parents = np.full((1, blocks, vram.PARENTS), -1, dtype=np.int64)
    parents[0, 1:] = (j - low - (words >> np.uint64(8)) % (high - low + np.uint64(1))).astype(np.int64)
    empty = np.zeros((1, 0, vram.BLOCK_WORDS), dtype=np.uint64)
    return vram.Filled(w, empty, np.zeros(0, dtype=np.uint32), parents)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--honest", type=int, default=1000, help="honest simulated challenges for the false positives")
    parser.add_argument("--lies", type=int, default=50, help="challenges per kind of lie")
    parser.add_argument("--real-lane", type=int, default=0, help="also measure the chain on one lane this long "
                        f"({vram.lane_blocks()} is a real lane at the assumed step: a minute or so here)")  # fmt: skip
    parser.add_argument("--smoke", action="store_true", help="a few of everything: a run that cannot rot")
    args = parser.parse_args()
    draws = 200
    if args.smoke:
        args.honest, args.lies, args.real_lane, draws = 5, 2, args.real_lane or 4096, 10

    print(f"memory check: {vram.MEMORY_FRACTION:.0%} of the claimed VRAM, {vram.PARENTS} parents per block, "
          f"{vram.OPENINGS} blocks named")  # fmt: skip
    print("model    real fill (lanes x blocks x bytes)   expected  sim fill   prover CPU  verifier CPU  ratio"
          "  real work ratio")  # fmt: skip
    for model in GPU_MODELS[:2] if args.smoke else GPU_MODELS:
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
    print(f"(real: the expected fill is a lane's {vram.lane_blocks()} steps of an assumed "
          f"{vram.REAL_STEP_SECONDS * 1e6:.0f} us ({vram.LANE_ANSWER_DEADLINES} answer deadlines of "
          f"{vram.REAL_ANSWER_SECONDS:.0f} s); a measured step changes the lanes' length, not that time)")  # fmt: skip

    w = _workload()
    filled = vram.fill(w)
    print(f"\nsimulated H100 short of memory: fill {SECONDS:.0f} s, answer deadline {w.answer_deadline:.1f} s; "
          f"least answer time over {draws} challenges each")  # fmt: skip
    for share in (1.0, 0.75, 0.6, 0.5, 0.4, 0.25, 0.125):
        kept = min(1.0, share / vram.MEMORY_FRACTION)
        times = []
        for _ in range(draws):
            stored = vram.kept_share(w, kept) if kept < 1 else np.ones((w.lanes, w.blocks), bool)
            times.append(vram.short_answer_seconds(filled, stored, vram.choose_blocks(w)))
        a = np.array(times)
        caught = (a > w.answer_deadline).mean()
        print(f"  holds {share:>6.1%} of its VRAM (keeps {kept:>5.1%} of the blocks): answer min {a.min():5.2f} s, "
              f"median {np.median(a):5.2f} s -> caught in {caught:.0%}")  # fmt: skip

    if args.real_lane:
        t = time.monotonic()
        lane = _graph(args.real_lane, np.random.default_rng())
        lane_seconds = vram.LANE_ANSWER_DEADLINES * vram.REAL_ANSWER_SECONDS
        print(f"\none lane of {args.real_lane} blocks (its graph drawn in {time.monotonic() - t:.0f} s here): the "
              f"longest chain a GPU short of memory recomputes, as a share of the lane, on a real lane of "
              f"{lane_seconds:.0f} s against the {vram.REAL_ANSWER_SECONDS:.0f} s answer deadline")  # fmt: skip
        for share in (0.6, 0.5, 0.4, 1 / 3, 0.25):
            kept = share / vram.MEMORY_FRACTION
            w = lane.workload
            depths = [vram.recompute_cost(lane, vram.kept_share(w, kept), vram.choose_blocks(w))[1] for _ in range(3)]
            least = min(depths) / args.real_lane * lane_seconds
            verdict = "caught" if least > vram.REAL_ANSWER_SECONDS else "NOT caught"
            print(f"  holds {share:.0%} of its VRAM: chain {min(depths) / args.real_lane:.3f} of the lane -> at least "
                  f"{least:.1f} s -> {verdict}")  # fmt: skip

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
    if total:
        rate = caught / total
        met = "met" if rate >= TARGET_DETECTION else "MISSED"
        print(f"detection rate: {rate:.1%}  target {TARGET_DETECTION:.0%}: {met}")


if __name__ == "__main__":
    main()
