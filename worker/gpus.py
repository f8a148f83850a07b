"""The one interface the agent sees for its GPUs, real (NVML) or simulated, and where it is chosen."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol

from gpunet.protocol import GpuTelemetry, Inventory

__all__ = ["GpuBackend", "GpusUnavailable", "open_gpus"]


class GpusUnavailable(RuntimeError):
    """No usable GPUs (no NVIDIA driver, NVML failing, no GPU listed); the message says why."""


class GpuBackend(Protocol):
    simulated: bool

    def inventory(self) -> Inventory:
        """The hardware, read once at start-up."""
        ...

    def sample(self) -> list[GpuTelemetry]:
        """One health sample per inventoried GPU; a GPU that fails or vanished is unhealthy."""
        ...

    def close(self) -> None: ...


def open_gpus(simulate: str | None, node_key: str, *, watch_xids: bool = True) -> GpuBackend:
    """Simulated GPUs when asked for explicitly, otherwise NVML (GpusUnavailable if it cannot start);
    `watch_xids`: count NVML's Xid events from now on (the agent does, a one-off reading does not)."""
    if simulate:
        from worker.simulate import FAULTS_ENV, SimulatedGpus

        faults = os.environ.get(FAULTS_ENV)
        return SimulatedGpus.parse(simulate, node_key, Path(faults) if faults else None)
    from worker.nvml import NvmlGpus

    return NvmlGpus(watch_xids=watch_xids)
