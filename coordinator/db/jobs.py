"""A lease's jobs (numbered, one current per lease, earlier ones kept), what the nodes say about
them (job_events: statuses and log lines, each recorded once) and the lease's latest checkpoint
(migrations 0003, 0007, 0008), the job's secrets as sealed to each node (0011) and the lease's
checkpoint key as sealed to each node (0014)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg
from pydantic import ValidationError
from solders.pubkey import Pubkey

from coordinator.db.connection import Connection
from coordinator.keys import NodeKey
from gpunet.protocol import Checkpoint, CheckpointFile, JobLog, JobSpec, JobStatus

__all__ = [
    "Job",
    "UnreadableJob",
    "cap_logs",
    "checkpoints_of",
    "checkpoints_past_retention",
    "current_job",
    "current_job_number",
    "holds_share",
    "job_states",
    "job_view",
    "latest_checkpoint",
    "of_current_share",
    "rank_holders",
    "record_checkpoint",
    "record_job_event",
    "save_checkpoint_keys",
    "save_job",
    "save_secrets",
    "sealed_checkpoint_keys",
    "sealed_secrets",
    "supplies_lease",
]


@dataclass(frozen=True)
class Job:
    """A lease's current job."""

    number: int
    spec: JobSpec
    gpus_per_node: int | None


async def save_job(
    conn: Connection,
    lease: str,
    number: int,
    spec: JobSpec,
    gpus_per_node: int | None,
    client: str,
    signature: str,
) -> bool:
    """Stores job `number` of the lease: its first, or the next one, which replaces the current job
    (kept in earlier_jobs). False, and nothing changed, when the lease's current job is not
    `number - 1` (another submission took the number meanwhile)."""
    if number == 1:
        done = await conn.execute(
            "INSERT INTO jobs (lease, number, spec, gpus_per_node, client, signature) VALUES ($1, 1, $2, $3, $4, $5) "
            "ON CONFLICT (lease) DO NOTHING",
            lease,
            spec.model_dump_json(),
            gpus_per_node,
            client,
            signature,
        )
        return done.endswith(" 1")
    # One statement: the row lock makes a concurrent submission of the same number find no job
    # `number - 1` once this one commits.
    done = await conn.execute(
        """WITH prev AS (SELECT * FROM jobs WHERE lease = $1 AND number = $2 - 1 FOR UPDATE),
                replaced AS (UPDATE jobs j SET number = $2, spec = $3, gpus_per_node = $4, client = $5, signature = $6,
                                               submitted_at = clock_timestamp()
                             FROM prev WHERE j.lease = prev.lease
                             RETURNING prev.lease, prev.number, prev.spec, prev.gpus_per_node, prev.client,
                                       prev.signature, prev.submitted_at)
           INSERT INTO earlier_jobs (lease, number, spec, gpus_per_node, client, signature, submitted_at)
           SELECT * FROM replaced""",
        lease,
        number,
        spec.model_dump_json(),
        gpus_per_node,
        client,
        signature,
    )
    return done.endswith(" 1")


class UnreadableJob(ValueError):
    """A stored job spec this coordinator's rules refuse (it was accepted under older ones)."""

    def __init__(self, number: int, spec: str, why: str) -> None:
        super().__init__(f"job {number} no longer passes the job rules ({why}): submit the lease's next job")
        self.number, self.spec = number, spec


async def current_job_number(conn: Connection, lease: str) -> int | None:
    """The number of the lease's current job (None: it has had none)."""
    number: int | None = await conn.fetchval("SELECT number FROM jobs WHERE lease = $1", lease)
    return number


async def current_job(conn: Connection, lease: str) -> Job | None:
    """The lease's current job; UnreadableJob when its stored spec fails today's rules."""
    row = await conn.fetchrow("SELECT number, spec, gpus_per_node FROM jobs WHERE lease = $1", lease)
    if row is None:
        return None
    try:
        spec = JobSpec.model_validate_json(row["spec"])
    except ValidationError as e:
        raise UnreadableJob(row["number"], row["spec"], e.errors()[0]["msg"]) from None
    return Job(row["number"], spec, row["gpus_per_node"])


# A node's assignment of a lease under an epoch, while it is still one of the lease's nodes. A
# message without an epoch matches only an assignment indexed before epochs existed (assigned_by
# NULL): every share assigned since is dispatched with its epoch, and a worker that sends none is
# too old to be fenced, so it is refused rather than believed.
_CURRENT_SHARE = """SELECT 1 FROM assignments a JOIN leases l USING (lease)
                    WHERE a.lease = {lease} AND a.node_key = {node_key} AND a.node = ANY(l.nodes)
                      AND (a.assigned_by IS NULL OR a.assigned_by = {epoch})"""
# A job the lease has had (its current one or an earlier one): a node cannot speak for a job the
# client has not submitted yet (a `succeeded` recorded ahead would end the job before it ran).
_SUBMITTED_JOB = "SELECT 1 FROM jobs j WHERE j.lease = {lease} AND j.number >= {number}"
# The nodes that ever held a share of the lease: only what they said counts for its jobs (rows
# recorded before the fence was whole, from nodes the lease was never on, are never read).
_EVER_HELD = "SELECT h.node_key FROM assignments h WHERE h.lease = {lease}"


async def record_job_event(conn: Connection, node_key: NodeKey, message: JobStatus | JobLog) -> bool:
    """Once per numbered message (a worker sends again what it was not sure was recorded), and only
    of the node's current share and a job the lease has had (`of_current_share`, checked in the same
    statement: this is every log line's path). False when refused as not of them. NUL, which
    PostgreSQL text cannot hold, becomes U+FFFD: a line that could never be recorded would otherwise
    hold up everything after it."""
    values: tuple[Any, ...]
    if isinstance(message, JobStatus):
        values = ("status", message.state, message.exit_code, message.detail.replace("\x00", "\ufffd"), None, None)
    else:
        values = ("log", None, None, None, message.stream, message.line.replace("\x00", "\ufffd"))
    status = await conn.execute(
        f"""INSERT INTO job_events
              (lease, job_number, node_key, origin, n, kind, state, exit_code, detail, stream, line)
            SELECT $1::text, $2::integer, $3::text, $4::text, $5::bigint, $6::text, $7::text, $8::integer, $9::text,
                   $10::text, $11::text
            WHERE EXISTS ({_CURRENT_SHARE.format(lease="$1", node_key="$3", epoch="$12")})
              AND EXISTS ({_SUBMITTED_JOB.format(lease="$1", number="$2")})
            ON CONFLICT (node_key, origin, n) WHERE n IS NOT NULL DO NOTHING""",
        message.lease,
        message.job_number,
        str(node_key),
        message.origin,
        message.n,
        *values,
        message.epoch,
    )
    # nothing inserted: a repeat of a recorded message, or one of a share the node does not hold
    return status.endswith(" 1") or await of_current_share(
        conn, node_key, message.lease, message.epoch, message.job_number
    )


async def cap_logs(conn: Connection, lease: str, keep: int) -> int:
    """Deletes all but the newest `keep` log lines of `lease` (its statuses stay); how many went."""
    status = await conn.execute(
        """DELETE FROM job_events WHERE lease = $1 AND kind = 'log' AND id <= (
               SELECT id FROM job_events WHERE lease = $1 AND kind = 'log' ORDER BY id DESC OFFSET $2 LIMIT 1)""",
        lease,
        keep,
    )
    return int(status.split()[-1])


async def of_current_share(
    conn: Connection, node_key: NodeKey, lease: str, epoch: str | None, job_number: int = 1
) -> bool:
    """Whether a job status or log line the node sent about job `job_number` of `lease` under
    assignment `epoch` is of its current share: the node is still one of the lease's nodes (also
    once the lease is closed: a job's last lines arrive after its end), its assignment is of that
    epoch (a message without one only for an assignment indexed before epochs), and the lease has
    had that job."""
    return await conn.fetchval(
        f"""SELECT EXISTS ({_CURRENT_SHARE.format(lease="$1", node_key="$2", epoch="$3")})
                   AND EXISTS ({_SUBMITTED_JOB.format(lease="$1", number="$4")})""",
        lease,
        str(node_key),
        epoch,
        job_number,
    )


async def job_states(conn: Connection, lease: str, number: int) -> dict[NodeKey, str]:
    """The latest state of job `number` of `lease` on each node that reported it and held a share
    of the lease: a job's end counts only from a node that held it."""
    rows = await conn.fetch(
        "SELECT DISTINCT ON (node_key) node_key, state FROM job_events "
        f"WHERE lease = $1 AND job_number = $2 AND kind = 'status' AND node_key IN ({_EVER_HELD.format(lease='$1')}) "
        "ORDER BY node_key, id DESC",
        lease,
        number,
    )
    return {Pubkey.from_string(r["node_key"]): r["state"] for r in rows}


async def record_checkpoint(conn: Connection, node_key: NodeKey, checkpoint: Checkpoint) -> bool:
    """Keeps the checkpoint as the latest of the node's rank in the lease (its place in the lease's
    nodes, as the ledger has it), only from a node that holds a share of the running lease now,
    under the assignment epoch the checkpoint names (none: only an assignment indexed before epochs,
    as for job events): a node whose share moved must not overwrite the new node's progress, nor one
    rank another's. False if refused."""
    status = await conn.execute(
        """INSERT INTO checkpoints (lease, rank, node_key, files)
           SELECT $1, array_position(l.nodes, a.node) - 1, $2, $3
           FROM assignments a JOIN leases l USING (lease)
           WHERE a.lease = $1 AND a.node_key = $2 AND a.active AND l.status = 'active'
             AND array_position(l.nodes, a.node) IS NOT NULL
             AND (a.assigned_by IS NULL OR a.assigned_by = $4::text)
           LIMIT 1
           ON CONFLICT (lease, rank) DO UPDATE SET node_key = $2, files = $3, received_at = clock_timestamp()""",
        checkpoint.lease,
        str(node_key),
        json.dumps([f.model_dump() for f in checkpoint.files]),
        checkpoint.epoch,
    )
    return status.endswith(" 1")


async def holds_share(conn: Connection, lease: str, node_key: str) -> bool:
    """Whether the node holds a share of the running lease now (it may use the lease's checkpoint store)."""
    return bool(
        await conn.fetchval(
            """SELECT EXISTS (SELECT 1 FROM assignments a JOIN leases l USING (lease)
                              WHERE a.lease = $1 AND a.node_key = $2 AND a.active AND l.status = 'active')""",
            lease,
            node_key,
        )
    )


async def save_checkpoint_keys(conn: Connection, lease: str, sealed: dict[str, str]) -> None:
    """Keeps the lease's checkpoint key as its client sealed it to each node (node key -> sealed);
    a node's new one replaces its old one."""
    for node_key, value in sealed.items():
        await conn.execute(
            "INSERT INTO checkpoint_keys (lease, node_key, sealed) VALUES ($1, $2, $3) "
            "ON CONFLICT (lease, node_key) DO UPDATE SET sealed = EXCLUDED.sealed, given_at = clock_timestamp()",
            lease,
            node_key,
            value,
        )


async def sealed_checkpoint_keys(conn: Connection, lease: str) -> dict[str, str]:
    """The lease's checkpoint key sealed to each node, by node key."""
    rows = await conn.fetch("SELECT node_key, sealed FROM checkpoint_keys WHERE lease = $1", lease)
    return {r["node_key"]: r["sealed"] for r in rows}


async def rank_holders(conn: Connection, lease: str) -> dict[int, list[str]]:
    """Each rank of the lease -> the node keys that hold or held it: the signers its checkpoints of
    that rank may have. From the lease's events on chain: its assignment names its nodes in rank
    order, and a move puts the new node in the moved node's rank (as the ledger's `leases.nodes`)."""
    rows = await conn.fetch(
        """SELECT name, data FROM events WHERE lease = $1 AND name IN ('LeaseAssigned', 'LeaseReassigned')
           ORDER BY id""",
        lease,
    )
    nodes: list[str] = []  # node accounts by rank, as the events so far leave them
    holders: dict[int, set[str]] = {}
    for r in rows:
        data = json.loads(r["data"])
        if r["name"] == "LeaseAssigned":
            nodes = [a["node"] for a in data["assignments"]]
            for rank, a in enumerate(data["assignments"]):
                holders.setdefault(rank, set()).add(a["node_key"])
        elif data["from_node"] in nodes:
            rank = nodes.index(data["from_node"])
            nodes[rank] = data["assignment"]["node"]
            holders.setdefault(rank, set()).add(data["assignment"]["node_key"])
    return {rank: sorted(keys) for rank, keys in sorted(holders.items())}


async def checkpoints_past_retention(conn: Connection, leases: list[str], ended_before: int) -> list[str]:
    """Of `leases`, those that have ended (closing or closed, and past their end) before `ended_before`
    (unix seconds): their stored checkpoints may go."""
    rows = await conn.fetch(
        """SELECT lease FROM leases WHERE lease = ANY($1::text[]) AND status IN ('closing', 'closed')
             AND started_at + duration_seconds < $2""",
        leases,
        ended_before,
    )
    return [r["lease"] for r in rows]


async def checkpoints_of(conn: Connection, lease: str) -> dict[int, list[CheckpointFile]]:
    """The lease's latest small checkpoint of each rank that sent one (what its node restores)."""
    rows = await conn.fetch("SELECT rank, files FROM checkpoints WHERE lease = $1", lease)
    return {r["rank"]: [CheckpointFile.model_validate(f) for f in json.loads(r["files"])] for r in rows}


async def latest_checkpoint(
    conn: Connection, lease: str, rank: int = 0
) -> tuple[str, datetime, list[CheckpointFile]] | None:
    """The latest checkpoint of the lease's rank: (the node that sent it, when it came, its files);
    None if none came."""
    row = await conn.fetchrow(
        "SELECT node_key, received_at, files FROM checkpoints WHERE lease = $1 AND rank = $2", lease, rank
    )
    if row is None:
        return None
    return row["node_key"], row["received_at"], [CheckpointFile.model_validate(f) for f in json.loads(row["files"])]


async def job_view(
    conn: Connection, lease: str, *, after: int, tail: int | None, page: int
) -> tuple[asyncpg.Record | None, asyncpg.Record | None, list[asyncpg.Record], list[asyncpg.Record], bool] | None:
    """What the client API shows of a lease's job: (job, placement, each node's latest status of the
    current job, log lines, whether more lines follow); None when the lease has neither a job nor a
    placement. Log lines: the last `tail` after id `after` (a status view, in order), else a page of
    `page` lines after it (`more`: ask again with after = the last id)."""
    job = await conn.fetchrow("SELECT number, spec, gpus_per_node, submitted_at FROM jobs WHERE lease = $1", lease)
    placement = await conn.fetchrow(
        "SELECT state, reason, nodes, signature, updated_at FROM placements WHERE lease = $1", lease
    )
    if job is None and placement is None:
        return None
    held = _EVER_HELD.format(lease="$1")  # the client sees only what the lease's own nodes said
    statuses = await conn.fetch(
        "SELECT DISTINCT ON (node_key) node_key, state, exit_code, detail, at FROM job_events "
        f"WHERE lease = $1 AND job_number = $2 AND kind = 'status' AND node_key IN ({held}) "
        "ORDER BY node_key, id DESC",
        lease,
        job["number"] if job else 1,
    )
    if tail is not None:
        logs = (
            await conn.fetch(
                "SELECT id, node_key, job_number, stream, line FROM job_events WHERE lease = $1 "
                f"AND kind = 'log' AND id > $2 AND node_key IN ({held}) ORDER BY id DESC LIMIT $3",
                lease,
                after,
                tail,
            )
        )[::-1]
        return job, placement, statuses, logs, False
    logs = await conn.fetch(
        "SELECT id, node_key, job_number, stream, line FROM job_events WHERE lease = $1 "
        f"AND kind = 'log' AND id > $2 AND node_key IN ({held}) ORDER BY id LIMIT $3",
        lease,
        after,
        page + 1,
    )
    return job, placement, statuses, logs[:page], len(logs) > page


async def save_secrets(conn: Connection, lease: str, number: int, sealed: dict[str, dict[str, str]]) -> None:
    """Keeps the client's secrets of job `number` sealed to each node (node key -> name -> sealed);
    a node's new ones replace its old ones."""
    for node_key, values in sealed.items():
        await conn.execute(
            "INSERT INTO job_secrets (lease, job_number, node_key, sealed) VALUES ($1, $2, $3, $4) "
            "ON CONFLICT (lease, job_number, node_key) DO UPDATE SET sealed = EXCLUDED.sealed, "
            "given_at = clock_timestamp()",
            lease,
            number,
            node_key,
            json.dumps(values),
        )


async def sealed_secrets(conn: Connection, lease: str, number: int) -> dict[str, dict[str, str]]:
    """The secrets of job `number` of the lease, by node key: name -> sealed value."""
    rows = await conn.fetch(
        "SELECT node_key, sealed FROM job_secrets WHERE lease = $1 AND job_number = $2", lease, number
    )
    return {r["node_key"]: json.loads(r["sealed"]) for r in rows}


async def supplies_lease(conn: Connection, lease: str, wallet: str) -> bool:
    """Whether `wallet` is the supplier (provider authority) of a node that holds one of the lease's
    shares now (one of its nodes, as the chain's events leave them: also once it is closed), or
    held one while the lease's current job was there to run (its share moved away after the job
    was submitted). Only the chain's events and the client's submission decide it: nothing a node
    sends makes its supplier one."""
    return bool(
        await conn.fetchval(
            """SELECT EXISTS (
                 SELECT 1 FROM assignments a JOIN leases l USING (lease) JOIN providers p ON p.provider = a.provider
                 WHERE a.lease = $1 AND p.authority = $2
                   AND (a.node = ANY(l.nodes) OR EXISTS (
                     SELECT 1 FROM events e JOIN jobs j ON j.lease = e.lease
                     WHERE e.lease = $1 AND e.name = 'LeaseReassigned' AND e.data->>'from_node' = a.node
                       AND e.block_time >= extract(epoch FROM j.submitted_at))))""",
            lease,
            wallet,
        )
    )
