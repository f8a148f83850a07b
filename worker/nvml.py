"""GPU inventory and health samples through NVML (nvidia-ml-py's `pynvml` module)."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from gpunet.catalog import CatalogError, gpu_model_from_nvml
from gpunet.protocol import GpuInfo, GpuTelemetry, Inventory
from worker.gpus import GpusUnavailable

__all__ = ["NvmlGpus"]

MIB = 1 << 20

# Clock event ("throttle") reasons worth showing; idle and application clocks are normal.
_THROTTLE_REASONS = {
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "hw_power_brake",
}


def _text(value: Any) -> str:
    # Older NVML bindings returned bytes.
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlGpus:
    """The machine's NVIDIA GPUs. `nvml` is the pynvml module (a fake one in unit tests)."""

    simulated = False

    def __init__(self, nvml: ModuleType | None = None) -> None:
        try:
            self._nvml = nvml or importlib.import_module("pynvml")
        except ImportError:
            raise GpusUnavailable("the nvidia-ml-py package (module pynvml) is not installed") from None
        try:
            self._nvml.nvmlInit()
        except self._nvml.NVMLError as e:
            raise GpusUnavailable(
                f"NVML cannot start ({type(e).__name__}: {e}): no NVIDIA driver is usable on this machine. "
                "Install the NVIDIA driver, or run with --simulate-gpus MODEL:COUNT:VRAM_GB to test without GPUs"
            ) from None
        try:
            self._inventory = self._read_inventory()
        except self._nvml.NVMLError as e:
            self.close()
            raise GpusUnavailable(f"NVML failed while listing GPUs: {type(e).__name__}: {e}") from None
        if not self._inventory.gpus:
            self.close()
            raise GpusUnavailable("NVML works but lists no GPU")

    def close(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError:
            pass

    def inventory(self) -> Inventory:
        return self._inventory

    def _optional(self, call: Any, *args: Any) -> Any:
        """A value some GPUs do not support (consumer cards: ECC, PCIe limits...): None then."""
        try:
            return call(*args)
        except self._nvml.NVMLError_NotSupported:
            return None

    def _read_inventory(self) -> Inventory:
        n = self._nvml
        cuda = n.nvmlSystemGetCudaDriverVersion()
        gpus = []
        for index in range(n.nvmlDeviceGetCount()):
            handle = n.nvmlDeviceGetHandleByIndex(index)
            name = _text(n.nvmlDeviceGetName(handle))
            try:
                model = gpu_model_from_nvml(name).name
            except CatalogError:
                model = ""  # listed, but leases cannot ask for it by model
            major, minor = n.nvmlDeviceGetCudaComputeCapability(handle)
            power_mw = self._optional(n.nvmlDeviceGetPowerManagementLimit, handle)
            gpus.append(
                GpuInfo(
                    index=index,
                    uuid=_text(n.nvmlDeviceGetUUID(handle)),
                    name=name,
                    model=model,
                    vram_mib=n.nvmlDeviceGetMemoryInfo(handle).total // MIB,
                    compute_capability=f"{major}.{minor}",
                    pcie_gen=self._optional(n.nvmlDeviceGetMaxPcieLinkGeneration, handle) or 0,
                    pcie_width=self._optional(n.nvmlDeviceGetMaxPcieLinkWidth, handle) or 0,
                    power_limit_w=(power_mw or 0) // 1000,
                    serial=_text(serial) if (serial := self._optional(n.nvmlDeviceGetSerial, handle)) else None,
                    pci_bus_id=_text(n.nvmlDeviceGetPciInfo(handle).busId),
                    board_id=self._optional(n.nvmlDeviceGetBoardId, handle),
                )
            )
        return Inventory(
            driver_version=_text(n.nvmlSystemGetDriverVersion()),
            cuda_version=f"{cuda // 1000}.{cuda % 1000 // 10}",
            simulated=False,
            gpus=gpus,
        )

    def sample(self) -> list[GpuTelemetry]:
        try:
            count = self._nvml.nvmlDeviceGetCount()
        except self._nvml.NVMLError as e:
            return [GpuTelemetry(uuid=g.uuid, healthy=False, problems=[f"NVML: {e}"]) for g in self._inventory.gpus]
        return [
            self._sample(gpu)
            if gpu.index < count
            else GpuTelemetry(uuid=gpu.uuid, healthy=False, problems=["GPU disappeared (NVML lists fewer GPUs)"])
            for gpu in self._inventory.gpus
        ]

    def _sample(self, gpu: GpuInfo) -> GpuTelemetry:
        n = self._nvml
        try:
            handle = n.nvmlDeviceGetHandleByIndex(gpu.index)
            uuid = _text(n.nvmlDeviceGetUUID(handle))
            if uuid != gpu.uuid:
                return GpuTelemetry(
                    uuid=gpu.uuid, healthy=False, problems=[f"GPU disappeared (index {gpu.index} is now {uuid})"]
                )
            ecc = self._optional(
                n.nvmlDeviceGetTotalEccErrors, handle, n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, n.NVML_VOLATILE_ECC
            )
            reasons = self._optional(self._clock_event_reasons, handle) or 0
            power_mw = self._optional(n.nvmlDeviceGetPowerUsage, handle)
            sample = GpuTelemetry(
                uuid=gpu.uuid,
                healthy=not ecc,
                problems=[f"{ecc} uncorrected ECC errors"] if ecc else [],
                utilization_pct=n.nvmlDeviceGetUtilizationRates(handle).gpu,
                memory_used_mib=n.nvmlDeviceGetMemoryInfo(handle).used // MIB,
                temperature_c=n.nvmlDeviceGetTemperature(handle, n.NVML_TEMPERATURE_GPU),
                power_w=None if power_mw is None else power_mw / 1000,
                ecc_uncorrected=ecc,
                throttle_reasons=[name for bit, name in _THROTTLE_REASONS.items() if reasons & bit],
            )
        except n.NVMLError as e:
            return GpuTelemetry(uuid=gpu.uuid, healthy=False, problems=[f"NVML: {type(e).__name__}: {e}"])
        return sample

    def _clock_event_reasons(self, handle: Any) -> int:
        # Renamed in NVML 12.x ("throttle" -> "clock event"); older drivers have only the old name.
        try:
            return self._nvml.nvmlDeviceGetCurrentClocksEventReasons(handle)
        except self._nvml.NVMLError_FunctionNotFound:
            return self._nvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle)
