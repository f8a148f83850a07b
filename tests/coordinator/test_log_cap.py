"""A lease's logs in the ledger are capped: the coordinator keeps its jobs' newest lines only (a job
printing without end cannot fill the database), cutting now and then; statuses are never cut."""

from __future__ import annotations

from types import SimpleNamespace

from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.signature import Signature

from coordinator.db import jobs
from coordinator.loops.workers import WorkerMessages
from gpunet.protocol import JobLog, JobStatus

EPOCH = str(Signature.default())  # the assignment's transaction, as the dispatch hands it to the node


def _line(lease: str, n: int) -> JobLog:
    return JobLog(
        simulated=True, lease=lease, stream="stdout", line=f"step {n}", origin="0123456789abcdef", n=n + 1, epoch=EPOCH
    )


def _status(lease: str, state: str) -> JobStatus:
    return JobStatus(simulated=True, lease=lease, state=state, epoch=EPOCH)


async def _placed(pool, node: Pubkey, *leases: str) -> None:
    """The ledger as the indexer and a job submission leave it: each lease active on `node` alone,
    under EPOCH, with its job 1 (a node's job messages are recorded only of a share it holds)."""
    async with pool.acquire() as conn:
        for lease in leases:
            account = str(Pubkey.new_unique())
            await conn.execute(
                """INSERT INTO leases (lease, client, lease_id, gpu_model, min_vram_gb, gpu_count, region,
                     max_price_per_gpu_hour, duration_seconds, status, started_at, deposited, paid, fees,
                     refunded, nodes, signature)
                   VALUES ($1, 'client', 1, 1, 80, 2, 0, 1, 3600, 'active', 0, 0, 0, 0, 0, ARRAY[$2], 'sig')""",
                lease,
                account,
            )
            await conn.execute(
                """INSERT INTO assignments (lease, node, node_key, provider, gpus, price_per_gpu_hour, settled_until,
                     gpu_seconds, active, signature, assigned_by, epoch)
                   VALUES ($1, $2, $3, 'provider', 2, 1, 0, 0, true, $4, $4, 1)""",
                lease,
                account,
                str(node),
                EPOCH,
            )
            await conn.execute(
                "INSERT INTO jobs (lease, spec, client, signature) VALUES ($1, '{}', 'client', 'sig')", lease
            )


async def _lines(pool, lease: str) -> list[str]:
    async with pool.acquire() as conn:
        rows = await conn.fetch("SELECT line FROM job_events WHERE lease = $1 AND kind = 'log' ORDER BY id", lease)
    return [r["line"] for r in rows]


async def test_the_ledger_keeps_a_leases_newest_lines_and_every_status(pool) -> None:
    node = Keypair().pubkey()
    noisy, quiet = str(Pubkey.new_unique()), str(Pubkey.new_unique())
    await _placed(pool, node, noisy, quiet)
    async with pool.acquire() as conn:
        await jobs.record_job_event(conn, node, _status(noisy, "running"))
        for n in range(30):
            await jobs.record_job_event(conn, node, _line(noisy, n))
        for n in range(30, 35):
            await jobs.record_job_event(conn, node, _line(quiet, n))
        assert await jobs.cap_logs(conn, noisy, 10) == 20
        assert await jobs.cap_logs(conn, noisy, 10) == 0  # at the cap: nothing more goes
        assert await jobs.cap_logs(conn, quiet, 10) == 0  # the control: a lease under the cap keeps all
        statuses = await conn.fetchval("SELECT count(*) FROM job_events WHERE lease = $1 AND kind = 'status'", noisy)
    assert await _lines(pool, noisy) == [f"step {n}" for n in range(20, 30)]
    assert await _lines(pool, quiet) == [f"step {n}" for n in range(30, 35)]
    assert statuses == 1


async def test_the_workers_lines_are_cut_to_the_cap_as_they_come(pool) -> None:
    # Only the ledger is used by a log line's path: the other parts are not needed here.
    workers = WorkerMessages(pool, *[None] * 8, log_lines_per_lease=7)  # type: ignore[arg-type]
    node, lease = Keypair().pubkey(), str(Pubkey.new_unique())
    await _placed(pool, node, lease)
    for n in range(20):
        await workers.job_log(node, _line(lease, n))
    lines = await _lines(pool, lease)
    # cut every 7th line (the cap, under CAP_EVERY) to the newest 7: at the 14th, to 7..13; then 14..19 come
    assert lines == [f"step {n}" for n in range(7, 20)]
    assert len(lines) < 20


async def test_a_jobs_end_forgets_its_lease_line_count(pool) -> None:
    """The count of lines since the last cut is kept per lease while its job runs, not for the
    process's life: a job's last status drops it (the control: a lease still running keeps its own)."""
    drain = SimpleNamespace(job_ended=lambda *_: None)
    workers = WorkerMessages(pool, None, None, None, None, None, None, drain, None, log_lines_per_lease=7)  # type: ignore[arg-type]
    node, ended, running = Keypair().pubkey(), str(Pubkey.new_unique()), str(Pubkey.new_unique())
    await _placed(pool, node, ended, running)
    for lease in (ended, running):
        await workers.job_status(node, _status(lease, "running"))
        for n in range(3):
            await workers.job_log(node, _line(lease, n))
    await workers.job_status(node, _status(ended, "succeeded"))
    assert ended not in workers._lines_since_cap
    assert workers._lines_since_cap[running] == 3
