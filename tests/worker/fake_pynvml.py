"""A stand-in for nvidia-ml-py's `pynvml` module (unit tests only): the same names, GPUs as dicts,
and switches to make a GPU fail or disappear."""

from __future__ import annotations

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
    ecc: int | None = 0  # None: not supported
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

    def module(self) -> types.ModuleType:
        m = types.ModuleType("pynvml")
        for cls in (
            NVMLError,
            NVMLError_NotSupported,
            NVMLError_LibraryNotFound,
            NVMLError_GpuIsLost,
            NVMLError_FunctionNotFound,
        ):
            setattr(m, cls.__name__, cls)
        m.NVML_TEMPERATURE_GPU, m.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, m.NVML_VOLATILE_ECC = 0, 1, 0

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
            assert (kind, counter) == (1, 0), "uncorrected, volatile"
            if gpu(handle).ecc is None:
                raise NVMLError_NotSupported()
            return gpu(handle).ecc

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
        }
        for name, fn in calls.items():
            setattr(m, name, fn)
        return m
