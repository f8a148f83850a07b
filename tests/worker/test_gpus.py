"""NVML inventory and health against a fake pynvml module (the module boundary), the real
no-driver path, and simulated GPUs."""

from __future__ import annotations

import threading
import time

import pytest

from gpunet.protocol import Inventory
from tests.worker.fake_pynvml import FakeGpu, FakeNvml, NVMLError_LibraryNotFound
from worker.gpus import GpusUnavailable, open_gpus
from worker.nvml import NvmlGpus
from worker.simulate import SimulatedGpus, SimulationSpecError

H100 = FakeGpu()
RTX4090 = FakeGpu(
    name="NVIDIA GeForce RTX 4090",
    uuid="GPU-aaaaaaaa-0000-0000-0000-000000000001",
    total=24564 << 20,
    cc=(8, 9),
    pcie=None,
    power_limit_mw=450_000,
    ecc=None,
    serial=None,
)


def test_inventory_reads_every_field_from_nvml() -> None:
    fake = FakeNvml(gpus=[H100, RTX4090])
    inventory = NvmlGpus(fake.module()).inventory()
    assert (inventory.driver_version, inventory.cuda_version, inventory.simulated) == ("550.54.15", "12.4", False)
    h100, rtx = inventory.gpus
    assert h100.model_dump() == {
        "index": 0,
        "uuid": H100.uuid,
        "name": "NVIDIA H100 80GB HBM3",
        "model": "H100",
        "vram_mib": 81559,
        "compute_capability": "9.0",
        "pcie_gen": 5,
        "pcie_width": 16,
        "power_limit_w": 700,
        "serial": "1654922012345",
        "pci_bus_id": "00000000:3B:00.0",
        "board_id": 15104,
    }
    assert rtx.serial is None  # not supported there: no identity field, not a failure
    # a consumer card: no PCIe limits reported (NotSupported) becomes 0, not a failure
    assert (rtx.model, rtx.vram_mib, rtx.compute_capability, rtx.pcie_gen, rtx.pcie_width) == (
        "RTX4090",
        24564,
        "8.9",
        0,
        0,
    )


def test_a_gpu_gpunet_does_not_list_is_inventoried_without_a_model() -> None:
    inventory = NvmlGpus(FakeNvml(gpus=[FakeGpu(name="Tesla K80")]).module()).inventory()
    assert inventory.gpus[0].model == ""


def test_inventory_hash_is_canonical_and_differences_are_named() -> None:
    a = NvmlGpus(FakeNvml(gpus=[H100, RTX4090]).module()).inventory()
    again = Inventory.model_validate_json(a.model_dump_json())
    assert a.hash() == again.hash() and len(a.hash()) == 32
    swapped = FakeGpu(name="NVIDIA H100 80GB HBM3", uuid=H100.uuid, total=40000 << 20)
    b = NvmlGpus(FakeNvml(gpus=[swapped], driver="560.1").module()).inventory()
    assert a.hash() != b.hash()
    assert sorted(b.differences(a)) == sorted(
        [
            "driver_version: '550.54.15' -> '560.1'",
            f"GPU {RTX4090.uuid} missing",
            f"GPU {H100.uuid} vram_mib: 81559 -> 40000",
        ]
    )
    assert a.differences(again) == []
    # The identity fields count when known, and leave hashes taken before they existed unchanged.
    without = Inventory.model_validate(
        {
            **a.model_dump(),
            "gpus": [
                {k: v for k, v in g.model_dump().items() if k not in ("serial", "pci_bus_id", "board_id")}
                for g in a.gpus
            ],
        }
    )
    assert without.hash() != a.hash()
    assert b"serial" not in without.canonical_json() and b"null" not in without.canonical_json()


def test_health_sample_reports_telemetry_and_throttling() -> None:
    gpu = FakeGpu(reasons=0x4 | 0x40 | 0x1)  # power cap, hw thermal, idle (not shown)
    [sample] = NvmlGpus(FakeNvml(gpus=[gpu]).module()).sample()
    assert sample.healthy and sample.problems == []
    assert (
        sample.utilization_pct,
        sample.memory_used_mib,
        sample.temperature_c,
        sample.power_w,
        sample.ecc_uncorrected,
    ) == (87, 1024, 61, 312.5, 0)
    assert sample.throttle_reasons == ["sw_power_cap", "hw_thermal"]


def test_uncorrected_ecc_errors_make_a_gpu_unhealthy() -> None:
    fake = FakeNvml(gpus=[FakeGpu()])
    gpus = NvmlGpus(fake.module())
    fake.gpus[0].ecc = 3
    [sample] = gpus.sample()
    assert not sample.healthy and sample.problems == ["3 uncorrected ECC errors"]


def test_a_gpu_that_fails_nvml_calls_or_disappears_is_unhealthy() -> None:
    fake = FakeNvml(gpus=[FakeGpu(), FakeGpu(uuid="GPU-2"), FakeGpu(uuid="GPU-3")])
    gpus = NvmlGpus(fake.module())
    assert all(s.healthy for s in gpus.sample())
    fake.gpus[0].lost = True
    fake.gpus[1] = FakeGpu(uuid="GPU-other")  # a different card now answers at index 1
    del fake.gpus[2]
    lost, replaced, gone = gpus.sample()
    assert not (lost.healthy or replaced.healthy or gone.healthy)
    assert lost.problems == ["NVML: NVMLError_GpuIsLost: GpuIsLost"]
    assert replaced.problems == ["GPU disappeared (index 1 is now GPU-other)"]
    assert gone.problems == ["GPU disappeared (NVML lists fewer GPUs)"]
    assert [s.uuid for s in (lost, replaced, gone)] == [H100.uuid, "GPU-2", "GPU-3"]


def test_no_driver_refuses_with_the_reason_and_the_way_out() -> None:
    fake = FakeNvml(init_error=NVMLError_LibraryNotFound)
    with pytest.raises(GpusUnavailable, match=r"NVMLError_LibraryNotFound.*no NVIDIA driver.*--simulate-gpus"):
        NvmlGpus(fake.module())


def test_no_gpu_listed_refuses() -> None:
    fake = FakeNvml(gpus=[])
    with pytest.raises(GpusUnavailable, match="lists no GPU"):
        NvmlGpus(fake.module())
    assert fake.shutdowns == 1


def test_the_real_nvml_on_this_machine() -> None:
    """Without a driver (CI, this machine) the real pynvml path refuses; with one, it inventories."""
    try:
        gpus = open_gpus(None, "node")
    except GpusUnavailable as e:
        assert "no NVIDIA driver" in str(e) and "--simulate-gpus" in str(e)
        return
    try:
        inventory = gpus.inventory()
        assert inventory.gpus and not inventory.simulated
        assert len(gpus.sample()) == len(inventory.gpus)
    finally:
        gpus.close()


def test_simulated_gpus_are_marked_and_stable() -> None:
    a = open_gpus("h100:2:80", "NodeKeyA")
    inventory = a.inventory()
    assert a.simulated and inventory.simulated
    assert [(g.model, g.vram_mib) for g in inventory.gpus] == [("H100", 81920)] * 2
    assert inventory.hash() == SimulatedGpus.parse("H100:2:80", "NodeKeyA").inventory().hash()
    assert inventory.hash() != SimulatedGpus.parse("H100:2:80", "NodeKeyB").inventory().hash()
    assert all(s.healthy for s in a.sample())


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        ("H100:2", "expected MODEL:COUNT:VRAM_GB"),
        ("Z9:1:8", "unknown GPU model 'Z9'"),
        ("H100:two:80", "whole numbers"),
        ("H100:0:80", "COUNT must be 1-16"),
        ("H100:17:80", "COUNT must be 1-16"),
    ],
)
def test_bad_simulation_specs_are_refused(spec: str, error: str) -> None:
    with pytest.raises(SimulationSpecError, match=error):
        SimulatedGpus.parse(spec, "node")


def _sample_when(gpus: NvmlGpus, ready) -> list:
    """The GPUs' samples once `ready(samples)` holds (the Xid watcher's thread counts in the background)."""
    deadline = time.monotonic() + 10
    while not ready(samples := gpus.sample()):
        assert time.monotonic() < deadline, f"not reached in 10 s: {samples}"
        time.sleep(0.01)
    return samples


def test_xid_errors_and_every_ecc_count_are_read_per_gpu() -> None:
    fake = FakeNvml(gpus=[FakeGpu(), FakeGpu(uuid="GPU-2"), FakeGpu(uuid="GPU-3", xid_events=False)])
    before = set(threading.enumerate())
    gpus = NvmlGpus(fake.module())
    [watcher] = [t for t in threading.enumerate() if t not in before and t.name == "nvml-xid-events"]
    try:
        first, second, unwatched = gpus.sample()
        assert (first.xid_errors, first.last_xid) == (0, None)  # watched, none yet
        assert (unwatched.xid_errors, unwatched.last_xid) == (None, None)  # not watched: no count claimed
        assert (first.ecc_corrected, first.ecc_uncorrected_aggregate, first.ecc_corrected_aggregate) == (0, 0, 0)
        fake.gpus[0].ecc_corrected, fake.gpus[0].ecc_aggregate = 5, (12, 1)
        fake.xid(0, 79)
        fake.xid(0, 48)
        first, second, unwatched = _sample_when(gpus, lambda s: s[0].xid_errors == 2)
        assert first.last_xid == 48  # the newest
        assert (first.ecc_corrected, first.ecc_uncorrected, first.ecc_uncorrected_aggregate) == (5, 0, 1)
        assert first.ecc_corrected_aggregate == 12 and first.healthy  # corrected errors: still healthy
        # The control: the other GPUs' counts did not move.
        assert (second.xid_errors, second.last_xid, second.ecc_corrected) == (0, None, 0)
        assert unwatched.xid_errors is None
        fake.xid(1, 31)
        _, second, _ = _sample_when(gpus, lambda s: s[1].xid_errors == 1)
        assert second.last_xid == 31
    finally:
        gpus.close()
    assert fake.event_sets_freed == 1 and fake.shutdowns == 1
    assert not watcher.is_alive()  # closing ends the thread (its wait times out within WAIT_MS)


def test_a_one_off_reading_keeps_no_xid_count_and_a_gpu_without_ecc_reports_none() -> None:
    fake = FakeNvml(gpus=[FakeGpu(), RTX4090])
    gpus = NvmlGpus(fake.module(), watch_xids=False)
    h100, rtx = gpus.sample()
    gpus.close()
    assert h100.xid_errors is None and h100.ecc_corrected == 0
    assert (rtx.ecc_uncorrected, rtx.ecc_corrected, rtx.ecc_corrected_aggregate) == (None, None, None)
    assert fake.event_sets_freed == 0  # none was created


def test_a_fault_injected_into_a_simulated_gpu_moves_its_counts_only(tmp_path, monkeypatch) -> None:
    faults = tmp_path / "faults.jsonl"
    monkeypatch.setenv("GPUNET_SIMULATED_GPU_FAULTS", str(faults))
    gpus = open_gpus("H100:2:80", "NodeKeyA")
    clean = gpus.sample()
    assert all((s.xid_errors, s.ecc_corrected, s.ecc_uncorrected, s.last_xid) == (0, 0, 0, None) for s in clean)
    faults.write_text('{"gpu": 1, "xid": 79}\n{"gpu": 1, "ecc_corrected": 3, "ecc_uncorrected": 1}\n{"gpu": 0')
    first, second = gpus.sample()
    assert (first.xid_errors, first.ecc_corrected, first.ecc_uncorrected) == (0, 0, 0) and first.healthy
    assert (second.xid_errors, second.last_xid, second.ecc_corrected, second.ecc_uncorrected) == (1, 79, 3, 1)
    assert (second.ecc_corrected_aggregate, second.ecc_uncorrected_aggregate) == (3, 1)
    assert not second.healthy and second.problems == ["1 uncorrected ECC errors"]
    # The half-written line is read once whole; a line read before is not counted twice.
    with faults.open("a") as f:
        f.write(', "xid": 13}\n')
    first, second = gpus.sample()
    assert (first.xid_errors, first.last_xid, second.xid_errors) == (1, 13, 1)


@pytest.mark.parametrize(
    "line",
    ['{"gpu": 2, "xid": 79}', '{"gpu": 0, "xid": -1}', '{"gpu": 0, "xid": "79"}', '{"xid": 79}', "[1]", "not json",
     '{"gpu": 0, "xid": 79, "extra": 1}'],
)  # fmt: skip
def test_a_bad_fault_line_is_refused_and_changes_nothing(tmp_path, line: str) -> None:
    faults = tmp_path / "faults.jsonl"
    faults.write_text(line + "\n")
    gpus = SimulatedGpus.parse("H100:2:80", "node", faults)
    assert all((s.xid_errors, s.ecc_corrected, s.ecc_uncorrected) == (0, 0, 0) for s in gpus.sample())
    with pytest.raises(ValueError, match="no simulated GPU 2"):
        gpus.inject(2, xid=79)
