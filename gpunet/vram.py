"""GPU verification's memory check: that a GPU holds the memory its claimed model has.

The verifier sends a fresh random seed and a workload sized from the claimed model's VRAM
(`memory_workload_for`): `MEMORY_FRACTION` of it, in `lanes` independent lanes of `blocks` blocks of
`block_bytes` each. The prover fills it with a memory-hard recurrence (`fill`): block 0 of lane l is
expand(seed, l); block j is expand(seed, l, j, block j-1, its `PARENTS` parents), the parents being
earlier blocks of the lane picked by block j-1's content at log-uniform distances (`parents_of`):
which blocks a later step reads is known only once the one before it is computed, so a prover
cannot plan which to drop, and dropped blocks cost a chain of recomputation as long as the lane.
Lanes are independent (a GPU fills them in parallel); each lane is sequential. SHAKE-128 is the
expansion (one hash per block, its output as long as a block).

The prover commits, before a deadline derived from the fill's expected time at the claimed model
(`MemoryWorkload.deadline`), to the Merkle root over the blocks' 64-bit digests (the compute
challenge's tree, gpunet.verification). The verifier then names random blocks (`choose_blocks`);
within a short deadline (`MemoryWorkload.answer_deadline`: round trips, not computation) the
prover sends, for each, the chunk and path of its digest, and the contents of its predecessor and
parents with theirs (`open_blocks`). The verifier checks the paths and recomputes each named block
from its inputs (`check_memory`): (2 + PARENTS) hashes per named block against the prover's one per
block of the whole fill.

What that catches: a prover that filled the blocks with anything but the recurrence fails a named
block's recomputation (a fraction f of wrong blocks survives with probability (1 - f)**openings);
answers for another seed (a replay) or not matching the commitment fail every opening. A prover
that kept only a share s of the blocks (its VRAM smaller than claimed) must recompute each missing
one it is asked for from its inputs, and each missing input from its own: with 1 + PARENTS inputs
per block, each missing with probability 1 - s, that recomputation spreads over the lane's earlier
blocks once (1 + PARENTS) * (1 - s) > 1, i.e. s < 7/8 (`recompute_cost` counts it exactly, and the
dependency depth bounds its time however parallel the prover is). Such a prover misses the answer
deadline as long as the fill's sequential time per lane is far above the round trip.

What it does not prove: that the memory is the GPU's. It proves only that about that much memory
was held during the challenge, by the prover or by anything it can reach within the answer
deadline: host RAM, another GPU, even another machine (16 named blocks' inputs are 128 KiB) could
hold it, as long as the fill's steps can read it. Only a fill and an answer deadline bound to the
GPU's own memory bandwidth would pin it there, and these parameters are not (a lane's steps are
sequential, and a few hundred lanes need far less bandwidth than a GPU has).
Nor does it catch a small shortfall: the longest chain a short prover must recompute is a share
of its lane (it can always fill again), a share that shrinks with what it kept, so what is caught
depends on the lane's sequential time over the answer deadline. Measured (bench/verification/
memory.py): in the simulation (10 s against 1 s) a GPU holding 60 % of its claimed VRAM (75 % of
the fill's blocks) is caught in about half its checks, 50 % or less in every one; on a real lane
(2**21 blocks, at an assumed 20 us a step, 42 s against 2 s) the chain reaches the deadline only
for a GPU holding about 40 % or less. That rests on the step time REAL_STEP_SECONDS assumes: a GPU
backend must measure it and set the lanes' length so.

numpy/hashlib is the reference path: the verifier, and simulated workers, which take the fill time
the challenge expects (`MemoryWorkload.expected_seconds`, a setting of the simulation) and, when
they hold less memory than their model (a lie), the least time their recomputation takes
(`short_answer_seconds`), so that whether one is caught does not depend on the machine's speed.
"""

from __future__ import annotations

import hashlib
import math
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from gpunet import verification as v
from gpunet.catalog import GpuModel

__all__ = [
    "MEMORY_FRACTION",
    "PARENTS",
    "BlockOpening",
    "Filled",
    "MemoryWorkload",
    "check_memory",
    "choose_blocks",
    "derive",
    "fill",
    "kept_share",
    "memory_workload_for",
    "open_blocks",
    "parents_of",
    "recompute_cost",
    "short_answer_seconds",
]

MEMORY_FRACTION = 0.8  # of the claimed model's VRAM (the rest: the driver, the context, the tree)
PARENTS = 7  # earlier blocks each block reads besides its predecessor (3: half the recomputation depth)
OPENINGS = v.OPENINGS  # blocks named per challenge
MARGIN = v.MARGIN  # the fill deadline's allowance over the expected time
WORDS = 2  # uint32 digest words per block (a 64-bit digest)
REAL_BLOCK_BYTES = 1024  # 16 openings' (1 + PARENTS) contents, chunks and paths stay well under a message's MiB
# Lanes are long (and so few: a lane per 2**21 blocks) because only a lane's sequential steps make
# recomputing costly in time: a GPU recomputes missing blocks in parallel at its full bandwidth, but
# not the chain each depends on, which is a share of the lane (see the module's docstring).
REAL_LANE_BLOCKS = 2**21
REAL_STEP_SECONDS = 20e-6  # one block's step on a GPU (a hash over 9 KiB): assumed, for a GPU backend to measure
REAL_EFFICIENCY = 0.25  # the share of its peak bandwidth a GPU reaches filling (reads + hashing + write)
REAL_ALLOWANCE_SECONDS = 2.0  # round trips, kernel launches
SIMULATED_BLOCK_BYTES = 1024
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
    block_bytes: int
    expected_seconds: float  # the fill's, at the claimed model (memory_workload_for)
    simulated: bool

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
    """Bytes a fill moves: each block reads its predecessor and parents and is written once."""
    return lanes * blocks * block_bytes * (2 + PARENTS)


def memory_workload_for(
    model: GpuModel,
    seed: bytes,
    *,
    simulated: bool,
    simulated_seconds: float = 10.0,
    step_seconds: float | None = None,
) -> MemoryWorkload:
    """A fill of MEMORY_FRACTION of the model's VRAM (scaled down for simulated GPUs). A real GPU
    is expected to take the longer of its lanes' sequential steps and the fill's traffic at
    REAL_EFFICIENCY of its model's memory bandwidth; a simulated one takes `simulated_seconds` (the
    check tests what is held, not speed: the compute check pins speed)."""
    size = model.vram_gb * 2**30 * MEMORY_FRACTION
    if simulated:
        lanes, block_bytes = SIMULATED_LANES, SIMULATED_BLOCK_BYTES
        blocks = max(2, math.floor(size * SIMULATED_MEMORY_SCALE / (lanes * block_bytes)))
        return MemoryWorkload(seed, lanes, blocks, block_bytes, simulated_seconds, simulated)
    block_bytes = REAL_BLOCK_BYTES
    lanes = max(1, math.floor(size / block_bytes / REAL_LANE_BLOCKS))
    blocks = max(2, math.floor(size / (lanes * block_bytes)))
    bandwidth = _traffic(lanes, blocks, block_bytes) / (model.memory_tbps * 1e12 * REAL_EFFICIENCY)
    step = REAL_STEP_SECONDS if step_seconds is None else step_seconds  # `step_seconds`: the model's calibration
    return MemoryWorkload(seed, lanes, blocks, block_bytes, max(bandwidth, blocks * step), simulated)


def _expand(w: MemoryWorkload, lane: int, j: int, inputs: Sequence[bytes]) -> bytes:
    h = hashlib.shake_128(b"gpunet-vram" + w.seed + lane.to_bytes(4, "little") + j.to_bytes(4, "little"))
    for block in inputs:
        h.update(block)
    return h.digest(w.block_bytes)


def parents_of(j: int, previous: bytes) -> list[int]:
    """Block j's parents (j >= 1): earlier blocks of its lane, picked by its predecessor's content,
    each at a distance drawn log-uniformly from 1..j (a power-of-two range of distances at random,
    then a distance in it at random). Near parents make a dropped block's recomputation a long
    chain, so its time grows with the lane (with parents uniform over the lane the chain is only
    logarithmic: most of a big recomputation could then run in parallel); far ones make it spread
    back through the lane (no checkpoint of a few recent blocks lets a prover restart from there)."""
    parents = []
    for i in range(PARENTS):
        word = int.from_bytes(previous[8 * i : 8 * i + 8], "little")
        low = 1 << (word % j.bit_length())  # distances low..min(2 * low - 1, j)
        parents.append(j - low - (word >> 8) % (min(2 * low - 1, j) - low + 1))
    return parents


def derive(w: MemoryWorkload, lane: int, j: int, previous: bytes | None, parents: Sequence[bytes]) -> bytes:
    """Block j of the lane from its inputs (none for block 0)."""
    return _expand(w, lane, j, [] if previous is None else [previous, *parents])


def _digest(block: bytes) -> bytes:
    return hashlib.sha256(block).digest()[: 4 * WORDS]


@dataclass
class Filled:
    """A prover's fill: every block, their digests (the committed words) and each block's parents."""

    workload: MemoryWorkload
    blocks: list[list[bytes]]  # [lane][j]
    digests: np.ndarray  # uint32, WORDS per block, lane-major
    parents: np.ndarray  # int64 [lane, j, PARENTS] (block 0: -1)

    def root(self) -> bytes:
        return v.commit(self.digests)


def fill(w: MemoryWorkload) -> Filled:
    """The reference prover's whole work: every lane, block after block."""
    lanes: list[list[bytes]] = []
    parents = np.full((w.lanes, w.blocks, PARENTS), -1, dtype=np.int64)
    for lane in range(w.lanes):
        blocks = [derive(w, lane, 0, None, [])]
        for j in range(1, w.blocks):
            picked = parents_of(j, blocks[j - 1])
            parents[lane, j] = picked
            blocks.append(derive(w, lane, j, blocks[j - 1], [blocks[p] for p in picked]))
        lanes.append(blocks)
    raw = b"".join(_digest(b) for blocks in lanes for b in blocks)
    return Filled(w, lanes, np.frombuffer(raw, dtype="<u4").copy(), parents)


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


def open_blocks(filled: Filled, asked: Sequence[tuple[int, int]]) -> list[BlockOpening]:
    """Each named block's digest opening, then its predecessor's and parents' contents and openings
    (each block once)."""
    w, levels = filled.workload, v.merkle_levels(filled.digests)
    opened: dict[tuple[int, int], BlockOpening] = {}

    def add(lane: int, j: int, content: bytes | None) -> None:
        if (lane, j) not in opened or (content is not None and opened[(lane, j)].content is None):
            chunk, path = v.open_chunk(levels, filled.digests, WORDS * (lane * w.blocks + j))
            opened[(lane, j)] = BlockOpening(lane, j, content, chunk, path)

    for lane, j in asked:
        add(lane, j, None)
        if j > 0:
            for i in _inputs(w, j, filled.blocks[lane][j - 1]):
                add(lane, i, filled.blocks[lane][i])
    return list(opened.values())


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
