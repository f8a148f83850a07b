"""The coordinator's own records (migrations 0002 and 0003): placements, jobs (numbered, one
current per lease) and their events, usage reports as signed, checkpoints and faults. One function per statement, each idempotent where a
retry or a restart can repeat it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import asyncpg
from solders.pubkey import Pubkey
from solders.signature import Signature

from coordinator.settlement import Outcome, SignedUsage
from gpunet.protocol import (
    Checkpoint,
    CheckpointFile,
    JobLog,
    JobSpec,
    JobStatus,
    UsageReportMessage,
)
from gpunet.usage import UsageReport

__all__ = [
    "Job", "active_shares", "checkpoint_of", "current_job", "job_states", "of_current_share", "pending_usage",
    "record_checkpoint",
    "record_fault", "record_job_event", "record_usage", "save_job", "set_placement", "settle_outcomes",
]


async def set_placement(conn: asyncpg.Connection, lease: str, state: str, reason: str = "",
                        nodes: list[str] | None = None, signature: str | None = None) -> None:
    await conn.execute(
        """INSERT INTO placements (lease, state, reason, nodes, signature)
           VALUES ($1, $2, $3, coalesce($4, '{}'::text[]), $5)
           ON CONFLICT (lease) DO UPDATE SET state = $2, reason = $3,
             nodes = coalesce($4, placements.nodes), signature = coalesce($5, placements.signature),
             updated_at = clock_timestamp()""",
        lease, state, reason, nodes, signature)


@dataclass(frozen=True)
class Job:
    """A lease's current job."""

    number: int
    spec: JobSpec
    gpus_per_node: int | None


async def save_job(conn: asyncpg.Connection, lease: str, number: int, spec: JobSpec, gpus_per_node: int | None,
                   client: str, signature: str) -> bool:
    """Stores job `number` of the lease: its first, or the next one, which replaces the current job
    (kept in earlier_jobs). False, and nothing changed, when the lease's current job is not
    `number - 1` (another submission took the number meanwhile)."""
    if number == 1:
        done = await conn.execute(
            "INSERT INTO jobs (lease, number, spec, gpus_per_node, client, signature) VALUES ($1, 1, $2, $3, $4, $5) "
            "ON CONFLICT (lease) DO NOTHING", lease, spec.model_dump_json(), gpus_per_node, client, signature)
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
        lease, number, spec.model_dump_json(), gpus_per_node, client, signature)
    return done.endswith(" 1")


async def current_job(conn: asyncpg.Connection, lease: str) -> Job | None:
    row = await conn.fetchrow("SELECT number, spec, gpus_per_node FROM jobs WHERE lease = $1", lease)
    return None if row is None else Job(row["number"], JobSpec.model_validate_json(row["spec"]), row["gpus_per_node"])


# A node's assignment of a lease under an epoch, while it is still one of the lease's nodes.
_CURRENT_SHARE = """SELECT 1 FROM assignments a JOIN leases l USING (lease)
                    WHERE a.lease = {lease} AND a.node_key = {node_key} AND a.node = ANY(l.nodes)
                      AND (a.assigned_by IS NULL OR a.assigned_by = {epoch})"""


async def record_job_event(conn: asyncpg.Connection, node_key: Pubkey, message: JobStatus | JobLog) -> bool:
    """Once per numbered message (a worker sends again what it was not sure was recorded), and only
    of the node's current share (`of_current_share`, checked in the same statement: this is every log
    line's path). False when refused as not of it. NUL, which PostgreSQL text cannot hold, becomes
    U+FFFD: a line that could never be recorded would otherwise hold up everything after it."""
    if isinstance(message, JobStatus):
        values = ("status", message.state, message.exit_code, message.detail.replace("\x00", "\ufffd"), None, None)
    else:
        values = ("log", None, None, None, message.stream, message.line.replace("\x00", "\ufffd"))
    status = await conn.execute(
        f"""INSERT INTO job_events (lease, job_number, node_key, origin, n, kind, state, exit_code, detail, stream, line)
            SELECT $1::text, $2::integer, $3::text, $4::text, $5::bigint, $6::text, $7::text, $8::integer, $9::text,
                   $10::text, $11::text
            WHERE $12::text IS NULL OR EXISTS ({_CURRENT_SHARE.format(lease="$1", node_key="$3", epoch="$12")})
            ON CONFLICT (node_key, origin, n) WHERE n IS NOT NULL DO NOTHING""",
        message.lease, message.job_number, str(node_key), message.origin, message.n, *values, message.epoch)
    # nothing inserted: a repeat of a recorded message, or one of a share the node no longer holds
    return status.endswith(" 1") or await of_current_share(conn, node_key, message.lease, message.epoch)


async def job_states(conn: asyncpg.Connection, lease: str, number: int) -> dict[str, str]:
    """The latest state of job `number` of `lease` on each node that reported it."""
    rows = await conn.fetch("SELECT DISTINCT ON (node_key) node_key, state FROM job_events "
                            "WHERE lease = $1 AND job_number = $2 AND kind = 'status' ORDER BY node_key, id DESC",
                            lease, number)
    return {r["node_key"]: r["state"] for r in rows}


async def record_usage(conn: asyncpg.Connection, node_key: Pubkey, report: UsageReportMessage) -> None:
    """Durable before the worker's ack; a re-sent report is the same row (never a second one)."""
    await conn.execute(
        """INSERT INTO usage_reports (lease, node_key, seq, period_start, period_end, gpu_seconds, signature, simulated)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (lease, node_key, seq) DO NOTHING""",
        report.lease, str(node_key), report.seq, report.period_start, report.period_end, report.gpu_seconds,
        report.signature, report.simulated)


async def pending_usage(conn: asyncpg.Connection, node_key: str | None = None, limit: int = 500) -> list[SignedUsage]:
    rows = await conn.fetch(
        "SELECT * FROM usage_reports WHERE status = 'pending' AND ($1::text IS NULL OR node_key = $1) "
        "ORDER BY lease, node_key, seq LIMIT $2", node_key, limit)
    return [SignedUsage(Pubkey.from_string(r["lease"]), Pubkey.from_string(r["node_key"]),
                        UsageReport(int(r["seq"]), r["period_start"], r["period_end"], int(r["gpu_seconds"])),
                        bytes(Signature.from_string(r["signature"])))
            for r in rows]


async def refused_usage(conn: asyncpg.Connection, batch: list[SignedUsage]) -> set[tuple[Pubkey, Pubkey, int]]:
    """(lease, node key, seq) of the refused reports of the batch's shares: later ones need not wait for them."""
    shares = {(str(u.lease), str(u.node_key)) for u in batch}
    if not shares:
        return set()
    leases, nodes = zip(*shares, strict=True)
    rows = await conn.fetch(
        "SELECT lease, node_key, seq FROM usage_reports WHERE status = 'refused' "
        "AND (lease, node_key) IN (SELECT * FROM unnest($1::text[], $2::text[]))", list(leases), list(nodes))
    return {(Pubkey.from_string(r["lease"]), Pubkey.from_string(r["node_key"]), int(r["seq"])) for r in rows}


async def pending_usage_count(conn: asyncpg.Connection, lease: str) -> int:
    return await conn.fetchval("SELECT count(*) FROM usage_reports WHERE status = 'pending' AND lease = $1", lease)


async def settle_outcomes(conn: asyncpg.Connection, outcomes: list[Outcome]) -> None:
    """Records what settlement decided; reports still waiting stay pending."""
    for o in outcomes:
        if o.status.value == "waiting":
            continue
        await conn.execute(
            "UPDATE usage_reports SET status = $4, reason = $5, settled_by = $6 "
            "WHERE lease = $1 AND node_key = $2 AND seq = $3",
            str(o.usage.lease), str(o.usage.node_key), o.usage.report.seq, o.status.value, o.reason,
            str(o.signature) if o.signature else None)


async def record_checkpoint(conn: asyncpg.Connection, node_key: Pubkey, checkpoint: Checkpoint) -> bool:
    """Keeps the checkpoint as the lease's latest, only from a node that holds a share of the running
    lease now, under the assignment epoch the checkpoint names (if it names one): a node whose share
    moved must not overwrite the new node's progress. False if refused."""
    status = await conn.execute(
        """INSERT INTO checkpoints (lease, node_key, files)
           SELECT $1, $2, $3 WHERE EXISTS (
             SELECT 1 FROM assignments a JOIN leases l USING (lease)
             WHERE a.lease = $1 AND a.node_key = $2 AND a.active AND l.status = 'active'
               AND ($4::text IS NULL OR a.assigned_by IS NULL OR a.assigned_by = $4))
           ON CONFLICT (lease) DO UPDATE SET node_key = $2, files = $3, received_at = clock_timestamp()""",
        checkpoint.lease, str(node_key), json.dumps([f.model_dump() for f in checkpoint.files]), checkpoint.epoch)
    return status.endswith(" 1")


async def of_current_share(conn: asyncpg.Connection, node_key: Pubkey, lease: str, epoch: str | None) -> bool:
    """Whether a job status or log line the node sent about `lease` under assignment `epoch` is of
    its current share: the node is still one of the lease's nodes (also once the lease is closed:
    a job's last lines arrive after its end) and its assignment is of that epoch. A message without
    an epoch (an older worker) is not checked."""
    if epoch is None:
        return True
    return await conn.fetchval(f"SELECT EXISTS ({_CURRENT_SHARE.format(lease='$1', node_key='$2', epoch='$3')})",
                               lease, str(node_key), epoch)



async def checkpoint_of(conn: asyncpg.Connection, lease: str) -> list[CheckpointFile]:
    raw = await conn.fetchval("SELECT files FROM checkpoints WHERE lease = $1", lease)
    return [] if raw is None else [CheckpointFile.model_validate(f) for f in json.loads(raw)]


async def record_fault(conn: asyncpg.Connection, node_key: str, lease: str | None, kind: str,
                       evidence: dict[str, Any], evidence_hash: bytes) -> int:
    return await conn.fetchval(
        "INSERT INTO faults (node_key, lease, kind, evidence, evidence_hash) VALUES ($1, $2, $3, $4, $5) RETURNING id",
        node_key, lease, kind, json.dumps(evidence, sort_keys=True), evidence_hash.hex())


async def active_shares(conn: asyncpg.Connection, *, lease: str | None = None, node_key: str | None = None) -> list[asyncpg.Record]:
    """Active assignments (with their lease's terms and rank order), by lease or by node."""
    return await conn.fetch(
        """SELECT a.*, l.client, l.status AS lease_status, l.started_at, l.duration_seconds, l.gpu_model,
                  l.min_vram_gb, l.gpu_count, l.region, l.max_price_per_gpu_hour, l.downtime_tolerance_seconds,
                  array_position(l.nodes, a.node) - 1 AS rank, cardinality(l.nodes) AS world_size
           FROM assignments a JOIN leases l USING (lease)
           WHERE a.active AND l.status = 'active' AND ($1::text IS NULL OR a.lease = $1)
             AND ($2::text IS NULL OR a.node_key = $2)
           ORDER BY a.lease, array_position(l.nodes, a.node)""", lease, node_key)
