"""The verification backend (worker/gpu): which code answers each GPU's challenges, and the GPU
compute path itself with its array module swapped for a CPU one (numpy's namespace, or
array-api-strict: the standard alone, as cupy implements it), against the reference verifier.

What cannot run here is cupy on a device: bench/verification/gpu-check runs these paths on one."""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import array_api_compat.numpy as np_namespace
import array_api_strict
import numpy as np
import pytest

from gpunet import verification as v
from gpunet.catalog import gpu_model
from gpunet.protocol import GpuInfo, Inventory, Verify, VerifyMemory, VerifyOpen
from worker import gpu
from worker.gpu import compute
from worker.verify import ChallengeRefused, Prover

H100 = gpu_model("H100")
GPUNET = str(Path(sys.executable).with_name("gpunet"))
NAMESPACES = pytest.mark.parametrize("xp", [np_namespace, array_api_strict], ids=["numpy", "array-api-strict"])


def _real(*bus_ids: str) -> Inventory:
    """An inventory as NVML reports real H100s (bus ids in NVML's spelling)."""
    gpus = [
        GpuInfo(index=i, uuid=f"GPU-{i:08x}-0000-0000-0000-000000000000", name="NVIDIA H100 80GB HBM3", model="H100",
                vram_mib=81559, compute_capability="9.0", pcie_gen=5, pcie_width=16, power_limit_w=700, pci_bus_id=bus)
        for i, bus in enumerate(bus_ids)
    ]  # fmt: skip
    return Inventory(driver_version="570.86.15", cuda_version="12.8", simulated=False, gpus=gpus)


@pytest.fixture
def cuda(monkeypatch):
    """CUDA's devices as cupy would list them: set `devices` (bus id in CUDA's spelling -> index)."""
    seen: dict[str, int] = {}

    def devices():
        if not seen:
            return (
                {},
                "this worker has no GPU backend (cupy is missing): install gpunet[gpu] (pip install 'gpunet[gpu]')",
            )
        return {gpu._bus(bus): index for bus, index in seen.items()}, "cupy 14.2.0"

    monkeypatch.setattr(gpu, "cuda_devices", devices)
    return seen


@pytest.fixture
def swapped(monkeypatch):
    """compute.digests runs with a CPU array module in cupy's place (its device context a no-op)."""
    chosen = {}

    def namespace():
        stand_in = SimpleNamespace(cuda=SimpleNamespace(Device=lambda device: contextlib.nullcontext()),
                                   asnumpy=lambda x: np.from_dlpack(x))  # fmt: skip
        return stand_in, chosen["xp"]

    monkeypatch.setattr(compute, "_namespace", namespace)
    return chosen


def _challenge(w: v.Workload, gpu_index: int = 0) -> Verify:
    return Verify(id=secrets.token_hex(16), gpu=gpu_index, seed=w.seed.hex(), n=w.n, depth=w.depth,
                  products=w.products, expected_seconds=w.expected_seconds)  # fmt: skip


def _small() -> v.Workload:
    return v.workload_for(H100, v.new_seed(), simulated=True, seconds=0.5)  # 5 products: 2 chunks of digests


@NAMESPACES
def test_the_gpu_compute_path_commits_and_opens_as_the_reference(xp) -> None:
    w = _small()
    assert len(v.digests_of(w)) > v.CHUNK
    reference = v.digests_of(w)
    swapped = np.from_dlpack(v.digests_of(w, xp=xp, dtype=xp.float32))
    assert swapped.dtype == np.uint32 and np.array_equal(swapped, reference)
    assert v.commit(swapped) == v.commit(reference)
    rows = v.choose_rows(w)
    assert [v.open_row(w, swapped, k, r) for k, r in rows] == [v.open_row(w, reference, k, r) for k, r in rows]
    assert v.check_all(w, v.commit(swapped), [v.open_row(w, swapped, k, r) for k, r in rows], rows) is None


@NAMESPACES
def test_each_lie_through_the_gpu_path_is_caught_with_its_reason(xp, swapped) -> None:
    swapped["xp"] = xp
    w = _small()
    honest = compute.digests(w, 0)
    rows = v.choose_rows(w)

    def verdict(digests: np.ndarray, committed: np.ndarray | None = None, workload: v.Workload = w) -> str | None:
        root = v.commit(digests if committed is None else committed)
        return v.check_all(workload, root, [v.open_row(workload, digests, k, r) for k, r in rows], rows)

    assert verdict(honest) is None  # the control
    corrupted = honest.copy()
    corrupted[::2] ^= 1  # half the rows wrong, row 0 among them
    assert "not the row's" in (v.check_all(w, v.commit(corrupted), [v.open_row(w, corrupted, 0, 0)], [(0, 0)]) or "")
    guessed = np.frombuffer(secrets.token_bytes(4 * len(honest)), dtype=np.uint32).copy()
    assert "not the row's" in (verdict(guessed) or "")  # skipped work
    other = honest.copy()
    other[-1] ^= 1  # the last row's neighbour changed: its chunk is not the committed one
    last = [(w.products - 1, w.n - 2)]
    assert "does not lead to the committed root" in (
        v.check_all(w, v.commit(honest), [v.open_row(w, other, *last[0])], last) or ""
    )
    fresh = v.Workload(v.new_seed(), w.n, w.depth, w.products, w.expected_seconds, True)
    assert "not the row's" in (verdict(honest, workload=fresh) or "")  # a replay to another seed


def test_simulated_gpus_run_the_reference_and_real_ones_the_gpu_backend_by_pci_bus(cuda) -> None:
    sim = Inventory(driver_version="simulated", cuda_version="simulated", simulated=True,
                    gpus=_real("00000000:3B:00.0").gpus)  # fmt: skip
    assert [b.name for b in gpu.backends(sim)] == [gpu.REFERENCE]
    # CUDA lists the second GPU first (fastest first): the backend follows the bus, not the order.
    cuda.update({"0000:86:00.0": 0, "0000:3b:00.0": 1})
    two = gpu.backends(_real("00000000:3B:00.0", "00000000:86:00.0"))
    assert [b.device for b in two] == [1, 0] and all(b.refusal is None for b in two)
    hidden = gpu.backends(_real("00000000:3B:00.0", "00000000:AF:00.0"))
    assert hidden[0].device == 1 and hidden[1].device is None and "is not one CUDA shows" in (hidden[1].refusal or "")


async def test_a_real_gpu_without_the_extra_refuses_its_challenges_naming_it(cuda) -> None:
    prover = Prover(_real("00000000:3B:00.0"))
    assert prover.backends[0].name is None
    w = _small()
    with pytest.raises(ChallengeRefused, match=r"install gpunet\[gpu\].*stays unverified"):
        await prover.commit(_challenge(w), False)
    memory = VerifyMemory(id=secrets.token_hex(16), gpu=0, seed=w.seed.hex(), lanes=1, blocks=2, block_bytes=1024,
                          expected_seconds=1.0)  # fmt: skip
    with pytest.raises(ChallengeRefused, match=r"gpunet\[gpu\]"):
        await prover.commit_memory(memory, False)


async def test_a_real_gpu_answers_through_its_backend_at_its_own_speed(cuda, swapped) -> None:
    """No emulated time on a real GPU: the challenge expects 60 s and is answered at once, by the
    backend (here its CPU stand-in), on the GPU's CUDA device, and the answer verifies."""
    cuda.update({"0000:3b:00.0": 0})
    swapped["xp"] = array_api_strict
    w = _small()
    slow = v.Workload(w.seed, w.n, w.depth, w.products, 60.0, False)
    used = []
    real_digests = compute.digests

    def digests(workload, device):
        used.append(device)
        return real_digests(workload, device)

    compute_digests = pytest.MonkeyPatch()
    compute_digests.setattr(compute, "digests", digests)
    try:
        prover = Prover(_real("00000000:3B:00.0"))
        commit = await prover.commit(_challenge(slow), False)
    finally:
        compute_digests.undo()
    assert used == [0] and not commit.simulated
    rows = v.choose_rows(slow)
    answer = prover.open(VerifyOpen(id=commit.id, rows=[[k, r] for k, r in rows]), False)
    openings = [v.Opening(o.product, o.row, o.chunk, [bytes.fromhex(p) for p in o.path]) for o in answer.openings]
    assert v.check_all(slow, bytes.fromhex(commit.root), openings, rows) is None


def test_worker_check_names_each_gpus_backend_and_runs_its_checks(tmp_path) -> None:
    keypair = tmp_path / "node.json"
    subprocess.run([GPUNET, "keys", "new", str(keypair)], check=True, capture_output=True)
    base = [GPUNET, "worker", "check", "--keypair", str(keypair)]
    env = {**os.environ, "COLUMNS": "200"}
    listed = subprocess.run([*base, "--simulate-gpus", "A100:2:80"], capture_output=True, text=True, env=env)
    assert listed.returncode == 0, listed.stderr
    assert len(re.findall(r"│ [01] +│ A100 +│ reference \(numpy, simulated\)", listed.stdout)) == 2, listed.stdout
    run = subprocess.run([*base, "--simulate-gpus", "H100:1:80", "--run"], capture_output=True, text=True, env=env,
                         timeout=60)  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    for check in ("compute", "memory"):
        assert re.search(rf"│ {check} +│ [\d.]+ s +│ [\d.]+ s +│ [\d.]+ s +│ passes", run.stdout), run.stdout
