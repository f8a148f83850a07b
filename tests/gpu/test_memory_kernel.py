"""The memory check's fill kernel (worker/gpu/memory.py) against the numpy reference (gpunet.vram):
the same blocks, parents, digests and root bit for bit; its BLAKE2b against hashlib's; its openings
pass the verifier's check, and a block changed in the device's memory after the commitment is caught.
Under numba's CUDA simulator here (tests/gpu/conftest.py), on GPU 0 with GPUNET_GPU_DEVICE=1."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest

from gpunet import verification as v
from gpunet import vram
from gpunet.catalog import GPU_MODELS, GpuModel
from tests.conftest import REPO
from tests.gpu.conftest import Sizes, flip
from worker.gpu import memory


def _workload(lanes: int, blocks: int) -> vram.MemoryWorkload:
    return vram.MemoryWorkload(v.new_seed(), lanes, blocks, vram.BLOCK_BYTES, 1.0, True)


@pytest.fixture(scope="module")
def filled(sizes: Sizes) -> tuple[vram.Filled, memory.DeviceFill]:
    """One workload filled by both: the simulator's fill is the slow part of these tests."""
    assert memory.SIMULATED != sizes.on_device
    w = _workload(sizes.lanes, sizes.blocks)
    return vram.fill(w), memory.fill_on_device(w, 0, record_parents=True)


def test_the_kernels_fill_is_the_references_bit_for_bit(filled: tuple[vram.Filled, memory.DeviceFill]) -> None:
    reference, device = filled
    assert np.array_equal(device.blocks.copy_to_host(), reference.blocks)
    assert np.array_equal(device.parents.copy_to_host(), reference.parents)
    assert np.array_equal(device.digests, reference.digests)
    assert device.root() == reference.root()


def test_lanes_sharing_a_cuda_block_fill_as_their_own(sizes: Sizes) -> None:
    """Several lanes per CUDA block, the last block with a spare lane (3 lanes in blocks of 2)."""
    w = _workload(3 if not sizes.on_device else 67, 6 if not sizes.on_device else 256)
    device = memory.fill_on_device(w, 0, record_parents=True, lanes_per_block=2 if not sizes.on_device else 4)
    reference = vram.fill(w)
    assert np.array_equal(device.blocks.copy_to_host(), reference.blocks)
    assert np.array_equal(device.parents.copy_to_host(), reference.parents)
    assert device.root() == reference.root()


def test_the_kernels_blake2b_is_hashlibs(sizes: Sizes) -> None:
    rng = np.random.default_rng()
    blocks = rng.integers(0, 2**64, (1, sizes.digests, vram.BLOCK_WORDS), dtype=np.uint64, endpoint=False)
    blocks[0, 0] = 0
    blocks[0, 1] = 2**64 - 1
    assert np.array_equal(memory.blake2b_digests(blocks), vram.block_digests(blocks))


def test_device_openings_pass_the_check_and_a_block_changed_on_the_device_is_caught(
    filled: tuple[vram.Filled, memory.DeviceFill],
) -> None:
    reference, device = filled
    w = device.workload
    for _ in range(3):
        asked = vram.choose_blocks(w)
        assert vram.check_memory(w, device.root(), device.open_blocks(asked), asked) is None
    named = (1, w.blocks - 1)
    parent = int(reference.parents[1, w.blocks - 1][0])  # an input of the named block: its content is sent
    opened = device.open_blocks([named])
    assert vram.check_memory(w, device.root(), opened, [named]) is None
    flip(device.blocks, (1, parent, 17))
    reason = vram.check_memory(w, device.root(), device.open_blocks([named]), [named])
    assert "not the committed block" in (reason or "")
    flip(device.blocks, (1, parent, 17))  # the fixture's fill as it was


def _device_model() -> GpuModel:
    import cupy

    name = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    model = next((m for m in GPU_MODELS if re.search(m.nvml_pattern, name)), None)
    if model is None:
        pytest.fail(f"device 0 is a {name}, not a listed model")
    return model


@pytest.mark.timeout(300)
def test_a_real_workload_fills_on_the_device_and_its_openings_hold(sizes: Sizes) -> None:
    """The real fill of the device's model (on a GPU only: the simulator would take days)."""
    if not sizes.on_device:
        pytest.skip("a real workload needs a GPU (GPUNET_GPU_DEVICE=1): under the simulator the small fills stand in")
    w = vram.memory_workload_for(_device_model(), v.new_seed(), simulated=False)
    device = memory.fill_on_device(w, 0)
    asked = vram.choose_blocks(w)
    assert vram.check_memory(w, device.root(), device.open_blocks(asked), asked) is None


def test_importing_the_kernels_without_numba_names_the_extra() -> None:
    code = "import sys; sys.modules['numba'] = None; import worker.gpu.memory"
    run = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert run.returncode != 0
    assert "ImportError" in run.stderr and "install gpunet[gpu]" in run.stderr, run.stderr[-2000:]
