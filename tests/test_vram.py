"""GPU verification's memory check (gpunet.vram) and the worker's prover of it (worker.verify): an
honest prover passes every time, and each lie is caught with its reason. The simulated path: the
reference fill on the CPU, simulated GPUs taking the fill time the challenge expects, and one that
holds less memory than its model taking as long as recomputing what it could not keep."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import math
import secrets
import time

import numpy as np
import pytest

from gpunet import verification as v
from gpunet import vram
from gpunet.catalog import gpu_model
from gpunet.protocol import (
    MAX_MESSAGE_BYTES,
    GpuInfo,
    Inventory,
    MemoryBlock,
    VerifyMemory,
    VerifyMemoryOpenings,
    VerifyOpen,
    encode,
)
from worker.verify import ChallengeRefused, Prover

H100 = gpu_model("H100")
# The root of the fill of seed 00 01 .. 0f, 2 lanes of 8 blocks (test_the_fill_of_a_fixed_seed_is_pinned).
PINNED_ROOT = "dde17f010c4f2c796c85c469b76b9fa744d2635c0b151e627b25c6d78d6cbe9c"


def _small() -> vram.MemoryWorkload:
    """A workload a few times smaller than a simulated H100's: hundreds of them run in seconds."""
    return vram.MemoryWorkload(v.new_seed(), 2, 48, vram.BLOCK_BYTES, 1.0, True)


def _answer(filled: vram.Filled, asked: list[tuple[int, int]]) -> str | None:
    return vram.check_memory(filled.workload, filled.root(), vram.open_blocks(filled, asked), asked)


def test_an_honest_prover_passes_hundreds_of_memory_challenges() -> None:
    failures = []
    for _ in range(300):
        filled = vram.fill(_small())
        if (reason := _answer(filled, vram.choose_blocks(filled.workload))) is not None:
            failures.append(reason)
    assert failures == []


def test_the_workload_fills_the_stated_share_of_the_claimed_vram() -> None:
    for model in (H100, gpu_model("T4"), gpu_model("B200")):
        real = vram.memory_workload_for(model, v.new_seed(), simulated=False)
        claimed = model.vram_gb * 2**30 * vram.MEMORY_FRACTION
        assert claimed * 0.99 <= real.bytes <= claimed
        simulated = vram.memory_workload_for(model, v.new_seed(), simulated=True)
        assert simulated.bytes <= claimed * vram.SIMULATED_MEMORY_SCALE
        assert simulated.deadline > simulated.expected_seconds > simulated.answer_deadline * 5


_M64 = 2**64 - 1


def _rotr(x: int, r: int) -> int:
    return ((x >> r) | (x << (64 - r))) & _M64


def _gb(v: list[int], a: int, b: int, c: int, d: int) -> None:
    """RFC 9106's GB without its multiplication (BlaMka's 2 * trunc(a) * trunc(b)): BLAKE2b's G."""
    v[a] = (v[a] + v[b]) & _M64
    v[d] = _rotr(v[d] ^ v[a], 32)
    v[c] = (v[c] + v[d]) & _M64
    v[b] = _rotr(v[b] ^ v[c], 24)
    v[a] = (v[a] + v[b]) & _M64
    v[d] = _rotr(v[d] ^ v[a], 16)
    v[c] = (v[c] + v[d]) & _M64
    v[b] = _rotr(v[b] ^ v[c], 63)


def _p16(v: list[int]) -> list[int]:
    v = list(v)
    for quarter in ((0, 4, 8, 12), (1, 5, 9, 13), (2, 6, 10, 14), (3, 7, 11, 15),
                    (0, 5, 10, 15), (1, 6, 11, 12), (2, 7, 8, 13), (3, 4, 9, 14)):  # fmt: skip
        _gb(v, *quarter)
    return v


def test_the_step_is_argon2s_permutation_in_plain_python() -> None:
    """vram.permute against RFC 9106's P written out word by word: each row of 8 16-byte registers
    (words 16i .. 16i + 15), then each column (registers i, i + 8, ..., i + 56: words 2i, 2i + 1,
    2i + 16, ...); a block is P(X) ^ X."""
    x = [secrets.randbits(64) for _ in range(vram.BLOCK_WORDS)]
    q = list(x)
    for i in range(8):
        q[16 * i : 16 * i + 16] = _p16(q[16 * i : 16 * i + 16])
    for i in range(8):
        column = [16 * r + 2 * i + k for r in range(8) for k in (0, 1)]
        for at, word in zip(column, _p16([q[c] for c in column]), strict=True):
            q[at] = word
    assert [int(w) for w in vram.permute(np.array(x, dtype=np.uint64))] == q
    # A block made by derive is that step over X = the tweak, for block 0.
    w = _small()
    tweak = [int(t) for t in vram.tweak(w.seed, np.array([1]), np.array([0]))[0]]
    block = np.frombuffer(vram.derive(w, 1, 0, None, []), dtype="<u8")
    permuted = vram.permute(np.array(tweak, dtype=np.uint64))
    assert [int(b) for b in block] == [int(p) ^ t for p, t in zip(permuted, tweak, strict=True)]


def test_the_fill_of_a_fixed_seed_is_pinned() -> None:
    """The construction's known answer: a change to the step, the tweak, the parents or the digest
    changes it (and must change worker/gpu/memory.py's kernels with it: tests/gpu)."""
    w = vram.MemoryWorkload(bytes(range(16)), 2, 8, vram.BLOCK_BYTES, 1.0, True)
    filled = vram.fill(w)
    assert filled.root().hex() == PINNED_ROOT
    digest = hashlib.blake2b(filled.content(1, 7), digest_size=8).digest()  # block 15 of the fill's 16
    assert digest == filled.digests[30:32].astype("<u4").tobytes()


def test_a_parent_read_twice_counts_once() -> None:
    """XOR would cancel a block read twice: each distinct input enters X once, so block 1 (whose
    predecessor and parents are all block 0) still depends on block 0."""
    assert vram.distinct(5, [4, 3, 3, 1, 4, 0, 3]) == [False, True, False, True, False, True, False]
    w = _small()
    a, b = secrets.token_bytes(w.block_bytes), secrets.token_bytes(w.block_bytes)
    assert vram.derive(w, 0, 1, a, [a] * vram.PARENTS) != vram.derive(w, 0, 1, b, [b] * vram.PARENTS)


def test_blocks_of_another_size_are_refused() -> None:
    with pytest.raises(ValueError, match="blocks are 1024 bytes"):
        vram.MemoryWorkload(v.new_seed(), 2, 48, 256, 1.0, True)


def test_a_real_lane_is_its_answer_deadlines_at_the_step_time() -> None:
    """At the assumed step or a measured one (the coordinator's calibration): the lane's sequential
    time is LANE_ANSWER_DEADLINES answer deadlines, the fill its model's share of VRAM, and the
    lanes' time is the expected fill's (longer than its traffic at the model's bandwidth)."""
    for model in (H100, gpu_model("L4"), gpu_model("B200")):
        claimed = model.vram_gb * 2**30 * vram.MEMORY_FRACTION
        for step in (None, 2e-6, 50e-6):
            w = vram.memory_workload_for(model, v.new_seed(), simulated=False, step_seconds=step)
            at = vram.REAL_STEP_SECONDS if step is None else step
            lane_seconds = vram.LANE_ANSWER_DEADLINES * w.answer_deadline
            assert lane_seconds <= w.blocks * at < lane_seconds * 2
            assert w.expected_seconds == pytest.approx(w.blocks * at)
            assert claimed * 0.99 <= w.bytes <= claimed and w.block_bytes == vram.BLOCK_BYTES
    h100 = vram.memory_workload_for(H100, v.new_seed(), simulated=False)
    assert h100.expected_seconds > 20 * vram._traffic(h100.lanes, h100.blocks, vram.BLOCK_BYTES) / (
        H100.memory_tbps * 1e12 * vram.REAL_EFFICIENCY
    )  # the lanes' time dominates an H100's fill by over 20 times
    # A step so short that the lane outgrows the fill: one lane, the fill's length.
    one = vram.memory_workload_for(gpu_model("T4"), v.new_seed(), simulated=False, step_seconds=1e-9)
    assert one.lanes == 1
    assert one.blocks * vram.BLOCK_BYTES == pytest.approx(16 * 2**30 * vram.MEMORY_FRACTION, abs=1024)


def test_which_blocks_a_block_reads_depends_on_the_one_before() -> None:
    """Data-dependent parents: no prover can know which blocks it will need before computing."""
    w = _small()
    a, b = vram.fill(w), vram.fill(dataclasses.replace(w, seed=v.new_seed()))
    assert not np.array_equal(a.parents[:, 2:], b.parents[:, 2:])
    j = w.blocks - 1
    assert list(a.parents[0, j]) == vram.parents_of(j, a.blocks[0][j - 1])


def test_blocks_filled_with_something_else_fail_the_recurrence() -> None:
    w = _small()
    honest = vram.fill(w)
    # Every block of lane 0 from 10 on is random words; the digests are of what is stored.
    forged = honest.blocks.copy()
    forged[0, 10:] = np.random.default_rng().integers(0, 2**64, forged[0, 10:].shape, dtype=np.uint64)
    bad = vram.Filled(w, forged, vram.block_digests(forged), honest.parents)
    assert "not the one its inputs make" in (_answer(bad, [(0, 20)]) or "")
    assert _answer(bad, [(1, 20)]) is None  # the control: lane 1 was filled right


def test_answers_that_do_not_match_the_commitment_are_caught() -> None:
    w = _small()
    filled = vram.fill(w)
    asked = [(0, 30)]
    opened = vram.open_blocks(filled, asked)
    swapped = [
        dataclasses.replace(o, content=secrets.token_bytes(w.block_bytes)) if o.content is not None else o
        for o in opened
    ]
    assert "not the committed block" in (vram.check_memory(w, filled.root(), swapped, asked) or "")
    other_root = vram.fill(dataclasses.replace(w, seed=v.new_seed())).root()
    assert "not the committed block" in (vram.check_memory(w, other_root, opened, asked) or "")
    missing = [o for o in opened if o.content is None or o.block != 29]
    assert "predecessor's content was not sent" in (vram.check_memory(w, filled.root(), missing, asked) or "")
    assert "was not opened" in (vram.check_memory(w, filled.root(), opened, [(1, 3)]) or "")
    assert vram.check_memory(w, filled.root(), opened, asked) is None  # the control


def test_a_replay_of_an_old_seeds_answers_is_caught() -> None:
    old = vram.fill(_small())
    fresh = dataclasses.replace(old.workload, seed=v.new_seed())
    asked = vram.choose_blocks(fresh)
    # The old fill's commitment and openings, offered for the fresh seed.
    reason = vram.check_memory(fresh, old.root(), vram.open_blocks(old, asked), asked)
    assert "not the one its inputs make" in (reason or "")


def test_a_prover_short_of_memory_cannot_answer_in_time() -> None:
    """A simulated H100 holding a quarter of its VRAM keeps 31 % of the blocks: to answer, it must
    recompute the rest it is asked for, which takes it (at the fill's speed, however parallel) a
    quarter of the fill or more (0.27 of it at the least in 4,000 draws), so over 1.5 times the
    answer deadline, every time; one holding all answers at once."""
    w = vram.memory_workload_for(H100, v.new_seed(), simulated=True, simulated_seconds=10.0)
    filled = vram.fill(w)
    everything = np.ones((w.lanes, w.blocks), dtype=bool)
    quarter = vram.kept_share(w, 0.25 / vram.MEMORY_FRACTION)
    assert quarter.mean() == pytest.approx(0.25 / vram.MEMORY_FRACTION, abs=0.01)
    for _ in range(100):
        asked = vram.choose_blocks(w)
        assert vram.short_answer_seconds(filled, everything, asked) == 0
        assert vram.short_answer_seconds(filled, quarter, asked) > 1.5 * w.answer_deadline


def test_a_short_provers_chain_stays_a_share_of_a_long_lane() -> None:
    """What makes the check bind on a real GPU, whose lanes are long: the chain of recomputation one
    after another stays a share of the lane (0.15 of 4,096 blocks at the least in 40 draws, half of
    them kept), not a logarithm of it (with parents uniform over the lane it was 0.02)."""
    w = vram.MemoryWorkload(v.new_seed(), 1, 4096, vram.BLOCK_BYTES, 1.0, True)
    filled = vram.fill(w)
    for _ in range(10):
        _, depth = vram.recompute_cost(filled, vram.kept_share(w, 0.5), vram.choose_blocks(w))
        assert depth > 0.08 * w.blocks


def test_recomputation_cost_counts_every_missing_input_once() -> None:
    w = vram.MemoryWorkload(v.new_seed(), 1, 6, vram.BLOCK_BYTES, 6.0, True)
    filled = vram.fill(w)
    stored = np.zeros((1, 6), dtype=bool)
    stored[0, 0] = True
    hashes, depth = vram.recompute_cost(filled, stored, [(0, 5)])
    assert (hashes, depth) == (4, 4)  # blocks 1..4, one after another
    assert vram.short_answer_seconds(filled, stored, [(0, 5)]) == 4.0  # 4 of the lane's 6 steps of 1 s


def _inventory(model: str = "H100") -> Inventory:
    gpu = GpuInfo(
        index=0,
        uuid="GPU-sim-1",
        name=f"Simulated {model}",
        model=model,
        vram_mib=81920,
        compute_capability="0.0",
        pcie_gen=0,
        pcie_width=0,
        power_limit_w=0,
    )
    return Inventory(driver_version="simulated", cuda_version="simulated", simulated=True, gpus=[gpu])


def _challenge(w: vram.MemoryWorkload) -> VerifyMemory:
    return VerifyMemory(
        id=secrets.token_hex(16),
        gpu=0,
        seed=w.seed.hex(),
        lanes=w.lanes,
        blocks=w.blocks,
        block_bytes=w.block_bytes,
        expected_seconds=w.expected_seconds,
    )


async def _round_trip(prover: Prover, w: vram.MemoryWorkload) -> tuple[float, float, str | None]:
    """(seconds to the commitment, seconds to the answer, why the answer fails or None)."""
    challenge = _challenge(w)
    started = time.monotonic()
    commit = await prover.commit_memory(challenge, True)
    committed = time.monotonic() - started
    asked = vram.choose_blocks(w)
    assert prover.holds_memory(challenge.id)
    started = time.monotonic()
    answer = await prover.open_memory(VerifyOpen(id=challenge.id, rows=[[lane, j] for lane, j in asked]), True)
    answered = time.monotonic() - started
    openings = [
        vram.BlockOpening(
            b.lane,
            b.block,
            None if b.content is None else base64.b64decode(b.content),
            b.chunk,
            [bytes.fromhex(p) for p in b.path],
        )
        for b in answer.blocks
    ]
    return committed, answered, vram.check_memory(w, bytes.fromhex(commit.root), openings, asked)


async def test_a_simulated_gpu_fills_in_the_time_expected_and_one_short_of_memory_answers_too_late() -> None:
    full = vram.memory_workload_for(H100, v.new_seed(), simulated=True, simulated_seconds=8.0)
    w = dataclasses.replace(full, blocks=full.blocks // 4, expected_seconds=2.0)
    committed, answered, reason = await _round_trip(Prover(_inventory()), w)
    assert reason is None and committed < w.deadline and answered < w.answer_deadline / 2
    assert committed >= w.expected_seconds * 0.9  # it takes the fill time expected
    # Holding an eighth of an H100's VRAM: its answer is right (recomputed) but far too late (0.37
    # of the fill at the least in 4,000 draws: 3 s).
    w = full
    committed, answered, reason = await _round_trip(Prover(_inventory(), vram_share=0.125), w)
    assert reason is None and committed < w.deadline
    assert answered > 2 * w.answer_deadline


async def test_the_prover_refuses_what_it_cannot_answer() -> None:
    prover = Prover(_inventory())
    w = vram.memory_workload_for(H100, v.new_seed(), simulated=True)
    with pytest.raises(ChallengeRefused, match="no GPU 3"):
        await prover.commit_memory(_challenge(w).model_copy(update={"gpu": 3}), True)
    with pytest.raises(ChallengeRefused, match="more than a simulated H100 holds"):
        await prover.commit_memory(_challenge(w).model_copy(update={"blocks": w.blocks * 2}), True)
    with pytest.raises(ChallengeRefused, match="blocks are 1024 bytes"):
        await prover.commit_memory(_challenge(w).model_copy(update={"block_bytes": 256}), True)
    with pytest.raises(ChallengeRefused, match="no memory commitment"):
        await prover.open_memory(VerifyOpen(id="0" * 32, rows=[[0, 0]]), True)
    real = Prover(_inventory().model_copy(update={"simulated": False}))
    with pytest.raises(ChallengeRefused, match="no GPU backend"):
        await real.commit_memory(_challenge(w), False)


def test_a_real_gpus_answer_fits_in_one_message() -> None:
    """The largest answer a real GPU's memory check asks for (every named block's inputs distinct,
    chunks of the widest digests, the deepest tree of the largest model) is one message."""
    w = vram.memory_workload_for(gpu_model("B200"), v.new_seed(), simulated=False)
    depth = math.ceil(math.log2(vram.WORDS * w.total_blocks / v.CHUNK))
    block = MemoryBlock(
        lane=w.lanes - 1,
        block=w.blocks - 1,
        content=base64.b64encode(bytes(w.block_bytes)).decode(),
        chunk=[2**32 - 1] * v.CHUNK,
        path=["ff" * 32] * depth,
    )
    answer = VerifyMemoryOpenings(simulated=False, id="ab" * 16, blocks=[block] * (vram.OPENINGS * (2 + vram.PARENTS)))
    assert len(encode(answer)) < MAX_MESSAGE_BYTES
