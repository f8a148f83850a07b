"""GPU verification's challenge (gpunet.verification) and the worker's prover (worker.verify): an
honest prover passes every time, and each lie is caught with its reason. The simulated path: the
reference products on the CPU, simulated GPUs taking as long as their model."""

from __future__ import annotations

import secrets
import time

import numpy as np
import pytest

from gpunet import verification as v
from gpunet.catalog import gpu_model
from gpunet.protocol import GpuInfo, Inventory, Verify, VerifyOpen
from worker.verify import ChallengeRefused, Prover

H100 = gpu_model("H100")


def _small(seconds: float = 0.002) -> v.Workload:
    return v.workload_for(H100, v.new_seed(), simulated=True, seconds=seconds)


def _opened(w: v.Workload, digests: np.ndarray, rows: list[tuple[int, int]]) -> list[v.Opening]:
    return [v.open_row(w, digests, k, r) for k, r in rows]


def test_an_honest_prover_passes_hundreds_of_challenges() -> None:
    failures = []
    for _ in range(300):
        w = _small()
        digests = v.digests_of(w)
        root = v.commit(digests)
        rows = v.choose_rows(w)
        if (reason := v.check_all(w, root, _opened(w, digests, rows), rows)) is not None:
            failures.append(reason)
    assert failures == []


def test_the_results_are_exact_integers_in_any_order() -> None:
    """What makes the tolerance zero: the entries are small integers, so the products are exact in
    FP32 (|C| < 2**24) whatever the summation order; here in FP32 with another blocking than the
    reference's FP64, as a GPU's tensor cores would sum."""
    w = v.workload_for(H100, v.new_seed(), simulated=False, seconds=1e-9)
    a = v.matrix(w.seed, 0, 0, w.n, w.depth, count=8).astype(np.float32)
    b = v.matrix(w.seed, 0, 1, w.depth, w.n).astype(np.float32)
    blocked = sum(a[:, i : i + 512] @ b[i : i + 512] for i in range(0, w.depth, 512))
    assert np.abs(a).max() <= 8 and w.depth * 64 < 2**24
    assert np.array_equal(blocked.astype(np.int64), (a.astype(np.float64) @ b.astype(np.float64)).astype(np.int64))


def test_corrupted_rows_are_caught() -> None:
    w = _small()
    digests = v.digests_of(w)
    bad = digests.copy()
    bad[: len(bad) // 2] ^= 1  # half the rows wrong (or never computed)
    root = v.commit(bad)
    wrong = [(k, r) for k in range(w.products) for r in range(w.n) if k * w.n + r < len(bad) // 2][:1]
    assert "not the row's" in (v.check_all(w, root, _opened(w, bad, wrong), wrong) or "")
    right = [(w.products - 1, w.n - 1)]  # the control: a row computed right passes
    assert v.check_all(w, root, _opened(w, bad, right), right) is None


def test_skipped_work_fails_almost_surely() -> None:
    w = _small()
    guessed = np.frombuffer(secrets.token_bytes(4 * w.products * w.n), dtype=np.uint32).copy()
    root = v.commit(guessed)
    rows = v.choose_rows(w)
    assert "not the row's" in (v.check_all(w, root, _opened(w, guessed, rows), rows) or "")


def test_answers_that_do_not_match_the_commitment_are_caught() -> None:
    w = _small()
    digests = v.digests_of(w)
    root = v.commit(digests)
    rows = [(0, 0)]
    other = digests.copy()
    other[1] ^= 7  # a chunk other than the committed one (same row digest, another neighbour)
    assert "does not lead to the committed root" in (v.check_all(w, root, _opened(w, other, rows), rows) or "")
    assert "not of the rows asked for" in (v.check_all(w, root, _opened(w, digests, [(0, 1)]), rows) or "")


def test_a_replayed_answer_to_another_seed_is_caught() -> None:
    old = _small()
    digests = v.digests_of(old)
    fresh = v.Workload(v.new_seed(), old.n, old.depth, old.products, old.expected_seconds, True)
    rows = [(0, 3)]
    assert "not the row's" in (v.check_all(fresh, v.commit(digests), _opened(fresh, digests, rows), rows) or "")


def _inventory(model: str = "H100", gpus: int = 1) -> Inventory:
    return Inventory(
        driver_version="simulated",
        cuda_version="simulated",
        simulated=True,
        gpus=[
            GpuInfo(index=i, uuid=f"GPU-sim-{i + 1}", name=f"Simulated {model}", model=model, vram_mib=81920,
                    compute_capability="0.0", pcie_gen=0, pcie_width=0, power_limit_w=0)
            for i in range(gpus)
        ],
    )  # fmt: skip


def _challenge(w: v.Workload) -> Verify:
    return Verify(
        id=secrets.token_hex(16),
        gpu=0,
        seed=w.seed.hex(),
        n=w.n,
        depth=w.depth,
        products=w.products,
        expected_seconds=w.expected_seconds,
    )


async def _round_trip(prover: Prover, w: v.Workload) -> tuple[float, str | None]:
    challenge = _challenge(w)
    started = time.monotonic()
    commit = await prover.commit(challenge, True)
    elapsed = time.monotonic() - started
    rows = v.choose_rows(w)
    answer = prover.open(VerifyOpen(id=challenge.id, rows=[[k, r] for k, r in rows]), True)
    openings = [v.Opening(o.product, o.row, o.chunk, [bytes.fromhex(p) for p in o.path]) for o in answer.openings]
    return elapsed, v.check_all(w, bytes.fromhex(commit.root), openings, rows)


async def test_a_simulated_gpu_answers_at_its_model_speed_and_a_slower_one_misses_the_deadline() -> None:
    w = v.workload_for(H100, v.new_seed(), simulated=True, seconds=1.0)
    honest_time, honest_reason = await _round_trip(Prover(_inventory()), w)
    assert honest_reason is None and honest_time < w.deadline
    assert honest_time >= w.expected_seconds * 0.9  # it emulates its model's speed
    # An A100 claiming to be an H100 takes 989/312 times as long: past the deadline.
    a100 = v.simulated_seconds(w, gpu_model("A100"))
    assert a100 > w.deadline
    slow_time, _ = await _round_trip(Prover(_inventory(), slowdown=a100 / w.expected_seconds), w)
    assert slow_time > w.deadline


async def test_the_prover_refuses_what_it_cannot_answer() -> None:
    prover = Prover(_inventory())
    w = _small()
    with pytest.raises(ChallengeRefused, match="no GPU 3"):
        await prover.commit(_challenge(w).model_copy(update={"gpu": 3}), True)
    with pytest.raises(ChallengeRefused, match="no commitment"):
        prover.open(VerifyOpen(id="0" * 32, rows=[[0, 0]]), True)
    real = Prover(_inventory().model_copy(update={"simulated": False}))
    with pytest.raises(ChallengeRefused, match="no GPU backend"):
        await real.commit(_challenge(w), False)


async def test_every_gpu_of_a_big_node_keeps_its_commitment_until_asked() -> None:
    """A node's GPUs are challenged at once, and a refusal to open a committed challenge fails the
    node: a 12-GPU node must still hold its first GPU's commitment once all twelve have committed
    (a prover that kept a fixed number of challenges dropped the oldest)."""
    prover = Prover(_inventory(gpus=12))
    w = _small()
    challenges = [_challenge(w).model_copy(update={"gpu": gpu}) for gpu in range(12)]
    roots = [(await prover.commit(c, True)).root for c in challenges]
    for c, root in zip(challenges, roots, strict=True):
        rows = v.choose_rows(w, 2)
        answer = prover.open(VerifyOpen(id=c.id, rows=[[k, r] for k, r in rows]), True)
        openings = [v.Opening(o.product, o.row, o.chunk, [bytes.fromhex(p) for p in o.path]) for o in answer.openings]
        assert v.check_all(w, bytes.fromhex(root), openings, rows) is None
    # Opened once: the commitment is gone; a GPU's new challenge replaces its old one.
    with pytest.raises(ChallengeRefused, match="no commitment"):
        prover.open(VerifyOpen(id=challenges[0].id, rows=[[0, 0]]), True)
    first, second = _challenge(w), _challenge(w)
    await prover.commit(first, True)
    await prover.commit(second, True)
    with pytest.raises(ChallengeRefused, match="no commitment"):
        prover.open(VerifyOpen(id=first.id, rows=[[0, 0]]), True)
    assert prover.open(VerifyOpen(id=second.id, rows=[[0, 0]]), True).openings
