"""The one interface the agent sees for its GPUs, real (NVML) or simulated, and where it is chosen."""

from __future__ import annotations

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


def open_gpus(simulate: str | None, node_key: str) -> GpuBackend:
    """Simulated GPUs when asked for explicitly, otherwise NVML (GpusUnavailable if it cannot start)."""
    if simulate:
        from worker.simulate import SimulatedGpus

        return SimulatedGpus.parse(simulate, node_key)
    from worker.nvml import NvmlGpus

    return NvmlGpus()
