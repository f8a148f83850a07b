"""The dispatch loop's rules, on a real chain and database (the gateway's send side replaced: a fake
at that boundary only): a lease whose stored job fails this coordinator's rules (accepted under
older ones: here a Ray job without its token) is said once and skipped, and every other lease's
job is dispatched all the same (the control); its client can still submit the next job. A share its
node refused in an earlier term (the fault is in the ledger) is not given to that node by a new
term's dispatch, and is queued to move; another lease's share is dispatched (the control)."""

from __future__ import annotations

from typing import Any

from solders.pubkey import Pubkey

from coordinator.attester import evidence_hash
from coordinator.db import jobs, nodes
from coordinator.service import Coordinator
from coordinator.settings import Settings
from gpunet.protocol import Dispatch, JobSpec
from gpunet.testbed import Client, Market, Supplier

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


async def _two_leases(market: Market) -> tuple[Client, tuple[Supplier, Pubkey], tuple[Supplier, Pubkey]]:
    """A client's two 1-GPU leases (ids 1 and 2), each assigned to a 1-GPU node of its own: (node, lease)."""
    first_node, second_node = await market.supplier(1), await market.supplier(1)
    client = await market.client()
    first, second = await market.open_lease(client, 1, gpus=1), await market.open_lease(client, 2, gpus=1)
    await market.assign(first, [(first_node, 1)])
    await market.assign(second, [(second_node, 1)])
    return client, (first_node, first), (second_node, second)


async def test_a_job_stored_under_older_rules_stops_no_other_lease_s_dispatch(node, chain, database_url, pool) -> None:
    market = await Market.create(chain)
    client, (_, stale), (fresh_node, fresh) = await _two_leases(market)
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


async def test_a_share_refused_in_an_earlier_term_is_not_given_to_its_node_again(
    node, chain, database_url, pool
) -> None:
    market = await Market.create(chain)
    client, (refusing, refused), (other, control) = await _two_leases(market)
    settings = Settings(rpc_url=node.url, ws_url=node.ws_url, database_url=database_url)
    # The previous term recorded the refusal (as `Verification.refused_dispatch` does), then ended.
    key = refusing.node_key.pubkey()
    evidence = {"fault": "FailedVerification", "node_key": str(key), "reason": f"refused its share of lease {refused}"}
    async with pool.acquire() as conn:
        await nodes.record_fault(conn, key, str(refused), "FailedVerification", evidence, evidence_hash(evidence))
    coordinator = await leading_without_loops(Coordinator(settings, pool, market.admin))  # a new term
    link = _Link()
    coordinator.dispatch.link = link
    try:
        await coordinator.indexer.backfill()
        async with pool.acquire() as conn:
            wallet = str(client.wallet.pubkey())
            for lease in (refused, control):
                assert await jobs.save_job(conn, str(lease), 1, JobSpec(command=["true"]), None, wallet, "x")
        for _ in range(2):
            await coordinator.dispatch.step()
        sent = [(k, m.lease) for k, m in link.sent if isinstance(m, Dispatch)]
        assert sent == [(other.node_key.pubkey(), str(control))]  # the control went; the refused share did not
        assert coordinator.shared.failovers == {str(refused): {key}}  # and it moves
    finally:
        await coordinator.chain.close()
        await coordinator.indexer.rpc.close()
