"""The ledger reads of the wallet app (coordinator/web/app): a client's leases and a supplier's nodes
with what each earned and how often it was slashed."""

from __future__ import annotations

import asyncpg

from coordinator.db.connection import Connection

__all__ = ["client_leases", "provider_nodes"]

SHOWN = 100  # a wallet's newest leases, and a provider's nodes, the app lists (the explorer has them all)


async def client_leases(conn: Connection, client: str) -> list[asyncpg.Record]:
    """The client's newest leases (by lease id), at most SHOWN."""
    return await conn.fetch(
        "SELECT lease, lease_id, status, gpu_count, deposited FROM leases WHERE client = $1"
        f" ORDER BY lease_id DESC LIMIT {SHOWN}",
        client,
    )


async def provider_nodes(conn: Connection, provider: str) -> list[asyncpg.Record]:
    """The provider's nodes (at most SHOWN), each with its settled payouts (`earned`) and its slashes
    (`faults`)."""
    return await conn.fetch(
        "SELECT n.node, n.node_key, n.gpu_count, n.jailed, "
        "(SELECT coalesce(sum(s.payout), 0) FROM settlements s WHERE s.node = n.node) AS earned, "
        "(SELECT count(*) FROM slashes f WHERE f.node = n.node) AS faults "
        f"FROM nodes n WHERE n.provider = $1 ORDER BY n.node LIMIT {SHOWN}",
        provider,
    )
