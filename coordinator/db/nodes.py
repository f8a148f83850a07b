"""Nodes as the scheduler sees them (the indexer's projection of nodes and providers, with each
node's reliability history from the ledger) and the faults the coordinator found (migration 0002)."""

from __future__ import annotations

import json
from typing import Any

import asyncpg

from coordinator.db.connection import Connection
from coordinator.keys import NodeKey
from gpunet.protocol import PortRange

__all__ = [
    "direct_tunnel",
    "is_draining",
    "is_registered",
    "reach",
    "record_fault",
    "record_reach",
    "registered_nodes",
    "set_slash_signature",
    "slash_evidence",
]


async def registered_nodes(conn: Connection) -> list[asyncpg.Record]:
    """Every registered node with its provider's stake, and its history from the ledger (so a restart
    does not forget it): faults recorded against it, and ended leases it held to the end."""
    return await conn.fetch(
        """SELECT n.*, p.authority, p.staked, p.bonded,
                  (SELECT count(*) FROM faults f WHERE f.node_key = n.node_key) AS failed,
                  (SELECT count(*) FROM placements pl WHERE pl.state = 'ended' AND n.node_key = ANY(pl.nodes))
                    AS completed
           FROM nodes n JOIN providers p USING (provider) WHERE n.registered"""
    )


async def is_draining(conn: Connection, node_key: NodeKey) -> bool:
    return bool(await conn.fetchval("SELECT draining FROM nodes WHERE node_key = $1", str(node_key)))


async def record_fault(
    conn: Connection,
    node_key: NodeKey,
    lease: str | None,
    kind: str,
    evidence: dict[str, Any],
    evidence_hash: bytes,
) -> int:
    return await conn.fetchval(
        "INSERT INTO faults (node_key, lease, kind, evidence, evidence_hash) VALUES ($1, $2, $3, $4, $5) RETURNING id",
        str(node_key),
        lease,
        kind,
        json.dumps(evidence, sort_keys=True),
        evidence_hash.hex(),
    )


async def set_slash_signature(conn: Connection, fault: int, signature: str | None) -> None:
    await conn.execute("UPDATE faults SET slash_signature = $2 WHERE id = $1", fault, signature)


async def slash_evidence(conn: Connection, signature: str) -> list[dict[str, Any]]:
    """The slashes of one transaction (from the ledger), each with the evidence this coordinator
    recorded for it (None when it has none: another coordinator's slash, or one it did not record),
    found by the evidence's hash, else by the transaction it was sent in."""
    rows = await conn.fetch(
        """SELECT s.event_index, s.provider, s.node, s.attester, s.fault, s.evidence_hash, s.lease, s.slot,
                  f.evidence, f.node_key
           FROM slashes s
           LEFT JOIN LATERAL (
               SELECT evidence, node_key FROM faults f
               WHERE f.evidence_hash = s.evidence_hash OR f.slash_signature = s.signature
               ORDER BY (f.evidence_hash = s.evidence_hash) DESC, f.id
               LIMIT 1
           ) f ON true
           WHERE s.signature = $1
           ORDER BY s.event_index""",
        signature,
    )
    return [{**dict(r), "evidence": json.loads(r["evidence"]) if r["evidence"] is not None else None} for r in rows]


async def record_reach(
    conn: Connection, node_key: NodeKey, host: str, ports: PortRange | None, tunnel_port: int | None = None
) -> None:
    """What the node's worker advertised in the hello of the session just admitted (migrations 0017, 0021)."""
    await conn.execute(
        """INSERT INTO node_reach (node_key, host, ports_first, ports_last, tunnel_port) VALUES ($1, $2, $3, $4, $5)
           ON CONFLICT (node_key) DO UPDATE SET host = $2, ports_first = $3, ports_last = $4, tunnel_port = $5,
                                                 updated_at = clock_timestamp()""",
        str(node_key),
        host,
        ports.first if ports else None,
        ports.last if ports else None,
        tunnel_port,
    )


async def direct_tunnel(conn: Connection, node_key: NodeKey) -> str | None:
    """Where clients reach the node's data plane directly ("host:port"; None: through the relay only)."""
    row = await conn.fetchrow("SELECT host, tunnel_port FROM node_reach WHERE node_key = $1", str(node_key))
    return None if row is None or row["tunnel_port"] is None else f"{row['host']}:{row['tunnel_port']}"


async def is_registered(conn: Connection, node_key: NodeKey) -> bool:
    return bool(await conn.fetchval("SELECT registered FROM nodes WHERE node_key = $1", str(node_key)))


async def reach(conn: Connection, node_key: NodeKey) -> tuple[str, PortRange | None] | None:
    """The node's host and cluster ports as its last admitted session advertised them (None: never seen)."""
    row = await conn.fetchrow("SELECT host, ports_first, ports_last FROM node_reach WHERE node_key = $1", str(node_key))
    if row is None:
        return None
    ports = PortRange(first=row["ports_first"], last=row["ports_last"]) if row["ports_first"] is not None else None
    return row["host"], ports
