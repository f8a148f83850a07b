"""`gpunet worker check --run`: each GPU answers a compute and a memory check here, through the
worker's own prover and backend, and this machine checks the answers as the coordinator would; the
supplier sees the measured times against what the coordinator expects and its deadlines, before
any challenge counts."""

from __future__ import annotations

import base64
import secrets
import time
from dataclasses import dataclass

from gpunet import verification as v
from gpunet import vram
from gpunet.catalog import GpuModel
from gpunet.protocol import Verify, VerifyMemory, VerifyOpen
from worker.verify import ChallengeRefused, Prover

__all__ = ["Measured", "check_gpu"]

COMPUTE_SECONDS = 8.0  # the coordinator's default (GPUNET_VERIFY_SECONDS)
SIMULATED_COMPUTE_SECONDS = 1.5  # its default for simulated GPUs
SIMULATED_MEMORY_SECONDS = 2.0  # shorter than the coordinator's 10 s: a simulated fill's time is a setting


@dataclass(frozen=True)
class Measured:
    """One check of one GPU: its measured time against the expected one and the deadline, and the
    verifier's finding (None: the answer holds)."""

    check: str  # "compute" or "memory"
    seconds: float
    expected_seconds: float
    deadline_seconds: float
    problem: str | None


async def _compute(prover: Prover, gpu: int, model: GpuModel) -> Measured:
    simulated = prover.inventory.simulated
    seconds = SIMULATED_COMPUTE_SECONDS if simulated else COMPUTE_SECONDS
    w = v.workload_for(model, v.new_seed(), simulated=simulated, seconds=seconds)
    challenge = Verify(id=secrets.token_hex(16), gpu=gpu, seed=w.seed.hex(), n=w.n, depth=w.depth,
                       products=w.products, expected_seconds=w.expected_seconds)  # fmt: skip
    started = time.monotonic()
    commit = await prover.commit(challenge, simulated)
    took = time.monotonic() - started
    rows = v.choose_rows(w)
    answer = prover.open(VerifyOpen(id=challenge.id, rows=[[k, r] for k, r in rows]), simulated)
    openings = [v.Opening(o.product, o.row, o.chunk, [bytes.fromhex(p) for p in o.path]) for o in answer.openings]
    problem = v.check_all(w, bytes.fromhex(commit.root), openings, rows)
    return Measured("compute", took, w.expected_seconds, w.deadline, problem)


async def _memory(prover: Prover, gpu: int, model: GpuModel) -> Measured:
    simulated = prover.inventory.simulated
    w = vram.memory_workload_for(model, v.new_seed(), simulated=simulated, simulated_seconds=SIMULATED_MEMORY_SECONDS)
    challenge = VerifyMemory(id=secrets.token_hex(16), gpu=gpu, seed=w.seed.hex(), lanes=w.lanes, blocks=w.blocks,
                             block_bytes=w.block_bytes, expected_seconds=w.expected_seconds)  # fmt: skip
    started = time.monotonic()
    commit = await prover.commit_memory(challenge, simulated)
    took = time.monotonic() - started
    asked = vram.choose_blocks(w)
    answered = time.monotonic()
    answer = await prover.open_memory(VerifyOpen(id=challenge.id, rows=[[a, b] for a, b in asked]), simulated)
    answer_seconds = time.monotonic() - answered
    openings = [
        vram.BlockOpening(b.lane, b.block, None if b.content is None else base64.b64decode(b.content), b.chunk,
                          [bytes.fromhex(p) for p in b.path])
        for b in answer.blocks
    ]  # fmt: skip
    problem = vram.check_memory(w, bytes.fromhex(commit.root), openings, asked)
    if problem is None and answer_seconds > w.answer_deadline:
        problem = (
            f"the blocks asked for took {answer_seconds:.2f} s, over the {w.answer_deadline:.1f} s answer deadline"
        )
    return Measured("memory", took, w.expected_seconds, w.deadline, problem)


async def check_gpu(prover: Prover, gpu: int, model: GpuModel) -> list[Measured | str]:
    """GPU `gpu`'s compute check, then its memory check; a check the prover refuses is its reason."""
    found: list[Measured | str] = []
    for run in (_compute, _memory):
        try:
            found.append(await run(prover, gpu, model))
        except ChallengeRefused as e:
            found.append(str(e))
    return found
