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

Every function computes in an array namespace it is given (`xp`, the Python array API standard):
numpy's by default, the reference path of the verifier and of simulated workers, which emulate their
model's speed (`simulated_seconds`), so their verdicts are labelled simulated everywhere; cupy's on a
real GPU (worker/gpu/compute.py). A GPU multiplies in float32 with TF32 tensor cores: TF32 keeps 11
significant bits, the entries need 4, and every partial sum is an integer below 2**24, exact in the
FP32 accumulator, so the products are exact. TF32 runs at half the rate of FP16 with FP32
accumulation, which would be exact too, but cupy's matmul returns FP16 for FP16 inputs (not exact
above 2048): FP32 output from FP16 inputs takes cuBLAS's raw gemmEx, TF32 only cupy's public API. A
real GPU's expected time is therefore its model's dense TF32 peak (gpunet.catalog) at the share of it
`real_efficiency` gives (public measurements of large products, and an assumption on the rest).
Its row digests are computed on the device; the digests (4 bytes a row) come to the host for the
Merkle tree, the products never do.
"""

from __future__ import annotations

import functools
import hashlib
import math
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

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
    "real_efficiency",
    "row_digests",
    "shared_b",
    "simulated_seconds",
    "workload_for",
]

_M32 = 0xFFFFFFFF
CHUNK = VERIFY_CHUNK  # row digests per Merkle leaf
OPENINGS = 16  # rows opened per challenge: skipping half the work survives with probability 2**-16
MARGIN = 0.25  # the deadline's allowance over the expected time at the claimed speed
# The share of its dense TF32 peak (gpunet.catalog) a real GPU is expected to reach over a challenge:
# the share public measurements of large products reach (GEMM_EFFICIENCY), times the share of the
# challenge's time that is products (PRODUCT_SHARE). The rest is the matrices' generation and the
# rows' digests on the device, unfused array operations about as costly as the products: an
# assumption until bench/verification/gpu-check measures it, and what an operator's calibration
# (`gpunet coordinator calibrate`) replaces per model with the fleet's own measurements.
PRODUCT_SHARE = 0.6
GEMM_EFFICIENCY = {
    # TF32 torch.mm on an H100 SXM: 403.7 of 494.7 TFLOP/s (github.com/zzc0721/torch-performance-test-data,
    # database.md); the H200 has the H100's compute.
    "H100": 0.82,
    "H200": 0.82,
    # TF32 on an A100 PCIe 40GB: 108.3 of 156 at 4096^2 (the same repository, issue 108).
    "A100": 0.69,
    # No public TF32 figure found: FP16 with FP32 accumulation, cuBLAS through torch, as a share of
    # its dense peak (the same repository): L40S 0.73, B200 0.72 (and ml-engineering's MAMF table,
    # github.com/stas00/ml-engineering compute/accelerator, 0.78 for BF16); the GeForce cards beat
    # their rated peak, which NVIDIA gives at a conservative boost clock (RTX 4090 0.96-1.05, RTX
    # 3090 1.06, RTX 5090 1.07-1.16): taken as 1.
    "L40S": 0.73,
    "B200": 0.72,
    "RTX4090": 1.0,
    "RTX3090": 1.0,
    "RTX5090": 1.0,
    # T4 (no TF32: its FP32 peak): FP32 SGEMM 4.2-4.4 of 8.1 (the same repository).
    "T4": 0.52,
}
DEFAULT_GEMM_EFFICIENCY = 0.7  # A10G, L4: no public measurement found (datacenter parts measure 0.69-0.82)
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
    dense TF32 peak, the model's calibration, else `real_efficiency`)."""
    if simulated:
        return model.fp16_tflops * 1e12 * SIMULATED_SCALE
    return model.tf32_tflops * 1e12 * (real_efficiency(model) if efficiency is None else efficiency)


def real_efficiency(model: GpuModel) -> float:
    """The share of its dense TF32 peak a real GPU of `model` is expected to reach on a challenge
    (before any calibration)."""
    return GEMM_EFFICIENCY.get(model.name, DEFAULT_GEMM_EFFICIENCY) * PRODUCT_SHARE


def workload_for(
    model: GpuModel, seed: bytes, *, simulated: bool, seconds: float, efficiency: float | None = None
) -> Workload:
    """A workload that takes about `seconds` at the claimed model's speed (more products, not bigger
    ones: the shape keeps the results exact). `efficiency`: the share of its peak a real GPU of the
    model was measured to reach (its calibration), instead of `real_efficiency`."""
    n, depth = SIMULATED_SHAPE if simulated else REAL_SHAPE
    rate = _rate(model, simulated, efficiency)
    products = max(1, math.ceil(seconds * rate / (2 * n * n * depth)))
    expected = 2 * products * n * n * depth / rate
    return Workload(seed, n, depth, products, expected, simulated)


def simulated_seconds(workload: Workload, model: GpuModel) -> float:
    """How long a simulated GPU of `model` takes over the workload: what its worker emulates."""
    return workload.flops / _rate(model, True)


def _mix(xp: Any, h: Any) -> Any:
    """A 32-bit finalizer (murmur3's), on uint64 arrays holding 32-bit values."""
    h = h ^ (h >> 16)
    h = (h * 0x85EBCA6B) & _M32
    h = h ^ (h >> 13)
    h = (h * 0xC2B2AE35) & _M32
    return h ^ (h >> 16)


def _words(seed: bytes) -> tuple[int, int]:
    return int.from_bytes(seed[:4], "little"), int.from_bytes(seed[4:8], "little")


def matrix(
    seed: bytes,
    k: int,
    which: int,
    rows: int,
    cols: int,
    first_row: int = 0,
    count: int | None = None,
    *,
    xp: Any = None,
    dtype: Any = None,
) -> Any:
    """Rows `first_row`.. (`count` of them, all by default) of matrix `which` (0: A_k, 1: B with k = 0) of
    product k, a `rows` x `cols` matrix of integers in [-8, 7], as `dtype` (float64 by default: exact,
    and fast in BLAS; any float type holds them exactly) in the array namespace `xp` (numpy's by default)."""
    xp = _namespace(xp)
    count = rows - first_row if count is None else count
    s0, s1 = _words(seed)
    i = xp.arange(first_row, first_row + count, dtype=xp.uint64)[:, None]
    j = xp.arange(cols, dtype=xp.uint64)[None, :]
    x = ((2 * k + which) * rows + i) * cols + j
    h = _mix(xp, ((((x & _M32) ^ s0) * 0x9E3779B1) & _M32) ^ ((x >> 32) ^ s1))
    return xp.astype(h >> 28, xp.float64 if dtype is None else dtype) - 8.0


@functools.lru_cache(maxsize=1)
def shared_b(workload: Workload) -> np.ndarray:
    """B, the right-hand matrix of every product of the workload (numpy's: the verifier's)."""
    return matrix(workload.seed, 0, 1, workload.depth, workload.n)


def product(workload: Workload, k: int) -> np.ndarray:
    """C_k, exactly (int64), on the CPU: the reference path."""
    w = workload
    return (matrix(w.seed, k, 0, w.n, w.depth) @ shared_b(w)).astype(np.int64)


def row_digests(workload: Workload, k: int, c: Any, first_row: int = 0, *, xp: Any = None) -> Any:
    """The digest (uint32) of each row of `c` (rows `first_row`.. of C_k, integers of any numeric type):
    a sum of non-linear mixes of its entries, each salted by its position and the seed, so none is
    known without the whole row. In `c`'s array namespace `xp` (numpy's by default)."""
    xp = _namespace(xp)
    s0, s1 = _words(workload.seed)
    rows = xp.arange(first_row, first_row + c.shape[0], dtype=xp.uint64)[:, None]
    cols = xp.arange(c.shape[1], dtype=xp.uint64)[None, :]
    salt = _mix(xp, (((k * workload.n + rows) * 0x9E3779B1) ^ s1) & _M32)
    v = xp.astype(xp.astype(c, xp.int64), xp.uint64) & _M32  # two's complement, 32 bits
    h = _mix(xp, (((v ^ salt) * 0x27D4EB2F) + cols * 0x165667B1 + s0) & _M32)
    return xp.astype(xp.sum(h, axis=1, dtype=xp.uint64) & _M32, xp.uint32)


def digests_of(workload: Workload, *, xp: Any = None, dtype: Any = None) -> Any:
    """Every row digest of the workload, products in order: the prover's whole work, in the array
    namespace `xp` (numpy's by default: the reference prover; a GPU's, its digests stay on the
    device), the products multiplied in `dtype` (float64 by default; float32 is exact too, see
    the module's docstring)."""
    xp = _namespace(xp)
    w = workload
    b = matrix(w.seed, 0, 1, w.depth, w.n, xp=xp, dtype=dtype)
    parts = [row_digests(w, k, xp.matmul(matrix(w.seed, k, 0, w.n, w.depth, xp=xp, dtype=dtype), b), xp=xp)
             for k in range(w.products)]  # fmt: skip
    return xp.concat(parts)


def _namespace(xp: Any) -> Any:
    """The array namespace to compute in: numpy's (array-API-compatible) unless one is given."""
    if xp is not None:
        return xp
    import array_api_compat.numpy

    return array_api_compat.numpy


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
