"""The prover's side of GPU verification (gpunet.verification): a challenge runs on one GPU no
lease holds, its row digests are committed, and the rows the verifier then names are opened.

Simulated GPUs run the reference path (numpy, scaled down) and take as long as their model's
simulated throughput says, so a simulated node answers like a GPU of that model would. A real GPU
needs a GPU backend for the products; this worker has none yet, so it refuses challenges on real
GPUs, saying so: a refusal leaves the node unverified, it is never a failed verification."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict

import numpy as np

from gpunet import verification as v
from gpunet.catalog import CatalogError, gpu_model
from gpunet.protocol import Inventory, RowOpening, Verify, VerifyCommit, VerifyOpen, VerifyOpenings

__all__ = ["ChallengeRefused", "Prover"]

log = logging.getLogger("gpunet.worker.verify")

KEEP = 8  # challenges whose digests are kept for their openings


class ChallengeRefused(Exception):
    """This worker does not take the challenge (the message says why)."""


class Prover:
    def __init__(self, inventory: Inventory, *, slowdown: float = 1.0) -> None:
        self.inventory = inventory
        self.slowdown = slowdown  # > 1: a simulated GPU slower than its model (tests of the deadline)
        self._kept: OrderedDict[str, tuple[v.Workload, np.ndarray]] = OrderedDict()

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
        if challenge.gpu >= len(self.inventory.gpus):
            raise ChallengeRefused(f"this node has no GPU {challenge.gpu}")
        gpu = self.inventory.gpus[challenge.gpu]
        if not self.inventory.simulated:
            raise ChallengeRefused(
                "this worker has no GPU backend for verification challenges yet: the node stays unverified"
            )
        try:
            model = gpu_model(gpu.model)
        except CatalogError as e:
            raise ChallengeRefused(f"GPU {challenge.gpu} is not a listed model: {e}") from None
        started = time.monotonic()
        workload = self.workload(challenge)
        digests = await asyncio.to_thread(v.digests_of, workload)
        emulated = v.simulated_seconds(workload, model) * self.slowdown
        await asyncio.sleep(max(0.0, emulated - (time.monotonic() - started)))
        self._kept[challenge.id] = (workload, digests)
        while len(self._kept) > KEEP:
            self._kept.popitem(last=False)
        return VerifyCommit(simulated=simulated, id=challenge.id, root=v.commit(digests).hex())

    def open(self, request: VerifyOpen, simulated: bool) -> VerifyOpenings:
        kept = self._kept.pop(request.id, None)
        if kept is None:
            raise ChallengeRefused(f"no commitment of challenge {request.id} is kept here")
        workload, digests = kept
        openings = []
        for k, row in request.rows:
            if not (k < workload.products and row < workload.n):
                raise ChallengeRefused(f"row {row} of product {k} is outside challenge {request.id}")
            o = v.open_row(workload, digests, k, row)
            openings.append(RowOpening(product=k, row=row, chunk=o.chunk, path=[p.hex() for p in o.path]))
        return VerifyOpenings(simulated=simulated, id=request.id, openings=openings)
