"""The dispatch loop's rules, on a real chain and database (the gateway's send side replaced: a fake
at that boundary only): a lease whose stored job fails this coordinator's rules (accepted under
older ones: here a Ray job without its token) is said once and skipped, and every other lease's
job is dispatched all the same (the control); its client can still submit the next job."""

from __future__ import annotations

from typing import Any

from solders.pubkey import Pubkey

from coordinator.db import jobs
from coordinator.service import Coordinator
from coordinator.settings import Settings
from gpunet.protocol import Dispatch, JobSpec
from gpunet.testbed import Market

from .conftest import leading_without_loops


class _Link:
    """The gateway's send side: every node online, each message kept."""

    def __init__(self) -> None:
        self.sent: list[tuple[Pubkey, Any]] = []

    def online(self, node_key: Pubkey) -> bool:
        return True

    def host(self, node_key: Pubkey) -> str:
        return "127.0.0.1"

    def cluster_ports(self, node_key: Pubkey) -> None:
        return None

    def latency_ms(self, node_key: Pubkey) -> float | None:
        return None

    async def send(self, node_key: Pubkey, message: Any) -> None:
        self.sent.append((node_key, message))


async def test_a_job_stored_under_older_rules_stops_no_other_lease_s_dispatch(node, chain, database_url, pool) -> None:
    market = await Market.create(chain)
    stale_node, fresh_node = await market.supplier(1), await market.supplier(1)
    client = await market.client()
    stale, fresh = await market.open_lease(client, 1, gpus=1), await market.open_lease(client, 2, gpus=1)
    await market.assign(stale, [(stale_node, 1)])
    await market.assign(fresh, [(fresh_node, 1)])
    settings = Settings(rpc_url=node.url, ws_url=node.ws_url, database_url=database_url)
    coordinator = await leading_without_loops(Coordinator(settings, pool, market.admin))
    link = _Link()
    coordinator.dispatch.link = link
    try:
        await coordinator.indexer.backfill()  # the leases and their shares, as the ledger has them
        async with pool.acquire() as conn:
            wallet = str(client.wallet.pubkey())
            await conn.execute(  # a Ray job from before Ray jobs named their token (refused today)
                "INSERT INTO jobs (lease, number, spec, gpus_per_node, client, signature) "
                "VALUES ($1, 1, $2, NULL, $3, 'x')",
                str(stale), '{"command": [], "ray": true}', wallet,
            )  # fmt: skip
            assert await jobs.save_job(conn, str(fresh), 1, JobSpec(command=["true"]), None, wallet, "x")
        for _ in range(2):
            await coordinator.dispatch.step()
        sent = [(key, m.lease) for key, m in link.sent if isinstance(m, Dispatch)]
        assert sent == [(fresh_node.node_key.pubkey(), str(fresh))]  # the control went, the stale one did not
        assert {lease for lease, _ in coordinator.dispatch.unreadable} == {str(stale)}  # said once
        async with pool.acquire() as conn:
            assert await jobs.current_job_number(conn, str(stale)) == 1  # the client's next job is job 2
    finally:
        await coordinator.chain.close()
        await coordinator.indexer.rpc.close()
