"""A supplier's announced maintenance with real processes (gpunet-localnet, embedded PostgreSQL, the
coordinator, three workers): a drained node's share moves to the spare node with no slash and no
fault, everything it delivered is settled, the job resumes on the new node from its checkpoint,
the other node of the lease (the control) keeps its share, and a drained node gets no new lease
until its supplier undrains it."""

from __future__ import annotations

import sys
import time

import pytest
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from coordinator.settings import Settings
from gpunet import instructions as ix
from gpunet.accounts import fetch
from gpunet.client import send_and_confirm
from gpunet.jobs import job_view
from gpunet.pda import lease_pda, node_pda, provider_pda
from gpunet.protocol import JobSpec

from .conftest import eventually
from .world import (
    JOB,
    PRICE,
    World,
    all_running,
    live_settings,
    placed_view,
    resumed_on,
    running,
    settled_count,
    settlement_events,
    start_workers,
    submitted,
)


@pytest.fixture
async def chain(node):
    async with AsyncClient(node.url, commitment=Confirmed) as client:
        yield client


def _settings(node, database_url: str) -> Settings:
    return live_settings(
        node,
        database_url,
        lost_after_seconds=3.0,
        settle_seconds=1,
        settle_interval_seconds=0,  # every receipt as it comes (production: hourly)
        settle_min_amount=0,
        close_grace_seconds=4,
        reconnect_grace_seconds=2,
    )


async def _open(world: World, chain: AsyncClient, lease_id: int, gpus: int, seconds: int) -> Pubkey:
    await send_and_confirm(
        chain,
        world.client,
        [
            ix.open_lease(
                world.client.pubkey(),
                world.client_tokens,
                world.mint,
                lease_id,
                ix.LeaseTerms(1, 80, gpus, 0, 2 * PRICE, seconds),
            )
        ],
    )
    return lease_pda(world.client.pubkey(), lease_id)


async def _nodes_of(chain: AsyncClient, lease: Pubkey) -> list[str]:
    account = await fetch(chain, lease, "Lease")
    return [str(a.node_key) for a in list(account.assignments)[: account.node_count]]


async def _set_draining(chain: AsyncClient, world: World, node_key: str, draining: bool) -> None:
    wallet = next(w for w, k in world.suppliers if str(k.pubkey()) == node_key)
    await send_and_confirm(
        chain, wallet, [ix.set_node_draining(wallet.pubkey(), Pubkey.from_string(node_key), draining)]
    )


async def _moved(chain: AsyncClient, lease: Pubkey, gone: str, to: str) -> bool:
    nodes = await _nodes_of(chain, lease)
    return gone not in nodes and to in nodes


@pytest.mark.timeout(300)
async def test_a_drained_node_s_share_moves_without_a_slash_and_it_gets_no_new_lease(
    node, chain, pool, database_url, tmp_path, spawned
) -> None:
    world = await World().build(chain, tmp_path)
    settings = _settings(node, database_url)
    api = f"http://127.0.0.1:{settings.api_port}"
    async with running(settings, pool, world.admin) as coordinator:
        await start_workers(world, coordinator, tmp_path, spawned)
        lease = await _open(world, chain, 1, 4, 180)
        spec = JobSpec(command=[sys.executable, JOB], env={"STEPS": "100000", "STEP_SECONDS": "0.2"})
        await eventually(lambda: submitted(api, world.client, lease, spec), what="the job accepted")
        placed = (await eventually(lambda: placed_view(api, world.client, lease), what="the lease placed"))[
            "placement"
        ]["nodes"]
        await eventually(lambda: all_running(api, world.client, lease, placed), what="the job running on both nodes")
        drained, control = placed
        [spare] = [k for k in world.node_keys() if k not in placed]
        await eventually(lambda: settled_count(pool, drained), what="a first settlement of the node to drain")

        announced = int(time.time())
        await _set_draining(chain, world, drained, True)
        await eventually(lambda: _moved(chain, lease, drained, spare), timeout=90, what="the share moved to the spare")

        # Nobody is slashed or jailed, no fault is recorded, and the control keeps its share.
        for wallet, _ in world.suppliers:
            assert (await fetch(chain, provider_pda(wallet.pubkey()), "Provider")).slashed == 0
        async with pool.acquire() as conn:
            assert await conn.fetchval("SELECT count(*) FROM faults") == 0
        drained_node = await fetch(chain, node_pda(Pubkey.from_string(drained)), "Node")
        assert (drained_node.jailed, drained_node.draining, drained_node.gpus_leased) == (False, True, 0)
        assert control in await _nodes_of(chain, lease)

        # Everything the drained node delivered was settled before the move, up to its release
        # (after the drain was announced), and nothing of it was refused or left pending.
        async with pool.acquire() as conn:
            reports = await conn.fetch("SELECT status, through FROM usage_receipts WHERE node_key = $1", drained)
        # (already_settled: two settlement passes sent it at once and the chain paid it once)
        assert reports and {r["status"] for r in reports} <= {"settled", "already_settled"}, [dict(r) for r in reports]
        last_reported = max(r["through"] for r in reports)
        assert last_reported >= announced
        drained_pda = node_pda(Pubkey.from_string(drained))
        paid_until = max(e.through for e in await settlement_events(chain, lease) if e.node == drained_pda)
        assert paid_until == last_reported, "the chain paid the drained node up to its last receipt"

        # The job resumes on the new node from the checkpoint, and the reason says what happened.
        assert await eventually(
            lambda: resumed_on(api, world.client, lease, spare), timeout=60, what="the job resumed on the spare"
        )
        reason = (await job_view(api, world.client, lease))["placement"]["reason"]
        assert f"node {drained} drained" in reason and "no slash" in reason and spare in reason
        await eventually(lambda: settled_count(pool, spare), what="the new node billed")

        # A drained node gets no new lease (the only node with free GPUs is the drained one)...
        second = await _open(world, chain, 2, 2, 60)
        await eventually(lambda: submitted(api, world.client, second, spec), what="the second job accepted")
        waiting = await eventually(
            lambda: _reason_mentions(api, world.client, second, "1 draining"),
            timeout=30,
            what="the second lease waiting, a draining node counted",
        )
        assert waiting["placement"]["state"] == "waiting"
        assert await _nodes_of(chain, second) == []
        # ...and once its supplier undrains it (the control), it takes the lease.
        await _set_draining(chain, world, drained, False)
        placed2 = (await eventually(lambda: placed_view(api, world.client, second), what="the second lease placed"))[
            "placement"
        ]
        assert placed2["nodes"] == [drained]
        assert await _nodes_of(chain, second) == [drained]


async def _reason_mentions(api: str, client: Keypair, lease: Pubkey, text: str):
    view = await job_view(api, client, lease)
    return view if view["placement"] and text in view["placement"]["reason"] else None


@pytest.mark.timeout(300)
async def test_without_a_spare_node_a_drained_share_stays_and_the_lease_goes_on(
    node, chain, pool, database_url, tmp_path, spawned
) -> None:
    world = await World().build(chain, tmp_path)
    settings = _settings(node, database_url)
    api = f"http://127.0.0.1:{settings.api_port}"
    async with running(settings, pool, world.admin) as coordinator:
        await start_workers(world, coordinator, tmp_path, spawned)
        spec = JobSpec(command=[sys.executable, JOB], env={"STEPS": "100000", "STEP_SECONDS": "0.2"})
        lease = await _open(world, chain, 1, 4, 180)
        await eventually(lambda: submitted(api, world.client, lease, spec), what="the job accepted")
        placed = (await eventually(lambda: placed_view(api, world.client, lease), what="the lease placed"))[
            "placement"
        ]["nodes"]
        other = await _open(world, chain, 2, 2, 180)  # takes the third node: no spare is left
        await eventually(lambda: submitted(api, world.client, other, spec), what="the other job accepted")
        [third] = (await eventually(lambda: placed_view(api, world.client, other), what="the other lease placed"))[
            "placement"
        ]["nodes"]
        await eventually(lambda: all_running(api, world.client, lease, placed), what="the job running on both nodes")
        drained = placed[0]

        await _set_draining(chain, world, drained, True)
        view = await eventually(
            lambda: _reason_mentions(api, world.client, lease, "its share stays there"),
            timeout=30,
            what="the reason saying the share stays",
        )
        assert f"node {drained} is draining" in view["placement"]["reason"]
        before = await settled_count(pool, drained)
        await eventually(lambda: _more(settled_count(pool, drained), before), what="the drained node still billed")
        assert await _nodes_of(chain, lease) == placed
        assert await all_running(api, world.client, lease, placed), "the job was not stopped on the drained node"

        # The control: once a spare frees up (the other lease closes), the share moves, unslashed.
        await world.market.close_lease(world.lessee, other)
        await eventually(
            lambda: _moved(chain, lease, drained, third), timeout=90, what="the share moved once a spare freed"
        )
        for wallet, _ in world.suppliers:
            assert (await fetch(chain, provider_pda(wallet.pubkey()), "Provider")).slashed == 0
        async with pool.acquire() as conn:
            assert await conn.fetchval("SELECT count(*) FROM faults") == 0


async def _more(count, before: int) -> bool:
    return await count > before
