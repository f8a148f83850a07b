"""The prover's side of GPU verification (gpunet.verification, gpunet.vram): a challenge runs on one
GPU no lease holds, its row digests (compute) or its filled blocks (memory) are committed, and the
rows or blocks the verifier then names are opened.

Each GPU's challenges run on its backend (worker/gpu). Simulated GPUs run the reference path (numpy,
scaled down) and take as long as their model's simulated throughput and bandwidth say, so a
simulated node answers like a GPU of that model would. One set up to hold less memory than its
model (`vram_share` < 1, a lie to see caught) keeps only the blocks that fit and takes, to answer, at
least the time recomputing the others would. A real GPU runs the GPU backend (the extra
gpunet[gpu]) as fast as it can: its time is its own. Without a backend its challenges are refused,
saying which extra to install: a refusal leaves the node unverified, it is never a failed
verification."""

from __future__ import annotations

import asyncio
import base64
import time
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from gpunet import verification as v
from gpunet import vram
from gpunet.catalog import CatalogError, GpuModel, gpu_model
from gpunet.logs import get_logger
from gpunet.protocol import (
    Inventory,
    MemoryBlock,
    RowOpening,
    Verify,
    VerifyCommit,
    VerifyMemory,
    VerifyMemoryOpenings,
    VerifyOpen,
    VerifyOpenings,
)
from worker.gpu import Backend, backends

__all__ = ["ChallengeRefused", "Prover"]

log = get_logger("gpunet.worker.verify")


class ChallengeRefused(Exception):
    """This worker does not take the challenge (the message says why)."""


@dataclass
class _Filled:
    """A memory check's fill on the reference path, and the blocks this (simulated) GPU could keep of it."""

    filled: vram.Filled
    stored: np.ndarray  # bool [lane, j]


class _DeviceFilled(Protocol):
    """A memory check's fill held on a real GPU (worker/gpu/memory.py)."""

    workload: vram.MemoryWorkload

    def root(self) -> bytes: ...

    def open_blocks(self, asked: list[tuple[int, int]]) -> list[vram.BlockOpening]: ...


_Kept = tuple[v.Workload, np.ndarray] | _Filled | _DeviceFilled


class Prover:
    def __init__(self, inventory: Inventory, *, slowdown: float = 1.0, vram_share: float = 1.0) -> None:
        self.inventory = inventory
        self.slowdown = slowdown  # > 1: a simulated GPU slower than its model (tests of the deadline)
        self.vram_share = vram_share  # < 1: a simulated GPU with less memory than its model (tests of the memory check)
        # Each GPU's latest challenge, by GPU: a node's GPUs are challenged at once, and a committed
        # challenge must stay until its openings are asked (refusing them fails the verification).
        self._kept: dict[int, tuple[str, _Kept]] = {}
        self.backends: list[Backend] = backends(inventory)

    def workload(self, challenge: Verify) -> v.Workload:
        return v.Workload(
            bytes.fromhex(challenge.seed),
            challenge.n,
            challenge.depth,
            challenge.products,
            challenge.expected_seconds,
            self.inventory.simulated,
        )

    async def commit(self, challenge: Verify, simulated: bool) -> VerifyCommit:
        """Runs the challenge on its GPU and commits to the digests (emulating the simulated model's speed)."""
        model = self._model(challenge.gpu)
        started = time.monotonic()
        workload = self.workload(challenge)
        device = self.backends[challenge.gpu].device
        if device is None:
            digests = await asyncio.to_thread(v.digests_of, workload)
            emulated = v.simulated_seconds(workload, model) * self.slowdown
            await asyncio.sleep(max(0.0, emulated - (time.monotonic() - started)))
        else:
            from worker.gpu import compute

            digests = await asyncio.to_thread(compute.digests, workload, device)
        self._kept[challenge.gpu] = (challenge.id, (workload, digests))
        return VerifyCommit(simulated=simulated, id=challenge.id, root=v.commit(digests).hex())

    def _model(self, gpu: int) -> GpuModel:
        """The model of a GPU this worker can run a challenge on."""
        if gpu >= len(self.inventory.gpus):
            raise ChallengeRefused(f"this node has no GPU {gpu}")
        if (refusal := self.backends[gpu].refusal) is not None:
            raise ChallengeRefused(f"{refusal}; the node stays unverified")
        try:
            return gpu_model(self.inventory.gpus[gpu].model)
        except CatalogError as e:
            raise ChallengeRefused(f"GPU {gpu} is not a listed model: {e}") from None

    def _take(self, challenge: str) -> _Kept | None:
        """The commitment of `challenge`, no longer kept once taken (its openings are sent once)."""
        for gpu, (id_, kept) in list(self._kept.items()):
            if id_ == challenge:
                del self._kept[gpu]
                return kept
        return None

    async def commit_memory(self, challenge: VerifyMemory, simulated: bool) -> VerifyCommit:
        """Fills the memory check's blocks and commits to them, taking the time the challenge expects
        (a simulated fill's time is the simulation's setting); a GPU with less memory than its model
        keeps only what fits."""
        model = self._model(challenge.gpu)
        started = time.monotonic()
        try:
            workload = vram.MemoryWorkload(
                bytes.fromhex(challenge.seed), challenge.lanes, challenge.blocks, challenge.block_bytes,
                challenge.expected_seconds, self.inventory.simulated,
            )  # fmt: skip
        except ValueError as e:  # another fill's blocks (the protocol allows sizes this fill does not take)
            raise ChallengeRefused(f"challenge {challenge.id}: {e}") from None
        device = self.backends[challenge.gpu].device
        if device is not None:
            from worker.gpu import memory

            on_device = await asyncio.to_thread(memory.fill_on_device, workload, device)
            self._kept[challenge.gpu] = (challenge.id, on_device)
            return VerifyCommit(simulated=simulated, id=challenge.id, root=on_device.root().hex())
        if workload.bytes > vram.SIMULATED_MEMORY_SCALE * model.vram_gb * 2**30:
            raise ChallengeRefused(f"a fill of {workload.bytes} bytes is more than a simulated {model.name} holds")
        filled = await asyncio.to_thread(vram.fill, workload)
        share = min(1.0, self.vram_share / vram.MEMORY_FRACTION)
        stored = vram.kept_share(workload, share) if share < 1 else np.ones((workload.lanes, workload.blocks), bool)
        emulated = workload.expected_seconds * self.slowdown
        await asyncio.sleep(max(0.0, emulated - (time.monotonic() - started)))
        self._kept[challenge.gpu] = (challenge.id, _Filled(filled, stored))
        return VerifyCommit(simulated=simulated, id=challenge.id, root=filled.root().hex())

    def holds_memory(self, challenge: str) -> bool:
        """Whether `challenge` is a memory check this prover committed to (its opening takes time)."""
        return any(id_ == challenge and not isinstance(kept, tuple) for id_, kept in self._kept.values())

    async def open_memory(self, request: VerifyOpen, simulated: bool) -> VerifyMemoryOpenings:
        """The named blocks' openings, as soon as the blocks are at hand: at once when all were kept,
        else after the recomputation of the missing inputs would take at the model's speed."""
        started = time.monotonic()
        kept = self._take(request.id)
        if kept is None or isinstance(kept, tuple):
            raise ChallengeRefused(f"no memory commitment of challenge {request.id} is kept here")
        w = kept.filled.workload if isinstance(kept, _Filled) else kept.workload
        asked = [(lane, j) for lane, j in request.rows]
        if any(not (lane < w.lanes and j < w.blocks) for lane, j in asked):
            raise ChallengeRefused(f"a block asked for is outside challenge {request.id}")
        if isinstance(kept, _Filled):
            opened = await asyncio.to_thread(vram.open_blocks, kept.filled, asked)
            recompute = vram.short_answer_seconds(kept.filled, kept.stored, asked) * self.slowdown
            await asyncio.sleep(max(0.0, recompute - (time.monotonic() - started)))
        else:
            opened = await asyncio.to_thread(kept.open_blocks, asked)
        blocks = [
            MemoryBlock(
                lane=o.lane,
                block=o.block,
                chunk=o.chunk,
                path=[p.hex() for p in o.path],
                content=None if o.content is None else base64.b64encode(o.content).decode(),
            )
            for o in opened
        ]
        return VerifyMemoryOpenings(simulated=simulated, id=request.id, blocks=blocks)

    def open(self, request: VerifyOpen, simulated: bool) -> VerifyOpenings:
        kept = self._take(request.id)
        if not isinstance(kept, tuple):
            raise ChallengeRefused(f"no commitment of challenge {request.id} is kept here")
        workload, digests = kept
        openings = []
        for k, row in request.rows:
            if not (k < workload.products and row < workload.n):
                raise ChallengeRefused(f"row {row} of product {k} is outside challenge {request.id}")
            o = v.open_row(workload, digests, k, row)
            openings.append(RowOpening(product=k, row=row, chunk=o.chunk, path=[p.hex() for p in o.path]))
        return VerifyOpenings(simulated=simulated, id=request.id, openings=openings)
