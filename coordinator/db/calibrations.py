"""GPU models' calibrations (migration 0023_calibrations): the measured efficiency and memory step
time a model's real GPUs are held to (coordinator/calibration.py), the latest in force, and the
measurements they come from (the verifications rows of real GPUs of the model)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from coordinator.db.connection import Connection

__all__ = ["Calibration", "current", "measurements", "record"]


@dataclass(frozen=True)
class Calibration:
    id: int
    model: str
    efficiency: float  # the compute check's share of the model's dense TF32 peak
    step_seconds: float  # the memory check's seconds per block of a lane
    percentile: int
    compute_samples: int
    memory_samples: int
    nodes: int
    suppliers: int
    sample: list[int]  # the verifications rows measured
    set_by: str
    at: datetime


def _calibration(row: asyncpg.Record) -> Calibration:
    return Calibration(**{**dict(row), "sample": list(row["sample"])})


async def current(conn: Connection, model: str) -> Calibration | None:
    """The model's calibration in force (its latest), None while it has none."""
    row = await conn.fetchrow("SELECT * FROM model_calibrations WHERE model = $1 ORDER BY id DESC LIMIT 1", model)
    return None if row is None else _calibration(row)


async def record(
    conn: Connection,
    model: str,
    *,
    efficiency: float,
    step_seconds: float,
    percentile: int,
    compute_samples: int,
    memory_samples: int,
    nodes: int,
    suppliers: int,
    sample: Sequence[int],
    set_by: str,
) -> Calibration:
    """Records a calibration of the model: in force from the next verification of one of its GPUs."""
    row = await conn.fetchrow(
        """INSERT INTO model_calibrations (model, efficiency, step_seconds, percentile, compute_samples,
                                           memory_samples, nodes, suppliers, sample, set_by)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING *""",
        model, efficiency, step_seconds, percentile, compute_samples, memory_samples, nodes, suppliers,
        list(sample), set_by,
    )  # fmt: skip
    assert row is not None
    return _calibration(row)


async def measurements(conn: Connection, model: str) -> list[asyncpg.Record]:
    """Every measured honest answer of a real GPU of the model, newest first: its compute and memory
    checks that passed or were too slow (a right answer, committed), never a failed one (a wrong
    answer, or one that missed a calibrated deadline), each with its node's supplier (the provider
    account, the node key itself when the ledger does not know the node) and its workload's size."""
    return await conn.fetch(
        """SELECT v.id, v.node_key, coalesce(n.provider, v.node_key) AS supplier, v.kind, v.committed_seconds,
                  coalesce(v.flops, 2::bigint * v.products * v.n * v.n * v.depth) AS flops, v.blocks, v.at
           FROM verifications v LEFT JOIN nodes n ON n.node_key = v.node_key
           WHERE v.model = $1 AND NOT v.simulated AND v.verdict IN ('passed', 'too_slow')
             AND v.kind IN ('compute', 'memory') AND v.committed_seconds > 0
           ORDER BY v.id DESC""",
        model,
    )
