"""A lease's jobs: numbered 1, 2, ..., each run on every node of the lease, one at a time. The
next may be submitted once the current one is over; between jobs each node keeps holding the
lease's share (and bills it), so the next job starts on the same GPUs."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from coordinator.keys import NodeKey
from gpunet.protocol import JOB_ENDED

__all__ = ["job_over", "job_progress"]


def job_over(states: Mapping[NodeKey, str], nodes: Iterable[NodeKey]) -> bool:
    """Whether a job is over on a lease held by `nodes`, from its latest state on each node that
    reported it: it ended somewhere and no node of the lease has it going. A node that never
    reported it does not keep it going: it took its share after the job had ended (a failover),
    or never got the job while its cluster peers ran it to its end."""
    nodes = list(nodes)
    # A job cancelled on a node that no longer holds the lease was stopped because its share moved
    # away (a drain, or a lost node that came back), not because the job ended: it counts for nothing.
    ended = any(s in JOB_ENDED and (n in nodes or s != "cancelled") for n, s in states.items())
    return ended and all(n not in states or states[n] in JOB_ENDED for n in nodes)


def job_progress(states: Mapping[NodeKey, str], nodes: Iterable[NodeKey]) -> str:
    """Where the job stands on each node, for a message ("node A: running, node B: not started")."""
    return ", ".join(f"node {n}: {states.get(n, 'not started')}" for n in nodes) or "not placed on any node yet"
