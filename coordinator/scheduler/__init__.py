"""GPU-aware lease placement: filter qualifying nodes, score them, keep cluster leases whole."""

from coordinator.scheduler.model import (
    MAX_GPUS_PER_NODE,
    MAX_LEASE_GPUS,
    MAX_LEASE_NODES,
    InvalidLeaseRequest,
    InvalidNodeView,
    LeaseRequest,
    NodeBusy,
    NodeView,
    NotPlaced,
    PlacedShare,
    Placement,
    SchedulerError,
    StalePlacement,
    UnknownLease,
    UnknownNode,
)
from coordinator.scheduler.scheduler import Scheduler
from coordinator.scheduler.scoring import Scoring

__all__ = [
    "MAX_GPUS_PER_NODE",
    "MAX_LEASE_GPUS",
    "MAX_LEASE_NODES",
    "InvalidLeaseRequest",
    "InvalidNodeView",
    "LeaseRequest",
    "NodeBusy",
    "NodeView",
    "NotPlaced",
    "PlacedShare",
    "Placement",
    "Scheduler",
    "SchedulerError",
    "Scoring",
    "StalePlacement",
    "UnknownLease",
    "UnknownNode",
]
