"""A stand-in for nvidia-ml-py's `pynvml` module (unit tests only): the same names, GPUs as dicts,
switches to make a GPU fail or disappear, and Xid critical error events to send (`xid`)."""

from __future__ import annotations

import queue
import types
from dataclasses import dataclass, field
from typing import Any


class NVMLError(Exception):
    value = 999

    def __str__(self) -> str:
        return self.__class__.__name__.removeprefix("NVMLError_")


class NVMLError_NotSupported(NVMLError):
    value = 3


class NVMLError_LibraryNotFound(NVMLError):
    value = 12


class NVMLError_GpuIsLost(NVMLError):
    value = 15


class NVMLError_FunctionNotFound(NVMLError):
    value = 13


class NVMLError_Timeout(NVMLError):
    value = 10


@dataclass
class FakeGpu:
    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str = "GPU-11111111-2222-3333-4444-555555555555"
    total: int = 81559 << 20
    used: int = 1024 << 20
    cc: tuple[int, int] = (9, 0)
    pcie: tuple[int, int] | None = (5, 16)
    power_limit_mw: int = 700_000
    power_mw: int = 312_500
    util: int = 87
    temp: int = 61
    ecc: int | None = 0  # uncorrected, volatile; None: no ECC count is supported
    ecc_corrected: int = 0  # volatile
    ecc_aggregate: tuple[int, int] = (0, 0)  # (corrected, uncorrected) over the GPU's life
    xid_events: bool = True  # False: registering its Xid events is not supported
    reasons: int = 0
    lost: bool = False  # every call on it raises GpuIsLost
    serial: str | None = "1654922012345"  # None: not supported (consumer cards)
    bus_id: str = "00000000:3B:00.0"
    board_id: int = 15104


@dataclass
class FakeNvml:
    gpus: list[FakeGpu] = field(default_factory=lambda: [FakeGpu()])
    driver: str = "550.54.15"
    cuda: int = 12040
    init_error: type[NVMLError] | None = None
    shutdowns: int = 0
    events: queue.Queue = field(default_factory=queue.Queue)  # (GPU index, Xid) waiting to be read
    event_sets_freed: int = 0

    def xid(self, index: int, code: int) -> None:
        """GPU `index` reports Xid `code` (as the driver would: an event the next wait returns)."""
        self.events.put((index, code))

    def module(self) -> types.ModuleType:
        m = types.ModuleType("pynvml")
        for cls in (
            NVMLError,
            NVMLError_NotSupported,
            NVMLError_LibraryNotFound,
            NVMLError_GpuIsLost,
            NVMLError_FunctionNotFound,
            NVMLError_Timeout,
        ):
            setattr(m, cls.__name__, cls)
        m.NVML_TEMPERATURE_GPU, m.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, m.NVML_VOLATILE_ECC = 0, 1, 0
        m.NVML_MEMORY_ERROR_TYPE_CORRECTED, m.NVML_AGGREGATE_ECC, m.nvmlEventTypeXidCriticalError = 0, 1, 8

        def gpu(handle: int) -> FakeGpu:
            if self.gpus[handle].lost:
                raise NVMLError_GpuIsLost()
            return self.gpus[handle]

        def init() -> None:
            if self.init_error:
                raise self.init_error()

        def shutdown() -> None:
            self.shutdowns += 1

        def pcie(handle: int, i: int) -> int:
            if gpu(handle).pcie is None:
                raise NVMLError_NotSupported()
            return gpu(handle).pcie[i]

        def ecc(handle: int, kind: int, counter: int) -> int:
            g = gpu(handle)
            if g.ecc is None:
                raise NVMLError_NotSupported()
            if counter == 1:  # aggregate
                return g.ecc_aggregate[kind]
            return g.ecc if kind == 1 else g.ecc_corrected

        def register_events(handle: int, types_: int, event_set: object) -> None:
            assert types_ == 8 and event_set == "event-set", "Xid critical errors, on the set created"
            if not gpu(handle).xid_events:
                raise NVMLError_NotSupported()

        def wait(event_set: object, timeout_ms: int) -> types.SimpleNamespace:
            try:
                index, code = self.events.get(timeout=timeout_ms / 1000)
            except queue.Empty:
                raise NVMLError_Timeout() from None
            return types.SimpleNamespace(device=index, eventType=8, eventData=code)

        def free(event_set: object) -> None:
            self.event_sets_freed += 1

        def serial(handle: int) -> str:
            if gpu(handle).serial is None:
                raise NVMLError_NotSupported()
            return gpu(handle).serial

        def handle_by_index(i: int) -> int:
            if i >= len(self.gpus):
                raise NVMLError(f"no GPU {i}")
            return i

        calls: dict[str, Any] = {
            "nvmlInit": init,
            "nvmlShutdown": shutdown,
            "nvmlSystemGetDriverVersion": lambda: self.driver,
            "nvmlSystemGetCudaDriverVersion": lambda: self.cuda,
            "nvmlDeviceGetCount": lambda: len(self.gpus),
            "nvmlDeviceGetHandleByIndex": handle_by_index,
            "nvmlDeviceGetName": lambda h: gpu(h).name,
            "nvmlDeviceGetUUID": lambda h: gpu(h).uuid,
            "nvmlDeviceGetMemoryInfo": lambda h: types.SimpleNamespace(
                total=gpu(h).total, used=gpu(h).used, free=gpu(h).total - gpu(h).used
            ),
            "nvmlDeviceGetCudaComputeCapability": lambda h: gpu(h).cc,
            "nvmlDeviceGetMaxPcieLinkGeneration": lambda h: pcie(h, 0),
            "nvmlDeviceGetMaxPcieLinkWidth": lambda h: pcie(h, 1),
            "nvmlDeviceGetPowerManagementLimit": lambda h: gpu(h).power_limit_mw,
            "nvmlDeviceGetPowerUsage": lambda h: gpu(h).power_mw,
            "nvmlDeviceGetUtilizationRates": lambda h: types.SimpleNamespace(gpu=gpu(h).util, memory=10),
            "nvmlDeviceGetTemperature": lambda h, sensor: gpu(h).temp,
            "nvmlDeviceGetTotalEccErrors": ecc,
            "nvmlDeviceGetCurrentClocksEventReasons": lambda h: gpu(h).reasons,
            "nvmlDeviceGetSerial": serial,
            "nvmlDeviceGetPciInfo": lambda h: types.SimpleNamespace(busId=gpu(h).bus_id),
            "nvmlDeviceGetBoardId": lambda h: gpu(h).board_id,
            "nvmlEventSetCreate": lambda: "event-set",
            "nvmlDeviceRegisterEvents": register_events,
            "nvmlEventSetWait_v2": wait,
            "nvmlEventSetFree": free,
        }
        for name, fn in calls.items():
            setattr(m, name, fn)
        return m
