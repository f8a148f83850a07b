"""Simulated GPUs (`--simulate-gpus MODEL:COUNT:VRAM_GB`) for machines without an NVIDIA driver.

Everything they produce says simulated=True: the inventory (and so its hash) and every
protocol message, so a simulated node can never pass for real hardware.

Their GPU errors are zero until a fault is injected, as NVML would report it: `inject` in the
process, or from outside a running worker a line appended to the file GPUNET_SIMULATED_GPU_FAULTS
names (JSON: {"gpu": 0, "xid": 79} for an Xid critical error, {"gpu": 0, "ecc_corrected": 3,
"ecc_uncorrected": 1} for ECC errors), read at the next sample: a drill of the operator's alerts.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from gpunet.catalog import CatalogError, gpu_model
from gpunet.limits import MAX_GPUS_PER_NODE
from gpunet.logs import get_logger
from gpunet.protocol import GpuInfo, GpuTelemetry, Inventory

__all__ = ["FAULTS_ENV", "SimulatedGpus", "SimulationSpecError"]

FAULTS_ENV = "GPUNET_SIMULATED_GPU_FAULTS"

log = get_logger("gpunet.worker.simulate")


@dataclass
class _Errors:
    """One simulated GPU's error counts (the volatile and the aggregate ECC counts grow together:
    the simulated driver never reloads)."""

    ecc_corrected: int = 0
    ecc_uncorrected: int = 0
    xid_errors: int = 0
    last_xid: int | None = None


class SimulationSpecError(ValueError):
    """A --simulate-gpus value that is not MODEL:COUNT:VRAM_GB."""


class SimulatedGpus:
    simulated = True

    def __init__(self, model: str, count: int, vram_gb: int, node_key: str, faults: Path | None = None) -> None:
        # UUIDs derive from the node key, so the inventory hash is stable across restarts.
        def uuid(i: int) -> str:
            h = hashlib.sha256(f"{node_key}:{i}".encode()).hexdigest()
            return f"GPU-sim-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:28]}"

        self._inventory = Inventory(
            driver_version="simulated",
            cuda_version="simulated",
            simulated=True,
            gpus=[
                GpuInfo(
                    index=i,
                    uuid=uuid(i),
                    name=f"Simulated {model}",
                    model=model,
                    vram_mib=vram_gb * 1024,
                    compute_capability="0.0",
                    pcie_gen=0,
                    pcie_width=0,
                    power_limit_w=0,
                )
                for i in range(count)
            ],
        )
        self._errors = [_Errors() for _ in range(count)]
        self._faults, self._faults_read = faults, 0

    @classmethod
    def parse(cls, spec: str, node_key: str, faults: Path | None = None) -> SimulatedGpus:
        parts = spec.split(":")
        if len(parts) != 3:
            raise SimulationSpecError(f"--simulate-gpus {spec!r}: expected MODEL:COUNT:VRAM_GB, e.g. H100:2:80")
        try:
            model = gpu_model(parts[0]).name
        except CatalogError as e:
            raise SimulationSpecError(f"--simulate-gpus {spec!r}: {e}") from None
        try:
            count, vram_gb = int(parts[1]), int(parts[2])
        except ValueError:
            raise SimulationSpecError(f"--simulate-gpus {spec!r}: COUNT and VRAM_GB must be whole numbers") from None
        if not (1 <= count <= MAX_GPUS_PER_NODE and 1 <= vram_gb <= 4096):
            raise SimulationSpecError(
                f"--simulate-gpus {spec!r}: COUNT must be 1-{MAX_GPUS_PER_NODE} and VRAM_GB 1-4096"
            )
        return cls(model, count, vram_gb, node_key, faults)

    def inventory(self) -> Inventory:
        return self._inventory

    def inject(self, gpu: int, *, xid: int | None = None, ecc_corrected: int = 0, ecc_uncorrected: int = 0) -> None:
        """A fault on simulated GPU `gpu` (its index): an Xid critical error and/or ECC errors.
        ValueError for a GPU it does not have or a negative count."""
        if not 0 <= gpu < len(self._errors):
            raise ValueError(f"no simulated GPU {gpu} (this node has {len(self._errors)})")
        if (xid is not None and xid < 0) or ecc_corrected < 0 or ecc_uncorrected < 0:
            raise ValueError("an Xid and ECC error counts are whole numbers >= 0")
        errors = self._errors[gpu]
        errors.ecc_corrected += ecc_corrected
        errors.ecc_uncorrected += ecc_uncorrected
        if xid is not None:
            errors.xid_errors += 1
            errors.last_xid = xid

    def sample(self) -> list[GpuTelemetry]:
        self._read_faults()
        return [
            GpuTelemetry(
                uuid=g.uuid,
                healthy=not e.ecc_uncorrected,  # as NVML's samples: uncorrected errors make a GPU unhealthy
                problems=[f"{e.ecc_uncorrected} uncorrected ECC errors"] if e.ecc_uncorrected else [],
                utilization_pct=0,
                memory_used_mib=0,
                temperature_c=40,
                power_w=0.0,
                ecc_uncorrected=e.ecc_uncorrected,
                ecc_corrected=e.ecc_corrected,
                ecc_uncorrected_aggregate=e.ecc_uncorrected,
                ecc_corrected_aggregate=e.ecc_corrected,
                xid_errors=e.xid_errors,
                last_xid=e.last_xid,
            )
            for g, e in zip(self._inventory.gpus, self._errors, strict=True)
        ]

    def _read_faults(self) -> None:
        """The fault lines appended since the last sample (whole lines only: one being written waits)."""
        if self._faults is None:
            return
        try:
            with self._faults.open("rb") as f:
                f.seek(self._faults_read)
                data = f.read()
        except FileNotFoundError:
            return  # none injected yet
        whole = data[: data.rfind(b"\n") + 1]
        self._faults_read += len(whole)
        for line in whole.decode(errors="replace").splitlines():
            if not line.strip():
                continue
            try:
                fault = json.loads(line)
                if not isinstance(fault, dict) or set(fault) - {"gpu", "xid", "ecc_corrected", "ecc_uncorrected"}:
                    raise ValueError('expected {"gpu": N} with "xid", "ecc_corrected" or "ecc_uncorrected"')
                values = [fault.get(k, 0) for k in ("gpu", "xid", "ecc_corrected", "ecc_uncorrected")]
                if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
                    raise ValueError("the values are whole numbers")
                self.inject(
                    fault["gpu"],
                    xid=fault.get("xid"),
                    ecc_corrected=fault.get("ecc_corrected", 0),
                    ecc_uncorrected=fault.get("ecc_uncorrected", 0),
                )
            except (ValueError, KeyError) as e:  # json's errors are ValueErrors too
                log.warning("gpus.simulated_fault_refused", line=line[:200], error=str(e) or type(e).__name__)

    def close(self) -> None:
        pass
