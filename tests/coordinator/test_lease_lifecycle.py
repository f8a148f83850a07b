"""The coordinator end to end with real parts: gpunet-localnet with the program, embedded
PostgreSQL, the coordinator in this process (indexer, gateway, scheduler, failover, settlement,
API) and three `gpunet worker run` processes with simulated GPUs.

A client opens a 4-GPU lease as a 2-node cluster and attaches a checkpointing job; the lease is
placed on two nodes and runs; one worker is SIGKILLed; its provider is slashed with evidence,
its share moves to the spare node, and the job resumes there from its checkpoint; usage is
settled each period; the coordinator closes the lease at its end; every token is accounted for.
"""

from __future__ import annotations

import signal
import sys

import pytest
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solders.pubkey import Pubkey

from gpunet import instructions as ix
from gpunet.accounts import fetch
from gpunet.audit import audit_lease
from gpunet.client import send_and_confirm
from gpunet.pda import lease_pda, lease_vault_pda, node_pda
from gpunet.protocol import JobSpec

from .conftest import eventually
from .world import (
    JOB,
    PRICE,
    World,
    all_running,
    checkpointed,
    closed,
    live_settings,
    placed_view,
    resumed_on,
    running,
    settled_count,
    settlement_events,
    start_workers,
    submitted,
    truly,
)


@pytest.fixture
async def chain(node):
    async with AsyncClient(node.url, commitment=Confirmed) as client:
        yield client


@pytest.mark.timeout(300)
async def test_a_cluster_lease_survives_a_lost_worker_and_every_token_is_accounted_for(
    node, chain, pool, database_url, tmp_path, spawned
) -> None:
    world = await World().build(chain, tmp_path)
    settings = live_settings(
        node,
        database_url,
        lost_after_seconds=3,
        settle_seconds=1,
        settle_interval_seconds=0,  # every receipt as it comes (production: hourly)
        settle_min_amount=0,
        close_grace_seconds=4,
    )
    api = f"http://127.0.0.1:{settings.api_port}"
    async with running(settings, pool, world.admin) as coordinator:
        workers = await start_workers(world, coordinator, tmp_path, spawned)

        lease = lease_pda(world.client.pubkey(), 1)
        await send_and_confirm(
            chain,
            world.client,
            [
                ix.open_lease(
                    world.client.pubkey(), world.client_tokens, world.mint, 1, ix.LeaseTerms(1, 80, 4, 0, 2 * PRICE, 40)
                )
            ],
        )
        spec = JobSpec(command=[sys.executable, JOB], env={"STEPS": "100000", "STEP_SECONDS": "0.2"})
        await eventually(lambda: submitted(api, world.client, lease, spec), what="the job accepted")

        view = await eventually(lambda: placed_view(api, world.client, lease), what="the lease placed")
        placed = view["placement"]["nodes"]
        assert len(placed) == 2 and set(placed) < set(world.node_keys())
        await eventually(lambda: all_running(api, world.client, lease, placed), what="the job running on both nodes")
        await eventually(lambda: settled_count(pool, placed[0]), what="a first settlement")
        await eventually(lambda: checkpointed(pool, lease, 0), what="rank 0's checkpoint")  # what the spare resumes

        # A worker dies mid-lease: no goodbye, no more heartbeats.
        victim, spare = placed[0], next(k for k in world.node_keys() if k not in placed)
        workers[victim].send_signal(signal.SIGKILL)
        resumed = await eventually(
            lambda: resumed_on(api, world.client, lease, spare), timeout=90, what="the job resumed on the spare"
        )
        assert int(resumed.split()[-1]) > 0  # from its checkpoint, not from scratch
        account = await fetch(chain, lease, "Lease")
        assert {str(a.node_key) for a in list(account.assignments)[: account.node_count]} == {placed[1], spare}
        assert (await fetch(chain, node_pda(Pubkey.from_string(victim)), "Node")).jailed
        # The gateway's keepalive pings (every 5 s) give the scheduler each live worker's latency.
        await eventually(
            lambda: truly(coordinator.shared.scheduler.nodes[Pubkey.from_string(spare)].latency_ms is not None),
            what="the spare's measured latency",
        )
        async with pool.acquire() as conn:
            fault = await conn.fetchrow("SELECT * FROM faults WHERE node_key = $1", victim)
        assert fault["kind"] == "MissedHeartbeats" and fault["slash_signature"]

        # The coordinator closes the lease after its end, once the last periods are settled.
        await eventually(lambda: closed(chain, lease), timeout=120, what="the lease closed by the coordinator")

    for proc in workers.values():
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)

    final = await fetch(chain, lease, "Lease")
    assert final.deposited == final.paid + final.fees + final.refunded  # conservation, to the base unit
    assert (await chain.get_account_info(lease_vault_pda(lease))).value is None  # the vault is closed, empty

    # Each settlement paid exactly its receipt's increment at the node's price, and no receipt twice:
    # each share's receipts only grow, and the sum of a share's increments is its newest receipt.
    settled = await settlement_events(chain, lease)
    assert len({(e.node, e.epoch, e.receipt_gpu_seconds) for e in settled}) == len(settled)
    assert all(e.payout + e.fee == e.gpu_seconds * PRICE // 3600 for e in settled)
    for share in {(e.node, e.epoch) for e in settled}:
        mine = [e for e in settled if (e.node, e.epoch) == share]
        assert [e.receipt_gpu_seconds for e in mine] == sorted(e.receipt_gpu_seconds for e in mine)
        assert sum(e.gpu_seconds for e in mine) <= mine[-1].receipt_gpu_seconds
    assert sum(e.payout for e in settled) == final.paid and sum(e.fee for e in settled) == final.fees
    paid_nodes = {str(e.node) for e in settled}
    assert str(node_pda(Pubkey.from_string(spare))) in paid_nodes  # the spare was paid for its part
    report = await audit_lease(chain, lease)
    assert report.ok, report.differences()
