"""The memory check's fill on a real GPU: gpunet.vram's construction as numba-cuda kernels.

One launch fills the whole workload (`_fill`): a launch per step would make an honest GPU pay a
launch's overhead at every step of a lane, a cost a cheater's own kernel would not have, and the
lane's length is set from the step's time. Each lane runs on 8 threads of a CUDA block (threads
(8, lanes_per_block): `lanes_per_block` lanes share a block, 1 by default), looping over the lane's
blocks: at each step every thread picks the parents from block j-1's first words (in shared
memory), thread t makes the words t, t + 8, ..., t + 120 of X (the tweak, block j-1, each distinct
parent read from the device array: 8 threads read 64 contiguous bytes at a time), then permutes row
t of X, then column t (Argon2's pairs of words), with a barrier between the passes and between
steps; block j = P(X) ^ X is written to the device array [lanes, blocks, 128] of uint64 and kept in
shared memory as the next step's predecessor. A second kernel (`_digests`) hashes every block with
BLAKE2b (8-byte digest), one thread per block: its G is the very device function P uses, so the
check of its digests against hashlib checks P's arithmetic too. Only the digests (8 bytes a block)
come to the host, where the Merkle tree is built with gpunet.verification's functions (about a
second for an H100's 2**27 digest words: within the fill deadline's allowance); openings copy only
the blocks they send off the device.

The same kernels run under numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1: each thread a Python
thread, numpy scalars for its registers), which is how CI tests them bit for bit against the numpy
reference (tests/gpu); a real GPU runs them with GPUNET_GPU_DEVICE=1 (bench/verification/gpu-check).
"""

from __future__ import annotations

import contextlib
import functools
import math
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpunet import verification as v
from gpunet import vram
from worker.gpu import EXTRA

try:
    from numba import boolean, cuda, int64, uint64
    from numba.core import config as _numba_config
except ImportError as e:
    raise ImportError(
        f"worker.gpu.memory runs the memory check's fill with numba-cuda ({e.name} is missing): "
        f"install {EXTRA} (pip install '{EXTRA}')"
    ) from e
except Exception as e:  # numba-cuda is there, the CUDA runtime it loads at import is not
    raise ImportError(f"numba-cuda does not load ({e}): install {EXTRA}, which brings the CUDA 12 runtime") from e

__all__ = ["LANES_PER_BLOCK", "SIMULATED", "DeviceFill", "blake2b_digests", "fill_on_device"]

SIMULATED = bool(_numba_config.ENABLE_CUDASIM)  # numba's CUDA simulator, not a GPU
LANES_PER_BLOCK = 1  # lanes per CUDA block (of 8 threads each): the device run may show 4 (a warp) better
DIGEST_THREADS = 128  # threads per CUDA block of the digest kernel
PARENTS = vram.PARENTS
WORDS = vram.BLOCK_WORDS

# Constants the kernels read (numba freezes module globals into the compiled code).
_ZERO, _ONE, _TWO = np.uint64(0), np.uint64(1), np.uint64(2)
_S8, _S32, _S33 = np.uint64(8), np.uint64(32), np.uint64(33)
_R32, _L32 = np.uint64(32), np.uint64(32)
_R24, _L24 = np.uint64(24), np.uint64(40)
_R16, _L16 = np.uint64(16), np.uint64(48)
_R63, _L63 = np.uint64(63), np.uint64(1)
_LOW32 = np.uint64(0xFFFFFFFF)
_FMIX1, _FMIX2 = np.uint64(0xFF51AFD7ED558CCD), np.uint64(0xC4CEB9FE1A85EC53)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_BLAKE2B_PARAMS = np.uint64(0x01010008)  # digest length 8, no key, fanout 1, depth 1
_IV = np.array(
    [0x6A09E667F3BCC908, 0xBB67AE8584CAA73B, 0x3C6EF372FE94F82B, 0xA54FF53A5F1D36F1,
     0x510E527FADE682D1, 0x9B05688C2B3E6C1F, 0x1F83D9ABFB41BD6B, 0x5BE0CD19137E2179],
    dtype=np.uint64,
)  # fmt: skip
# BLAKE2b's message schedule, its 12 rounds.
_SIGMA = np.array(
    [[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15],
     [14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3],
     [11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4],
     [7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8],
     [9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13],
     [2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9],
     [12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11],
     [13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10],
     [6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5],
     [10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0],
     [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15],
     [14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3]],
    dtype=np.uint8,
)  # fmt: skip


@cuda.jit(device=True, inline=True)
def _rotr(x: Any, right: Any, left: Any) -> Any:
    return (x >> right) | (x << left)


@cuda.jit(device=True, inline=True)
def _g(s: Any, a: int, b: int, c: int, d: int, x: Any, y: Any) -> None:
    """BLAKE2b's G on the 16 words `s`, with message words x and y (0 in P: Argon2's G less BlaMka)."""
    s[a] = s[a] + s[b] + x
    s[d] = _rotr(s[d] ^ s[a], _R32, _L32)
    s[c] = s[c] + s[d]
    s[b] = _rotr(s[b] ^ s[c], _R24, _L24)
    s[a] = s[a] + s[b] + y
    s[d] = _rotr(s[d] ^ s[a], _R16, _L16)
    s[c] = s[c] + s[d]
    s[b] = _rotr(s[b] ^ s[c], _R63, _L63)


@cuda.jit(device=True, inline=True)
def _permute16(s: Any) -> None:
    """BLAKE2b's round without message words on 16 words: P's row or column."""
    _g(s, 0, 4, 8, 12, _ZERO, _ZERO)
    _g(s, 1, 5, 9, 13, _ZERO, _ZERO)
    _g(s, 2, 6, 10, 14, _ZERO, _ZERO)
    _g(s, 3, 7, 11, 15, _ZERO, _ZERO)
    _g(s, 0, 5, 10, 15, _ZERO, _ZERO)
    _g(s, 1, 6, 11, 12, _ZERO, _ZERO)
    _g(s, 2, 7, 8, 13, _ZERO, _ZERO)
    _g(s, 3, 4, 9, 14, _ZERO, _ZERO)


@cuda.jit(device=True, inline=True)
def _fmix(x: Any) -> Any:
    x = x ^ (x >> _S33)
    x = x * _FMIX1
    x = x ^ (x >> _S33)
    x = x * _FMIX2
    return x ^ (x >> _S33)


@functools.cache
def _fill_kernel(lanes_per_block: int) -> Any:
    """The fill kernel for CUDA blocks of `lanes_per_block` lanes (a shared-memory shape is a constant)."""
    lpb = lanes_per_block

    @cuda.jit
    def fill(seed: Any, blocks: Any, parents: Any, record: bool) -> None:
        t = cuda.threadIdx.x  # the row, then the column, this thread permutes
        y = cuda.threadIdx.y  # the lane within the CUDA block
        lane = cuda.blockIdx.x * lpb + y
        n = blocks.shape[1]
        active = lane < blocks.shape[0]  # a last CUDA block's spare lanes compute, read and write nothing
        previous = cuda.shared.array((lpb, 128), uint64)  # block j-1
        xs = cuda.shared.array((lpb, 128), uint64)  # X
        # P's state, by row of 16 words padded to 17: the row pass's 8 threads hit distinct banks
        zs = cuda.shared.array((lpb, 8, 17), uint64)
        s = cuda.local.array(16, uint64)
        picked = cuda.local.array(PARENTS, int64)
        used = cuda.local.array(PARENTS, boolean)
        s0, s1 = seed[0], seed[1]
        position = np.uint64(lane) << _S32
        bits = _ZERO  # j's bit length
        for j in range(n):
            ju = np.uint64(j)
            key = _fmix(s1 ^ _fmix(s0 ^ (position | ju)))
            if j > 0:
                if (ju >> bits) != _ZERO:
                    bits += _ONE
                for i in range(PARENTS):  # vram.parents_of
                    word = previous[y, i]
                    low = _ONE << (word % bits)
                    high = min(low * _TWO - _ONE, ju)
                    picked[i] = np.int64(ju - low - (word >> _S8) % (high - low + _ONE))
                for i in range(PARENTS):  # vram.distinct
                    u = picked[i] != j - 1
                    for k in range(i):
                        if picked[k] == picked[i]:
                            u = False
                    used[i] = u
            else:
                for i in range(PARENTS):
                    picked[i] = -1
                    used[i] = False
            for k in range(16):
                w = t + 8 * k
                value = _fmix(key ^ (np.uint64(w + 1) * _GOLDEN))  # vram.tweak's word w
                if j > 0:
                    value ^= previous[y, w]
                    if active:
                        for i in range(PARENTS):
                            if used[i]:
                                value ^= blocks[lane, picked[i], w]
                xs[y, w] = value
                zs[y, w // 16, w % 16] = value
            cuda.syncthreads()
            for i in range(16):  # row t: words 16t .. 16t + 15
                s[i] = zs[y, t, i]
            _permute16(s)
            for i in range(16):
                zs[y, t, i] = s[i]
            cuda.syncthreads()
            for r in range(8):  # column t: words 2t + 16r, 2t + 16r + 1
                s[2 * r] = zs[y, r, 2 * t]
                s[2 * r + 1] = zs[y, r, 2 * t + 1]
            _permute16(s)
            for r in range(8):
                zs[y, r, 2 * t] = s[2 * r]
                zs[y, r, 2 * t + 1] = s[2 * r + 1]
            cuda.syncthreads()
            for k in range(16):
                w = t + 8 * k
                block = zs[y, w // 16, w % 16] ^ xs[y, w]
                previous[y, w] = block
                if active:
                    blocks[lane, j, w] = block
            if record and active and t == 0:
                for i in range(PARENTS):
                    parents[lane, j, i] = picked[i]
            cuda.syncthreads()

    return fill


@cuda.jit
def _digests(blocks: Any, digests: Any) -> None:
    """Each block's BLAKE2b with an 8-byte digest (unkeyed, 1024 bytes: 8 message blocks), as two
    little-endian uint32 words at 2i, 2i + 1, i the block's lane-major index."""
    i = cuda.grid(1)
    n = blocks.shape[1]
    if i >= blocks.shape[0] * n:
        return
    lane, j = i // n, i % n
    h = cuda.local.array(8, uint64)
    s = cuda.local.array(16, uint64)
    m = cuda.local.array(16, uint64)
    for k in range(8):
        h[k] = _IV[k]
    h[0] ^= _BLAKE2B_PARAMS
    for c in range(8):
        for k in range(16):
            m[k] = blocks[lane, j, 16 * c + k]
        for k in range(8):
            s[k] = h[k]
            s[k + 8] = _IV[k]
        s[12] ^= np.uint64(128 * (c + 1))  # bytes hashed so far (the counter's high word stays 0)
        if c == 7:
            s[14] = ~s[14]  # the last block
        for r in range(12):
            _g(s, 0, 4, 8, 12, m[_SIGMA[r, 0]], m[_SIGMA[r, 1]])
            _g(s, 1, 5, 9, 13, m[_SIGMA[r, 2]], m[_SIGMA[r, 3]])
            _g(s, 2, 6, 10, 14, m[_SIGMA[r, 4]], m[_SIGMA[r, 5]])
            _g(s, 3, 7, 11, 15, m[_SIGMA[r, 6]], m[_SIGMA[r, 7]])
            _g(s, 0, 5, 10, 15, m[_SIGMA[r, 8]], m[_SIGMA[r, 9]])
            _g(s, 1, 6, 11, 12, m[_SIGMA[r, 10]], m[_SIGMA[r, 11]])
            _g(s, 2, 7, 8, 13, m[_SIGMA[r, 12]], m[_SIGMA[r, 13]])
            _g(s, 3, 4, 9, 14, m[_SIGMA[r, 14]], m[_SIGMA[r, 15]])
        for k in range(8):
            h[k] ^= s[k] ^ s[k + 8]
    digests[2 * i] = np.uint32(h[0] & _LOW32)
    digests[2 * i + 1] = np.uint32(h[0] >> _S32)


@contextlib.contextmanager
def _wrapping() -> Iterator[None]:
    """The simulator's registers are numpy scalars, which warn when they wrap (the GPU's wrap
    silently, as the construction means): silenced for the kernels' run, on the simulator only."""
    if not SIMULATED:
        yield
        return
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "overflow encountered", RuntimeWarning)
        yield


def _digest_words(blocks: Any) -> Any:
    """Every block's digest words, on the device (uint32 [2 * lanes * blocks])."""
    count = blocks.shape[0] * blocks.shape[1]
    digests = cuda.device_array(vram.WORDS * count, dtype=np.uint32)
    with _wrapping():
        _digests[math.ceil(count / DIGEST_THREADS), DIGEST_THREADS](blocks, digests)
    return digests


def blake2b_digests(blocks: np.ndarray, device: int = 0) -> np.ndarray:
    """The digest kernel on host blocks (uint64 [lanes, blocks, 128]): vram.block_digests, on the GPU."""
    with cuda.gpus[device]:
        return np.asarray(_digest_words(cuda.to_device(np.ascontiguousarray(blocks, dtype=np.uint64))).copy_to_host())


@dataclass
class DeviceFill:
    """A fill held on a GPU: its blocks stay there (`blocks`, a device array uint64 [lane, j, 128]);
    its digests are on the host, and so is the Merkle tree over them once built."""

    workload: vram.MemoryWorkload
    device: int
    blocks: Any
    digests: np.ndarray  # uint32, vram.WORDS per block, lane-major
    parents: Any | None = None  # device int32 [lane, j, PARENTS] (block 0: -1), when the fill recorded them
    _levels: list[list[bytes]] | None = field(default=None, repr=False)

    def levels(self) -> list[list[bytes]]:
        if self._levels is None:
            self._levels = v.merkle_levels(self.digests)
        return self._levels

    def root(self) -> bytes:
        return self.levels()[-1][0]

    def content(self, lane: int, j: int) -> bytes:
        """Block j of the lane, copied off the device: its words' little-endian bytes."""
        with cuda.gpus[self.device]:
            return np.asarray(self.blocks[lane, j].copy_to_host()).astype("<u8").tobytes()

    def open_blocks(self, asked: Sequence[tuple[int, int]]) -> list[vram.BlockOpening]:
        """The named blocks' openings (vram.openings), copying off the device only the blocks sent
        and the named blocks' predecessors."""
        return vram.openings(self.workload, self.digests, asked, self.content, self.levels())


def fill_on_device(
    workload: vram.MemoryWorkload,
    device: int = 0,
    *,
    record_parents: bool = False,
    lanes_per_block: int = LANES_PER_BLOCK,
) -> DeviceFill:
    """Fills the workload on CUDA device `device` (one launch), then digests every block there.
    With `record_parents`, the parents each step used are kept too (int32 [lanes, blocks, PARENTS]
    on the device: 28 bytes a block more, for tests: a real fill does not need them)."""
    w = workload
    with cuda.gpus[device]:
        blocks = cuda.device_array((w.lanes, w.blocks, WORDS), dtype=np.uint64)
        parents = cuda.device_array((w.lanes, w.blocks, PARENTS) if record_parents else (1, 1, PARENTS), np.int32)
        seed = cuda.to_device(np.frombuffer(w.seed, dtype="<u8").astype(np.uint64))
        grid = math.ceil(w.lanes / lanes_per_block)
        with _wrapping():
            _fill_kernel(lanes_per_block)[grid, (8, lanes_per_block)](seed, blocks, parents, record_parents)
        digests = np.asarray(_digest_words(blocks).copy_to_host())
        cuda.synchronize()
    return DeviceFill(w, device, blocks, digests, parents if record_parents else None)
