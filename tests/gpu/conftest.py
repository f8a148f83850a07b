"""The GPU backend's kernels (worker/gpu/memory.py) under numba's CUDA simulator, which CI runs: it
is switched on here, before numba is imported, unless GPUNET_GPU_DEVICE=1, when the same tests run
on the machine's GPU 0 (bench/verification/gpu-check), at sizes a GPU makes quick and with cupy
arrays for what a test does to the device's memory. Under the simulator the sizes are small: it
runs a kernel's threads as Python threads."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

import pytest

ON_DEVICE = os.environ.get("GPUNET_GPU_DEVICE") == "1"
if not ON_DEVICE:
    if "numba.cuda" in sys.modules and not sys.modules["numba.core.config"].ENABLE_CUDASIM:
        raise RuntimeError("numba.cuda was imported before tests/gpu could switch the CUDA simulator on")
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"


@dataclass(frozen=True)
class Sizes:
    """What the tests fill: lanes x blocks, bit for bit against the numpy reference."""

    lanes: int
    blocks: int
    digests: int  # random blocks whose BLAKE2b the kernel computes
    on_device: bool


@pytest.fixture(scope="session")
def sizes() -> Sizes:
    # On a GPU: 32 MiB against the reference (numpy fills it in about a second), and the real
    # workload of the GPU's model in tests that need no reference fill.
    return Sizes(64, 512, 4096, True) if ON_DEVICE else Sizes(2, 16, 6, False)


def flip(device_array: Any, index: tuple[int, ...]) -> None:
    """Flips the lowest bit of one word of a device array, in the device's memory."""
    if ON_DEVICE:
        import cupy

        view = cupy.asarray(device_array)  # the same memory (CUDA array interface), no copy
        view[index] ^= 1
        cupy.cuda.Device().synchronize()
    else:
        device_array[index] = device_array[index] ^ 1
