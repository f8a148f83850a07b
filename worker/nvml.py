"""GPU inventory and health samples through NVML (nvidia-ml-py's `pynvml` module), and each GPU's
Xid critical errors as NVML reports them (events, watched in a thread)."""

from __future__ import annotations

import contextlib
import importlib
import threading
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
    """The machine's NVIDIA GPUs. `nvml` is the pynvml module (a fake one in unit tests). Without
    `watch_xids` (a one-off reading such as `gpunet worker status`) no Xid counts are kept: a count
    since a moment ago would pass for a clean record."""

    simulated = False

    def __init__(self, nvml: ModuleType | None = None, *, watch_xids: bool = True) -> None:
        self._xids: XidWatcher | None = None
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
        if watch_xids:
            self._xids = XidWatcher(self._nvml, self._inventory.gpus)

    def close(self) -> None:
        if self._xids is not None:
            self._xids.close()
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
            ecc = self._ecc(handle, n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, n.NVML_VOLATILE_ECC)
            xids, last_xid = self._xids.read(gpu.uuid) if self._xids is not None else (None, None)
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
                ecc_corrected=self._ecc(handle, n.NVML_MEMORY_ERROR_TYPE_CORRECTED, n.NVML_VOLATILE_ECC),
                ecc_uncorrected_aggregate=self._ecc(handle, n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, n.NVML_AGGREGATE_ECC),
                ecc_corrected_aggregate=self._ecc(handle, n.NVML_MEMORY_ERROR_TYPE_CORRECTED, n.NVML_AGGREGATE_ECC),
                xid_errors=xids,
                last_xid=last_xid,
            )
        except n.NVMLError as e:
            return GpuTelemetry(uuid=gpu.uuid, healthy=False, problems=[f"NVML: {type(e).__name__}: {e}"])
        return sample

    def _ecc(self, handle: Any, kind: int, counter: int) -> int | None:
        """One of NVML's ECC error counts (kind: corrected or uncorrected; counter: volatile or aggregate)."""
        count = self._optional(self._nvml.nvmlDeviceGetTotalEccErrors, handle, kind, counter)
        return None if count is None else int(count)

    def _clock_event_reasons(self, handle: Any) -> int:
        # Renamed in NVML 12.x ("throttle" -> "clock event"); older drivers have only the old name.
        try:
            return self._nvml.nvmlDeviceGetCurrentClocksEventReasons(handle)
        except self._nvml.NVMLError_FunctionNotFound:
            return self._nvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle)


class XidWatcher:
    """Counts each GPU's Xid critical errors (NVML's nvmlEventTypeXidCriticalError events: a GPU fault
    the driver logged, e.g. 48 double-bit ECC, 79 fallen off the bus) since the agent started. NVML
    hands events out through a blocking wait, so a thread waits, with a short timeout so that `close`
    ends it promptly; the agent's event loop only reads the counts. A GPU whose events NVML will not
    register (not supported there) has no count rather than a zero that would claim it is clean."""

    WAIT_MS = 500

    def __init__(self, nvml: ModuleType, gpus: list[GpuInfo]) -> None:
        self._nvml = nvml
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}
        self._last: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._set: Any = None
        try:
            self._set = nvml.nvmlEventSetCreate()
        except nvml.NVMLError:
            return  # no event sets here (a driver or a vGPU without them): no Xid counts
        for gpu in gpus:
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(gpu.index)
                nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError, self._set)
            except nvml.NVMLError:
                continue  # this GPU's Xid events are not available: it is not watched
            self._counts[gpu.uuid] = 0
        if self._counts:
            self._thread = threading.Thread(target=self._watch, name="nvml-xid-events", daemon=True)
            self._thread.start()

    def read(self, uuid: str) -> tuple[int | None, int | None]:
        """(Xid errors seen, the last one's code) of the GPU; (None, None) when it is not watched."""
        with self._lock:
            return self._counts.get(uuid), self._last.get(uuid)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.WAIT_MS / 1000 + 2)
        if self._set is not None:
            with contextlib.suppress(self._nvml.NVMLError):
                self._nvml.nvmlEventSetFree(self._set)
            self._set = None

    def _watch(self) -> None:
        n = self._nvml
        while not self._stop.is_set():
            try:
                event = n.nvmlEventSetWait_v2(self._set, self.WAIT_MS)
            except n.NVMLError_Timeout:
                continue
            except n.NVMLError:
                self._stop.wait(1.0)  # a GPU lost meanwhile (the samples say so): keep watching the others
                continue
            if not event.eventType & n.nvmlEventTypeXidCriticalError:
                continue
            try:
                uuid = _text(n.nvmlDeviceGetUUID(event.device))
            except n.NVMLError:
                continue
            with self._lock:
                if uuid in self._counts:
                    self._counts[uuid] += 1
                    self._last[uuid] = int(event.eventData)
