"""GPU verification: a challenge that pins a claimed GPU's speed and is checked at a tiny fraction
of what it costs the prover.

The verifier (the coordinator) sends a fresh random seed and a workload sized from the claimed
model (`workload_for`): `products` integer matrix products C_k = A_k · B, each A_k of n x depth and
one B of depth x n, their entries in [-8, 7] derived from the seed (`matrix`). (One B: the
verifier derives it once per challenge, not once per row it checks.) Integer entries make
the answer exact on any hardware: |C| <= 64 · depth < 2**24, so FP16 inputs with FP32
accumulation (tensor cores), FP32, FP64 or integer arithmetic all give the same integers, in any
summation order. An honest GPU never fails on rounding: the tolerance is zero.

The prover digests every row of every product (`row_digests`: a non-linear mix of each entry, so
no digest without the whole row) and commits, before a deadline derived from the claimed model's
throughput, to the Merkle root over chunks of those digests (`commit`). Then the verifier names
random rows (`choose_rows`); for each the prover sends the chunk of digests holding it and its
Merkle path (`open_row`); the verifier recomputes the row itself, at O(depth · n) against the
prover's O(products · n² · depth), and checks its digest and the path (`check_opening`).

What that catches: a GPU slower than the claimed model misses the deadline (`Workload.deadline`);
a prover that skipped or corrupted a fraction f of the rows fails an opening with probability
1 - (1 - f)**openings; digests of another seed (a replay) or answers that do not match the
commitment fail every opening. What it does not: memory (the claimed VRAM is the memory check's,
gpunet.vram), and a GPU of another model with the same throughput passes the compute check.

numpy is the reference path: the verifier, and the simulated workers, which emulate their model's
speed (`simulated_seconds`), so their verdicts are labelled simulated everywhere.
"""

from __future__ import annotations

import functools
import hashlib
import math
import secrets
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpunet.catalog import GpuModel
from gpunet.protocol import VERIFY_CHUNK

__all__ = [
    "CHUNK",
    "OPENINGS",
    "Opening",
    "Workload",
    "check_opening",
    "choose_rows",
    "commit",
    "digests_of",
    "leads_to_root",
    "matrix",
    "merkle_levels",
    "new_seed",
    "open_chunk",
    "open_row",
    "product",
    "row_digests",
    "shared_b",
    "simulated_seconds",
    "workload_for",
]

_M32 = np.uint64(0xFFFFFFFF)
CHUNK = VERIFY_CHUNK  # row digests per Merkle leaf
OPENINGS = 16  # rows opened per challenge: skipping half the work survives with probability 2**-16
MARGIN = 0.25  # the deadline's allowance over the expected time at the claimed speed
REAL_EFFICIENCY = 0.5  # the share of its peak a GPU reaches on these products (the expected time)
SIMULATED_SCALE = 2e-8  # a simulated GPU computes at its model's peak times this (an H100: 20 MFLOP/s)
REAL_SHAPE = (4096, 8192)  # (n, depth) on a real GPU: |C| <= 64 * 8192 < 2**24, exact in FP32
SIMULATED_SHAPE = (64, 256)
REAL_ALLOWANCE_SECONDS = 2.0  # round trips, kernel launches, digests
SIMULATED_ALLOWANCE_SECONDS = 1.0


@dataclass(frozen=True)
class Workload:
    """One GPU's challenge: what to compute and by when."""

    seed: bytes  # 16 random bytes from the verifier
    n: int
    depth: int
    products: int
    expected_seconds: float  # at the claimed model's speed
    simulated: bool

    @property
    def flops(self) -> int:
        return 2 * self.products * self.n * self.n * self.depth

    @property
    def deadline(self) -> float:
        """Seconds from the challenge's sending to its commitment's arrival."""
        allowance = SIMULATED_ALLOWANCE_SECONDS if self.simulated else REAL_ALLOWANCE_SECONDS
        return self.expected_seconds * (1 + MARGIN) + allowance


def new_seed() -> bytes:
    return secrets.token_bytes(16)


def _rate(model: GpuModel, simulated: bool, efficiency: float | None = None) -> float:
    """FLOP/s the model is expected to reach on the challenge (a real GPU: at `efficiency` of its
    peak, the model's calibration, else REAL_EFFICIENCY)."""
    peak = model.fp16_tflops * 1e12
    return peak * SIMULATED_SCALE if simulated else peak * (REAL_EFFICIENCY if efficiency is None else efficiency)


def workload_for(
    model: GpuModel, seed: bytes, *, simulated: bool, seconds: float, efficiency: float | None = None
) -> Workload:
    """A workload that takes about `seconds` at the claimed model's speed (more products, not bigger
    ones: the shape keeps the results exact). `efficiency`: the share of its peak a real GPU of the
    model was measured to reach (its calibration), instead of REAL_EFFICIENCY."""
    n, depth = SIMULATED_SHAPE if simulated else REAL_SHAPE
    rate = _rate(model, simulated, efficiency)
    products = max(1, math.ceil(seconds * rate / (2 * n * n * depth)))
    expected = 2 * products * n * n * depth / rate
    return Workload(seed, n, depth, products, expected, simulated)


def simulated_seconds(workload: Workload, model: GpuModel) -> float:
    """How long a simulated GPU of `model` takes over the workload: what its worker emulates."""
    return workload.flops / _rate(model, True)


def _mix(h: np.ndarray) -> np.ndarray:
    """A 32-bit finalizer (murmur3's), on uint64 arrays holding 32-bit values."""
    h = h ^ (h >> np.uint64(16))
    h = (h * np.uint64(0x85EBCA6B)) & _M32
    h = h ^ (h >> np.uint64(13))
    h = (h * np.uint64(0xC2B2AE35)) & _M32
    return h ^ (h >> np.uint64(16))


def _words(seed: bytes) -> tuple[np.uint64, np.uint64]:
    return np.uint64(int.from_bytes(seed[:4], "little")), np.uint64(int.from_bytes(seed[4:8], "little"))


def matrix(
    seed: bytes, k: int, which: int, rows: int, cols: int, first_row: int = 0, count: int | None = None
) -> np.ndarray:
    """Rows `first_row`.. (`count` of them, all by default) of matrix `which` (0: A_k, 1: B with k = 0) of
    product k, a `rows` x `cols` matrix of integers in [-8, 7] (float64: exact, and fast in BLAS)."""
    count = rows - first_row if count is None else count
    s0, s1 = _words(seed)
    i = np.arange(first_row, first_row + count, dtype=np.uint64)[:, None]
    j = np.arange(cols, dtype=np.uint64)[None, :]
    x = ((np.uint64(2 * k + which) * np.uint64(rows) + i) * np.uint64(cols)) + j
    h = _mix(((x & _M32) ^ s0) * np.uint64(0x9E3779B1) & _M32 ^ ((x >> np.uint64(32)) ^ s1))
    return (h >> np.uint64(28)).astype(np.float64) - 8.0


@functools.lru_cache(maxsize=1)
def shared_b(workload: Workload) -> np.ndarray:
    """B, the right-hand matrix of every product of the workload."""
    return matrix(workload.seed, 0, 1, workload.depth, workload.n)


def product(workload: Workload, k: int) -> np.ndarray:
    """C_k, exactly (int64), on the CPU: the reference path."""
    w = workload
    return (matrix(w.seed, k, 0, w.n, w.depth) @ shared_b(w)).astype(np.int64)


def row_digests(workload: Workload, k: int, c: np.ndarray, first_row: int = 0) -> np.ndarray:
    """The digest of each row of `c` (rows `first_row`.. of C_k): a sum of non-linear mixes of its
    entries, each salted by its position and the seed, so none is known without the whole row."""
    s0, s1 = _words(workload.seed)
    rows = np.arange(first_row, first_row + c.shape[0], dtype=np.uint64)[:, None]
    cols = np.arange(c.shape[1], dtype=np.uint64)[None, :]
    salt = _mix(((np.uint64(k) * np.uint64(workload.n) + rows) * np.uint64(0x9E3779B1) ^ s1) & _M32)
    v = c.astype(np.int64).astype(np.uint64) & _M32  # two's complement, 32 bits
    h = _mix(((v ^ salt) * np.uint64(0x27D4EB2F) + cols * np.uint64(0x165667B1) + s0) & _M32)
    return (h.sum(axis=1, dtype=np.uint64) & _M32).astype(np.uint32)


def digests_of(workload: Workload) -> np.ndarray:
    """Every row digest of the workload, products in order (the reference prover's whole work)."""
    return np.concatenate([row_digests(workload, k, product(workload, k)) for k in range(workload.products)])


def _leaf(index: int, chunk: np.ndarray) -> bytes:
    return hashlib.sha256(b"gpunet-verify-leaf" + index.to_bytes(4, "little") + chunk.astype("<u4").tobytes()).digest()


def _parent(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"gpunet-verify-node" + left + right).digest()


def _levels(digests: np.ndarray) -> list[list[bytes]]:
    level = [_leaf(i, digests[i * CHUNK : (i + 1) * CHUNK]) for i in range(math.ceil(len(digests) / CHUNK))]
    levels = [level]
    while len(level) > 1:
        padded = level + level[-1:] if len(level) % 2 else level
        level = [_parent(padded[i], padded[i + 1]) for i in range(0, len(padded), 2)]
        levels.append(level)
    return levels


def commit(digests: np.ndarray) -> bytes:
    """The Merkle root over the chunks of row digests."""
    return _levels(digests)[-1][0]


def choose_rows(workload: Workload, count: int = OPENINGS) -> list[tuple[int, int]]:
    """(product, row) pairs to open, chosen after the commitment, unpredictably."""
    rng = secrets.SystemRandom()
    return [(rng.randrange(workload.products), rng.randrange(workload.n)) for _ in range(count)]


@dataclass(frozen=True)
class Opening:
    """The chunk of digests holding one row's digest, and the chunk's Merkle path to the root."""

    product: int
    row: int
    chunk: list[int]
    path: list[bytes]


def merkle_levels(digests: np.ndarray) -> list[list[bytes]]:
    """The Merkle tree over the chunks of `digests` (uint32 words), leaves first: built once by a prover
    that opens many positions (`open_chunk`)."""
    return _levels(digests)


def open_chunk(levels: list[list[bytes]], digests: np.ndarray, position: int) -> tuple[list[int], list[bytes]]:
    """The chunk of digests holding word `position`, and the chunk's Merkle path to the root."""
    index = position // CHUNK
    path = []
    for level in levels[:-1]:
        sibling = index ^ 1
        path.append(level[sibling] if sibling < len(level) else level[index])
        index //= 2
    first = (position // CHUNK) * CHUNK
    return [int(d) for d in digests[first : first + CHUNK]], path


def leads_to_root(root: bytes, position: int, chunk: Sequence[int], path: Sequence[bytes]) -> bool:
    """Whether `chunk`, the chunk holding word `position`, leads by `path` to the committed root."""
    index = position // CHUNK
    node = _leaf(index, np.array(chunk, dtype=np.uint64))
    for sibling in path:
        node = _parent(node, sibling) if index % 2 == 0 else _parent(sibling, node)
        index //= 2
    return node == root


def open_row(workload: Workload, digests: np.ndarray, k: int, row: int) -> Opening:
    chunk, path = open_chunk(_levels(digests), digests, k * workload.n + row)
    return Opening(k, row, chunk, path)


def check_opening(workload: Workload, root: bytes, opening: Opening) -> str | None:
    """None when the opening holds: the row's true digest (recomputed here) is in the chunk at its
    place, and the chunk's path leads to the committed root; else why not."""
    w, k, row = workload, opening.product, opening.row
    if not (0 <= k < w.products and 0 <= row < w.n):
        return f"row {row} of product {k} is outside the workload"
    position = k * w.n + row
    index = position // CHUNK
    if len(opening.chunk) != min(CHUNK, w.products * w.n - index * CHUNK):
        return f"the chunk of product {k}'s row {row} has {len(opening.chunk)} digests"
    a_row = matrix(w.seed, k, 0, w.n, w.depth, first_row=row, count=1)
    true_row = (a_row @ shared_b(w)).astype(np.int64)
    digest = int(row_digests(w, k, true_row, first_row=row)[0])
    if opening.chunk[position % CHUNK] != digest:
        return f"product {k} row {row}: the committed digest is not the row's (a wrong or skipped result)"
    if not leads_to_root(root, position, opening.chunk, opening.path):
        return f"product {k} row {row}: the chunk does not lead to the committed root"
    return None


def check_all(
    workload: Workload, root: bytes, openings: Sequence[Opening], asked: Sequence[tuple[int, int]]
) -> str | None:
    """None when every row asked for is opened, and each opening holds; else the first reason."""
    if [(o.product, o.row) for o in openings] != list(asked):
        return "the openings are not of the rows asked for"
    for opening in openings:
        if (reason := check_opening(workload, root, opening)) is not None:
            return reason
    return None
