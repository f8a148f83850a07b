"""The verification backend: what runs each GPU's challenges on this worker.

Simulated GPUs run the reference path (numpy: gpunet.verification, gpunet.vram), scaled down to
their simulated model. Real NVIDIA GPUs run the GPU backend, from the extra `gpunet[gpu]`: cupy for
the compute check's products and row digests (worker/gpu/compute.py), numba-cuda kernels for the
memory check's fill (worker/gpu/memory.py). A real GPU without the extra, or one CUDA does not show,
has no backend: its challenges are refused, saying what to install, and the node stays unverified
(a refusal is never a failed verification).

CUDA numbers devices its own way (fastest first, or as CUDA_VISIBLE_DEVICES says); NVML, which the
inventory comes from, by PCI bus. The backend finds each inventoried GPU's CUDA device by its PCI
bus id, so a challenge for GPU i runs on GPU i.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from gpunet.protocol import GpuInfo, Inventory

__all__ = ["EXTRA", "Backend", "backends", "cuda_devices"]

EXTRA = "gpunet[gpu]"
REFERENCE = "reference (numpy, simulated)"


@dataclass(frozen=True)
class Backend:
    """What runs one GPU's challenges: `name`, and the CUDA device for a real GPU's; or, when none
    can, why not (`refusal`, what the worker answers a challenge with)."""

    name: str | None
    device: int | None = None
    refusal: str | None = None


def _bus(bus_id: str) -> tuple[int, ...] | None:
    """A PCI bus id as numbers: NVML writes "00000000:3B:00.0", CUDA "0000:3b:00.0"."""
    try:
        domain, bus, rest = bus_id.strip().split(":")
        device, function = rest.split(".")
        return tuple(int(part, 16) for part in (domain, bus, device, function))
    except ValueError:
        return None


@functools.cache
def cuda_devices() -> tuple[dict[tuple[int, ...], int], str | None]:
    """CUDA's devices by PCI bus id, with the backend's version; or ({}, why there is no backend)."""
    try:
        import cupy
        import numba.cuda  # noqa: F401  (the memory check's kernels)
    except ImportError as e:
        return {}, f"this worker has no GPU backend ({e.name} is missing): install {EXTRA} (pip install '{EXTRA}')"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
        found = {}
        for index in range(count):
            bus = _bus(cupy.cuda.runtime.deviceGetPCIBusId(index))
            if bus is not None:
                found[bus] = index
    except cupy.cuda.runtime.CUDARuntimeError as e:
        return {}, (
            f"CUDA does not start ({e}): check the driver (nvidia-smi) and that it runs CUDA 12, which {EXTRA} brings"
        )
    return found, f"cupy {cupy.__version__}"


def _backend(inventory: Inventory, gpu: GpuInfo) -> Backend:
    if inventory.simulated:
        return Backend(REFERENCE)
    devices, detail = cuda_devices()
    if not devices:
        return Backend(None, refusal=detail)
    bus = _bus(gpu.pci_bus_id or "")
    if bus is None or bus not in devices:
        return Backend(None, refusal=f"GPU {gpu.index} ({gpu.pci_bus_id or 'no PCI bus id'}) is not one CUDA shows "
                       "(CUDA_VISIBLE_DEVICES hides it?): its challenges are refused")  # fmt: skip
    return Backend(f"GPU ({detail}, CUDA device {devices[bus]})", device=devices[bus])


def backends(inventory: Inventory) -> list[Backend]:
    """Each inventoried GPU's backend, in the inventory's order."""
    return [_backend(inventory, gpu) for gpu in inventory.gpus]
