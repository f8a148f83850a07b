"""Simulated GPUs (`--simulate-gpus MODEL:COUNT:VRAM_GB`) for machines without an NVIDIA driver.

Everything they produce says simulated=True: the inventory (and so its hash) and every
protocol message, so a simulated node can never pass for real hardware.
"""

from __future__ import annotations

import hashlib

from gpunet.catalog import CatalogError, gpu_model
from gpunet.limits import MAX_GPUS_PER_NODE
from gpunet.protocol import GpuInfo, GpuTelemetry, Inventory

__all__ = ["SimulatedGpus", "SimulationSpecError"]


class SimulationSpecError(ValueError):
    """A --simulate-gpus value that is not MODEL:COUNT:VRAM_GB."""


class SimulatedGpus:
    simulated = True

    def __init__(self, model: str, count: int, vram_gb: int, node_key: str) -> None:
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

    @classmethod
    def parse(cls, spec: str, node_key: str) -> SimulatedGpus:
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
        return cls(model, count, vram_gb, node_key)

    def inventory(self) -> Inventory:
        return self._inventory

    def sample(self) -> list[GpuTelemetry]:
        return [
            GpuTelemetry(
                uuid=g.uuid,
                healthy=True,
                utilization_pct=0,
                memory_used_mib=0,
                temperature_c=40,
                power_w=0.0,
                ecc_uncorrected=0,
            )
            for g in self._inventory.gpus
        ]

    def close(self) -> None:
        pass
