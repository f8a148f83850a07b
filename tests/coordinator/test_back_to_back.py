"""Back-to-back leases on the same nodes: a lease's nodes are free for the next one at its close on
chain (once each worker acknowledged being told to stop), not at its finalization. The next lease
runs before the first is finalized; the first lease's job stopped on every GPU before the second's
started; both leases settle exactly, each share paid what its worker's journal says it held.
"""

from __future__ import annotations

import signal

import pytest
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solders.pubkey import Pubkey

from gpunet.accounts import fetch
from gpunet.audit import audit_lease
from worker.journal import Journal

from .conftest import eventually
from .world import (
    PRICE,
    World,
    all_running,
    closed,
    live_settings,
    open_lease,
    placed_view,
    running,
    settlement_events,
    start_workers,
    steps_job,
    submitted,
)

CLOSE_GRACE = 15  # after a close, before it is finalized: the next lease runs well before


@pytest.fixture
async def chain(node):
    async with AsyncClient(node.url, commitment=Confirmed) as client:
        yield client


async def _status(chain: AsyncClient, lease: Pubkey) -> str:
    return type((await fetch(chain, lease, "Lease")).status).__name__


@pytest.mark.timeout(300)
async def test_the_next_lease_runs_on_a_closed_leases_nodes_before_it_is_finalized_and_both_settle_exactly(
    node, chain, pool, database_url, tmp_path, spawned
) -> None:
    world = await World().build(chain, tmp_path, nodes=2)  # two 2-GPU nodes: a 4-GPU lease takes both
    settings = live_settings(
        node,
        database_url,
        settle_seconds=1,
        settle_interval_seconds=0,
        settle_min_amount=0,
        close_grace_seconds=CLOSE_GRACE,
    )
    api = f"http://127.0.0.1:{settings.api_port}"
    leases: list[Pubkey] = []
    async with running(settings, pool, world.admin) as coordinator:
        workers = await start_workers(world, coordinator, tmp_path, spawned)
        spec = steps_job()
        for lease_id in (1, 2):
            lease = await open_lease(world, chain, 600, lease_id=lease_id)
            leases.append(lease)
            await eventually(lambda lease=lease: submitted(api, world.client, lease, spec), what="the job accepted")
            placed = (await eventually(lambda lease=lease: placed_view(api, world.client, lease), what="placed"))[
                "placement"
            ]["nodes"]
            assert sorted(placed) == sorted(world.node_keys())  # the same two nodes, both times
            await eventually(
                lambda lease=lease, placed=placed: all_running(api, world.client, lease, placed),
                timeout=60,
                what=f"lease {lease_id}'s job running on both nodes",
            )
            if lease_id == 1:
                await eventually(lambda lease=lease: _paid(chain, lease), what="a first settlement")
                await world.market.close_lease(world.lessee, lease)  # the client closes it; the next one opens
        first, second = leases
        assert await _status(chain, first) == "Closing", "the next lease ran before the first was finalized"

        # One GPU, one client's job: on every node the first lease's job ended before the second's began.
        async with pool.acquire() as conn:
            rows = await conn.fetch("SELECT id, lease, node_key, kind, state FROM job_events ORDER BY id")
        for key in world.node_keys():
            mine = [r for r in rows if r["node_key"] == key]
            last_first = max(r["id"] for r in mine if r["lease"] == str(first))
            first_second = min(r["id"] for r in mine if r["lease"] == str(second))
            assert last_first < first_second, f"{key}: the two leases' jobs overlapped"
            assert [r["state"] for r in mine if r["lease"] == str(first) and r["kind"] == "status"][-1] == "cancelled"

        await eventually(lambda: _paid(chain, second), what="a first settlement of the second lease")
        await world.market.close_lease(world.lessee, second)
        for lease in leases:
            await eventually(lambda lease=lease: closed(chain, lease), timeout=120, what="the lease finalized")

    for proc in workers.values():
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)

    journals = {key: tmp_path / f"worker{i}" / "usage.jsonl" for i, key in enumerate(world.node_keys())}
    for lease in leases:
        final = await fetch(chain, lease, "Lease")
        assert final.deposited == final.paid + final.fees + final.refunded  # conservation, to the base unit
        settled = await settlement_events(chain, lease)
        assert sum(e.payout for e in settled) == final.paid and sum(e.fee for e in settled) == final.fees
        assert all(e.payout + e.fee == e.gpu_seconds * PRICE // 3600 for e in settled)
        for share in list(final.assignments)[: final.node_count]:
            newest = Journal(journals[str(share.node_key)], read_only=True).newest(str(lease), share.epoch)
            assert newest is not None and newest.final
            # paid every GPU-second the worker's journal says it held, no more
            assert share.gpu_seconds == share.receipt_gpu_seconds == newest.gpu_seconds > 0
        report = await audit_lease(chain, lease)
        assert report.ok, report.differences()


async def _paid(chain: AsyncClient, lease: Pubkey) -> bool:
    return (await fetch(chain, lease, "Lease")).paid > 0
