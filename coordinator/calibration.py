"""Calibrating a GPU model's verification deadlines from the fleet's own measurements (`gpunet
coordinator calibrate MODEL`; docs/supplier/verification.md).

A real GPU's deadlines rest on its model's public peak figures (gpunet.catalog) times an assumed
efficiency (gpunet.verification.REAL_EFFICIENCY; the memory check's step time, gpunet.vram.
REAL_STEP_SECONDS), never measured on the fleet's hardware. Until a model is calibrated, its GPUs
are not failed for being late (coordinator/loops/verification.py: *too slow*), and every honest
answer's time is recorded. A calibration is made from those records:

- the measurements: the compute and memory checks of real GPUs of the model that passed or were too
  slow (a right answer, committed): a compute check's measured efficiency is its work over the
  model's peak times the time to its commitment; a memory check's step time is the time to its
  commitment over the blocks of a lane (both include the round trip: they err towards slow);
- each node counts with its latest PER_NODE measurements of each check at most, so that a node
  checked often (or a supplier's many checks of one node) weighs no more than any other;
- at least MIN_MEASUREMENTS of each check, from MIN_NODES nodes of MIN_SUPPLIERS suppliers: one
  supplier alone never calibrates a model;
- the value set is the slow end of the measurements, their PERCENTILE-th percentile efficiency (and
  the (100 - PERCENTILE)-th percentile step time): nine in ten of the measured GPUs were at least
  that fast, and the deadline's margin (a quarter, plus the allowance) covers some slower ones too.
  Not the slowest measurement: a supplier answering slowly on purpose (a slower GPU would then pass
  as the model) would set every GPU's deadline with one answer; it must bring over a tenth of the
  capped measurements to move the value below the honest ones. Nor the median: half of the honest
  GPUs would then be at or past the expectation, and fail once it holds.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from gpunet import verification, vram
from gpunet.catalog import GpuModel

__all__ = [
    "MIN_MEASUREMENTS",
    "MIN_NODES",
    "MIN_SUPPLIERS",
    "PERCENTILE",
    "PER_NODE",
    "Check",
    "Measurement",
    "NodeSample",
    "Proposal",
    "Row",
    "measurement",
    "percentile",
    "propose",
]

PERCENTILE = 10  # of the measured efficiencies (the step times': 100 minus it): the slow end
PER_NODE = 5  # a node's latest measurements of each check that count
MIN_MEASUREMENTS = 5  # of each check
MIN_NODES = 2
MIN_SUPPLIERS = 2


class Row(Protocol):
    """A record of coordinator.db.calibrations.measurements (or a dict of its columns)."""

    def __getitem__(self, key: str, /) -> Any: ...


@dataclass(frozen=True)
class Measurement:
    """One honest answer's measurement: a compute check's efficiency or a memory check's step time."""

    id: int  # its verifications row
    node_key: str
    supplier: str
    kind: str  # compute or memory
    value: float  # compute: the share of the model's peak it reached; memory: seconds per block of a lane
    seconds: float  # from the challenge's sending to its commitment


def measurement(model: GpuModel, row: Row) -> Measurement | None:
    """The measurement of a record (coordinator.db.calibrations.measurements); None without a size."""
    seconds = float(row["committed_seconds"])
    if row["kind"] == "compute" and row["flops"]:
        value = float(row["flops"]) / (model.tf32_tflops * 1e12 * seconds)
    elif row["kind"] == "memory" and row["blocks"]:
        value = seconds / int(row["blocks"])
    else:
        return None
    return Measurement(int(row["id"]), str(row["node_key"]), str(row["supplier"]), str(row["kind"]), value, seconds)


def percentile(values: Sequence[float], p: float) -> float:
    """The p-th percentile of `values`, interpolated between the nearest ranks (numpy's default)."""
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True)
class Check:
    """One check's measurements (capped per node) and what they would set."""

    kind: str  # compute (values: efficiencies) or memory (values: step seconds)
    measurements: tuple[Measurement, ...]
    assumed: float  # the assumption before calibration: verification.real_efficiency or vram.REAL_STEP_SECONDS
    current: float | None  # the calibration in force, if any

    @property
    def values(self) -> list[float]:
        return [m.value for m in self.measurements]

    @property
    def nodes(self) -> int:
        return len({m.node_key for m in self.measurements})

    @property
    def suppliers(self) -> int:
        return len({m.supplier for m in self.measurements})

    def at(self, p: float) -> float | None:
        return percentile(self.values, p) if self.measurements else None

    @property
    def proposed(self) -> float | None:
        """The slow end: the PERCENTILE-th percentile efficiency, the (100 - PERCENTILE)-th step time."""
        return self.at(PERCENTILE if self.kind == "compute" else 100 - PERCENTILE)

    @property
    def problem(self) -> str | None:
        """Why these measurements cannot calibrate the check; None when they can."""
        name = "compute check" if self.kind == "compute" else "memory check"
        if len(self.measurements) < MIN_MEASUREMENTS:
            return f"{len(self.measurements)} measurements of the {name}: at least {MIN_MEASUREMENTS} are needed"
        if self.nodes < MIN_NODES:
            return (
                f"the {name}'s measurements are of {self.nodes} node: at least {MIN_NODES} nodes are needed "
                "(one node's answers never calibrate a model)"
            )
        if self.suppliers < MIN_SUPPLIERS:
            return (
                f"the {name}'s measurements are of {self.suppliers} supplier's nodes: at least {MIN_SUPPLIERS} "
                "suppliers are needed (one supplier never calibrates a model alone)"
            )
        return None


@dataclass(frozen=True)
class NodeSample:
    """What one node brings to the calibration (each check's latest PER_NODE measurements)."""

    node_key: str
    supplier: str
    compute: tuple[float, ...]
    memory: tuple[float, ...]


@dataclass(frozen=True)
class Proposal:
    model: GpuModel
    compute: Check
    memory: Check
    ignored: int  # measurements past their node's PER_NODE latest

    @property
    def problems(self) -> list[str]:
        return [p for p in (self.compute.problem, self.memory.problem) if p is not None]

    @property
    def sample(self) -> list[int]:
        """The verifications rows the calibration comes from."""
        return sorted(m.id for m in (*self.compute.measurements, *self.memory.measurements))

    @property
    def nodes(self) -> list[NodeSample]:
        keys: dict[str, str] = {}
        for m in (*self.compute.measurements, *self.memory.measurements):
            keys.setdefault(m.node_key, m.supplier)
        return [
            NodeSample(
                key,
                supplier,
                tuple(m.value for m in self.compute.measurements if m.node_key == key),
                tuple(m.value for m in self.memory.measurements if m.node_key == key),
            )
            for key, supplier in sorted(keys.items())
        ]

    @property
    def node_count(self) -> int:
        return len({m.node_key for m in (*self.compute.measurements, *self.memory.measurements)})

    @property
    def supplier_count(self) -> int:
        return len({m.supplier for m in (*self.compute.measurements, *self.memory.measurements)})


def _capped(measurements: Iterable[Measurement]) -> tuple[list[Measurement], int]:
    """Each node's latest PER_NODE measurements of each check (`measurements` come newest first),
    and how many were left out."""
    kept: list[Measurement] = []
    counts: dict[tuple[str, str], int] = {}
    left = 0
    for m in measurements:
        n = counts.get((m.node_key, m.kind), 0)
        if n < PER_NODE:
            kept.append(m)
            counts[(m.node_key, m.kind)] = n + 1
        else:
            left += 1
    return kept, left


def propose(
    model: GpuModel,
    rows: Iterable[Row],
    current_efficiency: float | None = None,
    current_step_seconds: float | None = None,
) -> Proposal:
    """The calibration the recorded measurements (`rows`, newest first) would set for the model."""
    found = [m for m in (measurement(model, r) for r in rows) if m is not None]
    kept, left = _capped(found)
    return Proposal(
        model,
        Check("compute", tuple(m for m in kept if m.kind == "compute"), verification.real_efficiency(model),
              current_efficiency),
        Check("memory", tuple(m for m in kept if m.kind == "memory"), vram.REAL_STEP_SECONDS, current_step_seconds),
        left,
    )  # fmt: skip
