"""GPU verification's memory check: that a GPU holds the memory its claimed model has.

The verifier sends a fresh random seed and a workload sized from the claimed model's VRAM
(`memory_workload_for`): `MEMORY_FRACTION` of it, in `lanes` independent lanes of `blocks` blocks of
1 KiB each. The prover fills it with a memory-hard recurrence (`fill`), Argon2's step on standard
primitives. A block is 128 uint64 words (Argon2's block; on the wire, its 1024 little-endian
bytes). Block j of lane l is

    X = T(seed, l, j) ^ block j-1 ^ each distinct parent      (block 0: X = T(seed, l, 0))
    block j = P(X) ^ X

where T is a tweak block (each word a 64-bit mix, MurmurHash3's finalizer, of the seed, l, j and
the word's index: identical inputs at two places make different blocks, and another seed's blocks
are of no use), and P is Argon2's permutation: BLAKE2b's round function (its G, rotations 32, 24,
16, 63) over the block's 8 rows of 16 words, then over its 8 columns of word pairs (Argon2's
layout). G is BLAKE2b's own, without Argon2's multiplication (BlaMka): the multiplication makes a
step cost more on custom hardware, but here the prover and a cheater run the same GPUs and what
binds is a lane's sequential time, which the lane's length sets from the measured step (below);
plain G keeps P exactly the function whose GPU code the block digests' BLAKE2b checks against
hashlib, and is the cheaper step for the CPU verifier. The parents are `PARENTS` earlier blocks of
the lane picked by block j-1's first words at log-uniform distances (`parents_of`): which blocks a
step reads is known only once the one before it is computed, so a prover cannot plan which to
drop, and dropped blocks cost a chain of recomputation as long as the lane. A parent repeated, or
equal to block j-1, counts once (an XOR of a block with itself would cancel it: a block read
twice would then not be read at all). Lanes are independent (a GPU fills them in parallel); each
lane is sequential, but each step is parallel within its block (a GPU runs P's 8 rows, then its 8
columns, on 8 threads: worker/gpu/memory.py).

Why this step: it was SHAKE-128 over the step's inputs (and the digest SHA-256's first 8 bytes), a
serial sponge per block that a GPU cannot split among threads: its fill was far too slow to be
the one a deadline can assume. P runs the same on numpy (vectorised over rows and lanes, the
reference here) and on a GPU, bit for bit.

The prover commits, before a deadline derived from the fill's expected time at the claimed model
(`MemoryWorkload.deadline`), to the Merkle root over the blocks' 64-bit digests (BLAKE2b with an
8-byte digest; the compute challenge's tree, gpunet.verification). The verifier then names random
blocks (`choose_blocks`); within a short deadline (`MemoryWorkload.answer_deadline`: round trips,
not computation) the prover sends, for each, the chunk and path of its digest, and the contents of
its predecessor and parents with theirs (`open_blocks`). The verifier checks the paths and
recomputes each named block from its inputs (`check_memory`): up to 2 + PARENTS digests and one
step per named block, against the prover's step and digest for every block of the fill.

What that catches: a prover that filled the blocks with anything but the recurrence fails a named
block's recomputation (a fraction f of wrong blocks survives with probability (1 - f)**openings);
answers for another seed (a replay) or not matching the commitment fail every opening. A prover
that kept only a share s of the blocks (its VRAM smaller than claimed) must recompute each missing
one it is asked for from its inputs, and each missing input from its own: with 1 + PARENTS inputs
per block, each missing with probability 1 - s, that recomputation spreads over the lane's earlier
blocks once (1 + PARENTS) * (1 - s) > 1, i.e. s < 7/8 (`recompute_cost` counts it exactly, and the
dependency depth bounds its time however parallel the prover is). Such a prover misses the answer
deadline as long as the fill's sequential time per lane is far above it: a real lane's length is
set so that it is `LANE_ANSWER_DEADLINES` times the answer deadline at the model's step time
(REAL_STEP_SECONDS, assumed, until the coordinator's calibration passes a measured one).

What it does not prove: that the memory is the GPU's. It proves only that about that much memory
was held during the challenge, by the prover or by anything it can reach within the deadlines:
host RAM, another GPU, even another machine (16 named blocks' inputs are 128 KiB) could hold it,
as long as the fill's steps can read it. A lane's steps are sequential and few lanes run at once
(a few dozen: far less bandwidth than a GPU has), so only a fill deadline bound to the GPU's own
latency per step could pin the memory there: once the step is measured on the GPU, a prover whose
parents come from host memory adds a PCIe round trip to every step of its lanes and might miss the
fill's deadline for it; not measured.
Nor does it catch a small shortfall: the longest chain a short prover must recompute is a share
of its lane (it can always fill again), a share that shrinks with what it kept, so what is caught
depends on the lane's sequential time over the answer deadline. Measured (bench/verification/
memory.py): in the simulation (10 s against 1 s) a GPU holding 60 % of its claimed VRAM (75 % of
the fill's blocks) is caught in about half its checks, 50 % or less in every one; on a real lane
(20 answer deadlines long, 40 s) a GPU holding 40 % of its VRAM recomputes a chain of about 0.095
of its lane (3.8 s, over the 2 s deadline: caught), one holding half about 0.04 (1.6 s: not caught),
as with the lanes before this step (2**21 blocks at 20 us: 42 s). Lanes of 10 deadlines (20 s of
fill) would catch only from about a third down (0.16 of the lane, 3.2 s; 40 %: 1.9 s).

numpy/hashlib is the reference path: the verifier, and simulated workers, which take the fill time
the challenge expects (`MemoryWorkload.expected_seconds`, a setting of the simulation) and, when
they hold less memory than their model (a lie), the least time their recomputation takes
(`short_answer_seconds`), so that whether one is caught does not depend on the machine's speed.
"""

from __future__ import annotations

import hashlib
import math
import secrets
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from gpunet import verification as v
from gpunet.catalog import GpuModel

__all__ = [
    "BLOCK_BYTES",
    "BLOCK_WORDS",
    "MEMORY_FRACTION",
    "PARENTS",
    "BlockOpening",
    "Filled",
    "MemoryWorkload",
    "block_digests",
    "check_memory",
    "choose_blocks",
    "derive",
    "distinct",
    "fill",
    "kept_share",
    "lane_blocks",
    "memory_workload_for",
    "open_blocks",
    "openings",
    "parents_of",
    "permute",
    "recompute_cost",
    "short_answer_seconds",
    "tweak",
]

MEMORY_FRACTION = 0.8  # of the claimed model's VRAM (the rest: the driver, the context, the tree)
PARENTS = 7  # earlier blocks each block reads besides its predecessor (3: half the recomputation depth)
OPENINGS = v.OPENINGS  # blocks named per challenge
MARGIN = v.MARGIN  # the fill deadline's allowance over the expected time
WORDS = 2  # uint32 digest words per block (a 64-bit digest: BLAKE2b's, digest_size=8)
BLOCK_WORDS = 128  # uint64 words per block: Argon2's block, P's 8 rows of 16 words
BLOCK_BYTES = 8 * BLOCK_WORDS  # 16 openings' (1 + PARENTS) contents, chunks and paths stay well under a message's MiB
REAL_BLOCK_BYTES = BLOCK_BYTES
# A real lane's sequential time, in answer deadlines: only a lane's sequential steps make
# recomputing costly in time (a GPU recomputes missing blocks in parallel at its full bandwidth,
# but not the chain each depends on, which is a share of the lane: see the module's docstring).
# 20: a GPU holding 40 % of its VRAM or less recomputes a chain of about a tenth of its lane or
# more, twice the deadline (bench/verification/memory.py --real-lane); longer lanes catch smaller
# shortfalls, at the price of a longer fill (20 answer deadlines: 40 s on every model, whatever the
# step's time, as the 42 s lanes before; 10 would catch only from a third down).
LANE_ANSWER_DEADLINES = 20
# One step of a lane on a GPU (7 parents' 7 KiB read, X made, P on 8 threads, the block written):
# assumed, for the GPU backend to measure and the coordinator's calibration to replace per model
# (memory_workload_for's step_seconds). On the safe side for honest GPUs: a step measured shorter
# makes lanes longer; one longer than assumed would make honest fills late. worker/gpu/memory.py's
# kernel is expected (not measured) at a few microseconds: a global-memory round trip for the
# parents, P's 16 G per thread, four barriers.
REAL_STEP_SECONDS = 20e-6
REAL_EFFICIENCY = 0.25  # the share of its peak bandwidth a GPU reaches filling (reads + P + write)
# Round trips, the kernels' launch. The Merkle tree over the digests, built on the host, is not
# counted in: 2.3 s for an H100's 2**27 digest words on the CPU here, 5 s for a B200's, which
# MARGIN's quarter of the 40 s fill covers (a measured fill-and-commit time would count it).
REAL_ALLOWANCE_SECONDS = 2.0
SIMULATED_BLOCK_BYTES = BLOCK_BYTES
SIMULATED_LANES = 4
SIMULATED_MEMORY_SCALE = 2.0**-16  # a simulated H100's 64 GiB fill is 1 MiB
SIMULATED_ALLOWANCE_SECONDS = 1.0
REAL_ANSWER_SECONDS = 2.0  # the answer's deadline from the naming of the blocks: round trips, reading them
SIMULATED_ANSWER_SECONDS = 1.0  # a local round trip on a loaded machine, and the reference prover's openings


@dataclass(frozen=True)
class MemoryWorkload:
    """One GPU's memory challenge: what to fill and by when."""

    seed: bytes  # 16 random bytes from the verifier
    lanes: int
    blocks: int  # per lane
    block_bytes: int  # BLOCK_BYTES: the protocol carries it, the fill takes no other
    expected_seconds: float  # the fill's, at the claimed model (memory_workload_for)
    simulated: bool

    def __post_init__(self) -> None:
        if self.block_bytes != BLOCK_BYTES:
            raise ValueError(
                f"a memory check of {self.block_bytes}-byte blocks: the fill's blocks are {BLOCK_BYTES} bytes "
                f"({BLOCK_WORDS} uint64 words, P's 8 rows of 16), no other size"
            )
        if len(self.seed) != 16:
            raise ValueError(f"a memory check's seed is 16 bytes, not {len(self.seed)}")

    @property
    def total_blocks(self) -> int:
        return self.lanes * self.blocks

    @property
    def bytes(self) -> int:
        return self.total_blocks * self.block_bytes

    @property
    def deadline(self) -> float:
        """Seconds from the challenge's sending to its commitment's arrival."""
        allowance = SIMULATED_ALLOWANCE_SECONDS if self.simulated else REAL_ALLOWANCE_SECONDS
        return self.expected_seconds * (1 + MARGIN) + allowance

    @property
    def answer_deadline(self) -> float:
        """Seconds from the naming of the blocks to the answer's arrival: no time to recompute."""
        return SIMULATED_ANSWER_SECONDS if self.simulated else REAL_ANSWER_SECONDS


def _traffic(lanes: int, blocks: int, block_bytes: int) -> int:
    """Bytes a fill moves in the GPU's memory: each block reads its PARENTS parents (its predecessor
    is still on chip), is written once, and read once more for its digest."""
    return lanes * blocks * block_bytes * (2 + PARENTS)


def lane_blocks(step_seconds: float = REAL_STEP_SECONDS) -> int:
    """A real lane's length at `step_seconds` a step: LANE_ANSWER_DEADLINES answer deadlines."""
    return math.ceil(LANE_ANSWER_DEADLINES * REAL_ANSWER_SECONDS / step_seconds)


def memory_workload_for(
    model: GpuModel,
    seed: bytes,
    *,
    simulated: bool,
    simulated_seconds: float = 10.0,
    step_seconds: float | None = None,
) -> MemoryWorkload:
    """A fill of MEMORY_FRACTION of the model's VRAM (scaled down for simulated GPUs), in blocks of
    BLOCK_BYTES. A real GPU's lanes are `lane_blocks(step)` long or a little more (the fill's
    blocks spread over as many whole lanes as fit; one lane when the fill is shorter), `step` being
    `step_seconds` (a measured value for the model, from the coordinator's calibration) or
    REAL_STEP_SECONDS; it is expected to take the longer of a lane's sequential steps and the
    fill's traffic at REAL_EFFICIENCY of its model's memory bandwidth. The lanes' time dominates on
    every listed model, by design (few lanes, each long): an H100's 64 GiB at the assumed 20 us a
    step is 33 lanes of about 2 * 10**6 blocks, 40 s, against 0.74 s of traffic at a quarter of its
    3.35 TB/s (54 times less; 16 times on an L4, the least). A simulated GPU takes
    `simulated_seconds` (the check tests what is held, not speed: the compute check pins speed)."""
    size = model.vram_gb * 2**30 * MEMORY_FRACTION
    if simulated:
        lanes = SIMULATED_LANES
        blocks = max(2, math.floor(size * SIMULATED_MEMORY_SCALE / (lanes * BLOCK_BYTES)))
        return MemoryWorkload(seed, lanes, blocks, BLOCK_BYTES, simulated_seconds, simulated)
    step = REAL_STEP_SECONDS if step_seconds is None else step_seconds
    if not step > 0:
        raise ValueError(f"a step of {step} s")
    total = math.floor(size / BLOCK_BYTES)
    lanes = max(1, total // lane_blocks(step))
    blocks = max(2, total // lanes)
    bandwidth = _traffic(lanes, blocks, BLOCK_BYTES) / (model.memory_tbps * 1e12 * REAL_EFFICIENCY)
    return MemoryWorkload(seed, lanes, blocks, BLOCK_BYTES, max(bandwidth, blocks * step), simulated)


# The step on numpy: uint64 arrays wrap on overflow silently (numpy's scalars would warn: every
# operation below is on arrays).
_U = np.uint64
_FMIX = (_U(0xFF51AFD7ED558CCD), _U(0xC4CEB9FE1A85EC53))
_GOLDEN = _U(0x9E3779B97F4A7C15)  # 2**64 / the golden ratio: the word index's odd multiplier
_DIAGONAL = (np.array([5, 6, 7, 4]), np.array([10, 11, 8, 9]), np.array([15, 12, 13, 14]))  # b, c, d of the diagonal G


def _fmix(x: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finalizer: a bijection of uint64 that mixes every bit into every bit."""
    x = x ^ (x >> _U(33))
    x *= _FMIX[0]
    x ^= x >> _U(33)
    x *= _FMIX[1]
    x ^= x >> _U(33)
    return x


def tweak(seed: bytes, lanes: np.ndarray, js: np.ndarray) -> np.ndarray:
    """T(seed, lane, j): a block of words per (lane, j), uint64 [..., BLOCK_WORDS] for `lanes` and `js`
    of one shape. Word i is fmix(K ^ (i + 1) * GOLDEN) with K = fmix(s1 ^ fmix(s0 ^ (lane << 32 | j))),
    s0 and s1 the seed's two little-endian words: within a seed, every (lane, j) has its own K (fmix
    is a bijection) and every word of a tweak differs."""
    s0, s1 = np.frombuffer(seed, dtype="<u8").astype(np.uint64)
    position = (lanes.astype(np.uint64) << _U(32)) | js.astype(np.uint64)
    key = _fmix(s1 ^ _fmix(s0 ^ position))
    index = (np.arange(BLOCK_WORDS, dtype=np.uint64) + _U(1)) * _GOLDEN
    return _fmix(key[..., None] ^ index)


def _rotr(x: np.ndarray, r: int) -> None:
    """x rotated right by r bits, in place."""
    low = x >> _U(r)
    x <<= _U(64 - r)
    x |= low


def _g(a: np.ndarray, b: np.ndarray, c: np.ndarray, d: np.ndarray) -> None:
    """BLAKE2b's G without message words (Argon2's, less its multiplication), in place, on arrays."""
    a += b
    d ^= a
    _rotr(d, 32)
    c += d
    b ^= c
    _rotr(b, 24)
    a += b
    d ^= a
    _rotr(d, 16)
    c += d
    b ^= c
    _rotr(b, 63)


def _round(state: np.ndarray) -> None:
    """BLAKE2b's round without message words on each vector of 16 words, `state` holding them as
    uint64 [16, vectors] (word-major: each G operand is a contiguous run), in place: G on the columns
    (0, 4, 8, 12) ... (3, 7, 11, 15), then on the diagonals (0, 5, 10, 15) ... (3, 4, 9, 14)."""
    _g(state[0:4], state[4:8], state[8:12], state[12:16])
    b, c, d = state[_DIAGONAL[0]], state[_DIAGONAL[1]], state[_DIAGONAL[2]]
    _g(state[0:4], b, c, d)
    state[_DIAGONAL[0]], state[_DIAGONAL[1]], state[_DIAGONAL[2]] = b, c, d


def permute(x: np.ndarray) -> np.ndarray:
    """P(x) for blocks x (uint64 [..., BLOCK_WORDS]): Argon2's permutation, the round on each row of
    16 words (words 16i .. 16i + 15), then on each column of word pairs (words 2i, 2i + 1, 2i + 16,
    2i + 17, ..., 2i + 112, 2i + 113)."""
    lead = x.shape[:-1]
    state = np.ascontiguousarray(x.reshape(-1, 16).T)  # [word of the row, row]
    _round(state)
    rows = state.T.reshape(*lead, 8, 8, 2)  # [..., row, column, word of the pair]
    state = np.ascontiguousarray(rows.swapaxes(-3, -2).reshape(-1, 16).T)  # [word of the column, column]
    _round(state)
    return state.T.reshape(*lead, 8, 8, 2).swapaxes(-3, -2).reshape(*lead, BLOCK_WORDS)


def _step(x: np.ndarray) -> np.ndarray:
    return permute(x) ^ x


def _words(content: bytes) -> np.ndarray:
    return np.frombuffer(content, dtype="<u8").astype(np.uint64)


def parents_of(j: int, previous: bytes | np.ndarray) -> list[int]:
    """Block j's parents (j >= 1): earlier blocks of its lane, picked by its predecessor's first
    PARENTS words (bytes on the wire, or uint64 words), each at a distance drawn log-uniformly from
    1..j (a power-of-two range of distances at random, then a distance in it at random). Near
    parents make a dropped block's recomputation a long chain, so its time grows with the lane
    (with parents uniform over the lane the chain is only logarithmic: most of a big recomputation
    could then run in parallel); far ones make it spread back through the lane (no checkpoint of a
    few recent blocks lets a prover restart from there)."""
    words = _words(previous[: 8 * PARENTS]) if isinstance(previous, bytes) else previous[:PARENTS]
    parents = []
    for i in range(PARENTS):
        word = int(words[i])
        low = 1 << (word % j.bit_length())  # distances low..min(2 * low - 1, j)
        parents.append(j - low - (word >> 8) % (min(2 * low - 1, j) - low + 1))
    return parents


def _parents(j: int, words: np.ndarray) -> np.ndarray:
    """parents_of for every lane at once: int64 [lanes, PARENTS] from uint64 words [lanes, PARENTS]."""
    low = _U(1) << (words % _U(j.bit_length()))
    high = np.minimum(low * _U(2) - _U(1), _U(j))
    return (_U(j) - low - (words >> _U(8)) % (high - low + _U(1))).astype(np.int64)


def distinct(j: int, parents: Sequence[int]) -> list[bool]:
    """Which of block j's parents enter its X: each block once (not block j-1, which always does,
    nor a parent already picked)."""
    return [p != j - 1 and p not in parents[:i] for i, p in enumerate(parents)]


def _distinct(j: int, parents: np.ndarray) -> np.ndarray:
    """distinct for every lane at once: bool [lanes, PARENTS]."""
    earlier = np.tril(parents[:, :, None] == parents[:, None, :], -1).any(axis=-1)
    return ~earlier & (parents != j - 1)


def derive(w: MemoryWorkload, lane: int, j: int, previous: bytes | None, parents: Sequence[bytes]) -> bytes:
    """Block j of the lane from its inputs (none for block 0): block j-1's content and its parents'
    (in parents_of's order, repeats included), as bytes."""
    x = tweak(w.seed, np.array([lane]), np.array([j]))[0]
    if previous is not None:
        x ^= _words(previous)
        for used, content in zip(distinct(j, parents_of(j, previous)), parents, strict=True):
            if used:
                x ^= _words(content)
    return _step(x).astype("<u8").tobytes()


def block_digests(blocks: np.ndarray) -> np.ndarray:
    """The committed words of blocks (uint64 [..., BLOCK_WORDS], in order): each block's BLAKE2b
    with an 8-byte digest, as WORDS little-endian uint32 words."""
    raw = memoryview(np.ascontiguousarray(blocks, dtype="<u8").tobytes())
    digests = b"".join(
        hashlib.blake2b(raw[i : i + BLOCK_BYTES], digest_size=8).digest() for i in range(0, len(raw), BLOCK_BYTES)
    )
    return np.frombuffer(digests, dtype="<u4").copy()


def _digest(block: bytes) -> bytes:
    return hashlib.blake2b(block, digest_size=8).digest()


@dataclass
class Filled:
    """A prover's fill: every block, their digests (the committed words) and each block's parents."""

    workload: MemoryWorkload
    blocks: np.ndarray  # uint64 [lane, j, BLOCK_WORDS]
    digests: np.ndarray  # uint32, WORDS per block, lane-major
    parents: np.ndarray  # int64 [lane, j, PARENTS] (block 0: -1)

    def root(self) -> bytes:
        return v.commit(self.digests)

    def content(self, lane: int, j: int) -> bytes:
        """Block j of the lane as it is sent: its words' little-endian bytes."""
        return self.blocks[lane, j].astype("<u8").tobytes()


def fill(w: MemoryWorkload) -> Filled:
    """The reference prover's whole work: every lane at once (numpy), block after block."""
    lanes = np.arange(w.lanes)
    blocks = np.empty((w.lanes, w.blocks, BLOCK_WORDS), dtype=np.uint64)
    parents = np.full((w.lanes, w.blocks, PARENTS), -1, dtype=np.int64)
    tweaks = tweak(w.seed, lanes[:, None], np.arange(w.blocks)[None, :])
    blocks[:, 0] = _step(tweaks[:, 0])
    for j in range(1, w.blocks):
        previous = blocks[:, j - 1]
        picked = _parents(j, previous[:, :PARENTS])
        parents[:, j] = picked
        read = blocks[lanes[:, None], picked] * _distinct(j, picked)[..., None]  # [lane, PARENTS, words]
        blocks[:, j] = _step(previous ^ tweaks[:, j] ^ np.bitwise_xor.reduce(read, axis=1))
    return Filled(w, blocks, block_digests(blocks), parents)


def choose_blocks(w: MemoryWorkload, count: int = OPENINGS) -> list[tuple[int, int]]:
    """(lane, block) pairs to name, chosen after the commitment, unpredictably."""
    rng = secrets.SystemRandom()
    return [(rng.randrange(w.lanes), rng.randrange(w.blocks)) for _ in range(count)]


@dataclass(frozen=True)
class BlockOpening:
    """A block's chunk of digest words and the chunk's Merkle path; with its content when it is an input."""

    lane: int
    block: int
    content: bytes | None
    chunk: list[int]
    path: list[bytes]


def _inputs(w: MemoryWorkload, j: int, previous: bytes) -> list[int]:
    return [j - 1, *parents_of(j, previous)] if j > 0 else []


def openings(
    w: MemoryWorkload,
    digests: np.ndarray,
    asked: Sequence[tuple[int, int]],
    content: Callable[[int, int], bytes],
    levels: list[list[bytes]] | None = None,
) -> list[BlockOpening]:
    """Each named block's digest opening, then its predecessor's and parents' contents and openings
    (each block once), from the committed `digests` (their Merkle `levels`, when already built) and
    `content(lane, j)`, a block's bytes wherever the prover holds them (read once each)."""
    levels = v.merkle_levels(digests) if levels is None else levels
    opened: dict[tuple[int, int], BlockOpening] = {}
    contents: dict[tuple[int, int], bytes] = {}

    def held(lane: int, j: int) -> bytes:
        if (lane, j) not in contents:
            contents[(lane, j)] = content(lane, j)
        return contents[(lane, j)]

    def add(lane: int, j: int, block: bytes | None) -> None:
        if (lane, j) not in opened or (block is not None and opened[(lane, j)].content is None):
            chunk, path = v.open_chunk(levels, digests, WORDS * (lane * w.blocks + j))
            opened[(lane, j)] = BlockOpening(lane, j, block, chunk, path)

    for lane, j in asked:
        add(lane, j, None)
        if j > 0:
            for i in _inputs(w, j, held(lane, j - 1)):
                add(lane, i, held(lane, i))
    return list(opened.values())


def open_blocks(filled: Filled, asked: Sequence[tuple[int, int]]) -> list[BlockOpening]:
    """The reference prover's openings of the named blocks (`openings`)."""
    return openings(filled.workload, filled.digests, asked, filled.content)


def check_memory(
    w: MemoryWorkload, root: bytes, openings: Sequence[BlockOpening], asked: Sequence[tuple[int, int]]
) -> str | None:
    """None when every named block's inputs are opened with contents that match the commitment, and
    the block recomputed from them is the committed one; else the first reason."""
    opened = {(o.lane, o.block): o for o in openings}

    def holds(o: BlockOpening, digest: bytes) -> bool:
        position = WORDS * (o.lane * w.blocks + o.block)
        first = (position // v.CHUNK) * v.CHUNK
        if len(o.chunk) != min(v.CHUNK, WORDS * w.total_blocks - first):
            return False
        words = [int(x) for x in np.frombuffer(digest, dtype="<u4")]
        at = position - first
        return o.chunk[at : at + WORDS] == words and v.leads_to_root(root, position, o.chunk, o.path)

    for lane, j in asked:
        if not (0 <= lane < w.lanes and 0 <= j < w.blocks):
            return f"block {j} of lane {lane} is outside the workload"
        named = opened.get((lane, j))
        if named is None:
            return f"block {j} of lane {lane} was not opened"
        inputs: list[bytes] = []
        if j > 0:
            previous = opened.get((lane, j - 1))
            if previous is None or previous.content is None or len(previous.content) != w.block_bytes:
                return f"block {j} of lane {lane}: its predecessor's content was not sent"
            for i in _inputs(w, j, previous.content):
                o = opened.get((lane, i))
                if o is None or o.content is None or len(o.content) != w.block_bytes:
                    return f"block {j} of lane {lane}: the content of its input {i} was not sent"
                if not holds(o, _digest(o.content)):
                    return f"lane {lane} block {i}: the content sent is not the committed block (not held, or replaced)"
                inputs.append(o.content)
        block = derive(w, lane, j, inputs[0] if inputs else None, inputs[1:])
        if not holds(named, _digest(block)):
            return (
                f"lane {lane} block {j}: the committed block is not the one its inputs make "
                "(filled with something else, or another seed's)"
            )
    return None


def recompute_cost(filled: Filled, stored: np.ndarray, asked: Iterable[tuple[int, int]]) -> tuple[int, int]:
    """What a prover that kept only the blocks `stored` marks (bool [lane, j]) must recompute to
    answer: (hashes, depth), depth being the longest chain of them that must run one after another.
    It keeps every digest (they are small) so the named blocks themselves need no recomputation,
    only their inputs."""
    missing: set[tuple[int, int]] = set()
    stack = [(lane, i) for lane, j in asked if j > 0 for i in [j - 1, *filled.parents[lane, j]] if not stored[lane, i]]
    while stack:
        lane, i = stack.pop()
        if (lane, i) in missing:
            continue
        missing.add((lane, i))
        if i > 0:
            stack.extend((lane, int(d)) for d in [i - 1, *filled.parents[lane, i]] if not stored[lane, d])
    depth: dict[tuple[int, int], int] = {}
    for lane, i in sorted(missing):
        inputs = [i - 1, *filled.parents[lane, i]] if i > 0 else []
        depth[(lane, i)] = 1 + max((depth.get((lane, int(d)), 0) for d in inputs), default=0)
    return len(missing), max(depth.values(), default=0)


def short_answer_seconds(filled: Filled, stored: np.ndarray, asked: Iterable[tuple[int, int]]) -> float:
    """The least time a prover that kept only `stored` needs to answer, at its model's speed: its
    recomputation at the whole fill's rate, or its longest chain at a lane's sequential rate (each
    lane's blocks come one after another in the fill), whichever is longer."""
    w = filled.workload
    hashes, depth = recompute_cost(filled, stored, asked)
    return max(hashes * w.expected_seconds / w.total_blocks, depth * w.expected_seconds / w.blocks)


def kept_share(w: MemoryWorkload, share: float, rng: np.random.Generator | None = None) -> np.ndarray:
    """The blocks a prover with room for only `share` of them keeps, bool [lane, j]: block 0 of each
    lane and others at random (a spread the recomputation finds as cheap as any simple rule tried;
    keeping the blocks most read as parents made it deeper)."""
    rng = rng or np.random.default_rng()
    keep = max(1, min(w.blocks, math.floor(share * w.blocks)))
    stored = np.zeros((w.lanes, w.blocks), dtype=bool)
    stored[:, 0] = True
    for lane in range(w.lanes):
        stored[lane, 1 + rng.permutation(w.blocks - 1)[: keep - 1]] = True
    return stored
