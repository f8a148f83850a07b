"""How a node is reached (its worker's advertised address and cluster ports) is kept in the ledger
by the replica that admitted its session, so every replica's API can give a Ray lease's head."""

from __future__ import annotations

from solders.keypair import Keypair

from coordinator.db import nodes
from gpunet.protocol import PortRange


async def test_the_last_admitted_session_says_how_a_node_is_reached(pool) -> None:
    moved, old_worker, never = Keypair().pubkey(), Keypair().pubkey(), Keypair().pubkey()
    async with pool.acquire() as conn:
        await nodes.record_reach(conn, moved, "10.0.0.5", PortRange(first=29500, last=29599))
        await nodes.record_reach(
            conn, moved, "[2001:db8::7]", PortRange(first=30000, last=30039)
        )  # it came back elsewhere
        await nodes.record_reach(conn, old_worker, "192.0.2.9", None)  # a worker that advertises no ports
        assert await nodes.reach(conn, moved) == ("[2001:db8::7]", PortRange(first=30000, last=30039))
        assert await nodes.reach(conn, old_worker) == ("192.0.2.9", None)
        assert await nodes.reach(conn, never) is None
