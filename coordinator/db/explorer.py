"""The ledger reads the explorer's pages need beyond coordinator.db's (the read API's): a lease's
events with their ids (chain order, to place each settlement after the config change in force), the
protocol fee's history, a provider's earnings by period, a node's faults."""

from __future__ import annotations

import json
from typing import Any

import asyncpg

from coordinator.db.chain import indexed_events
from coordinator.db.connection import Connection
from gpunet.instructions import TIER_SIMULATED

__all__ = ["earnings_by_period", "events_of", "fee_changes", "node_faults", "settlement_span", "simulated_nodes"]


async def events_of(conn: Connection, column: str, subject: str) -> list[dict[str, Any]]:
    """The events of a lease or provider (`column`), in chain order, with their data decoded."""
    return [{**dict(r), "data": json.loads(r["data"])} for r in await indexed_events(conn, column, subject)]


async def fee_changes(conn: Connection) -> list[tuple[int, int]]:
    """(event id, protocol fee in bps) of the config's initialisation and every update."""
    rows = await conn.fetch(
        "SELECT id, data FROM events WHERE name IN ('ConfigInitialized', 'ConfigUpdated') ORDER BY id"
    )
    return [(r["id"], int(json.loads(r["data"])["params"]["protocol_fee_bps"])) for r in rows]


async def earnings_by_period(conn: Connection, provider: str, period: str) -> list[asyncpg.Record]:
    """A provider's settlements summed by UTC `period` ("day" or "hour"), oldest first: their count,
    GPU-seconds, gross amount, fee and payout (numeric: exact)."""
    if period not in ("day", "hour"):
        raise ValueError(f"no period {period!r}")
    return await conn.fetch(
        """SELECT date_trunc($2, to_timestamp(coalesce(block_time, 0)) AT TIME ZONE 'UTC') AS period,
                  count(*) AS settlements, sum(gpu_seconds) AS gpu_seconds, sum(amount) AS amount,
                  sum(fee) AS fee, sum(payout) AS payout
           FROM settlements WHERE provider = $1 GROUP BY 1 ORDER BY 1""",
        provider,
        period,
    )


async def settlement_span(conn: Connection, provider: str) -> float:
    """Seconds between a provider's first and last settlement (0 with fewer than two)."""
    span = await conn.fetchval(
        "SELECT coalesce(max(block_time) - min(block_time), 0) FROM settlements WHERE provider = $1", provider
    )
    return float(span or 0)


async def node_faults(conn: Connection, node_key: str) -> list[dict[str, Any]]:
    """The faults this coordinator recorded against a node, newest first, each with its evidence and
    the slash transaction it was sent in (None: not slashed, or not yet)."""
    rows = await conn.fetch(
        "SELECT id, lease, kind, evidence, evidence_hash, slash_signature, recorded_at FROM faults"
        " WHERE node_key = $1 ORDER BY id DESC LIMIT 100",
        node_key,
    )
    return [{**dict(r), "evidence": json.loads(r["evidence"])} for r in rows]


async def simulated_nodes(conn: Connection, node_keys: list[str]) -> set[str]:
    """The node keys whose GPUs are simulated: verified on chain at the simulated tier, or whose
    verification records say so (a simulated worker verified at no tier yet)."""
    rows = await conn.fetch(
        """SELECT node_key FROM nodes WHERE node_key = ANY($1::text[]) AND verification_tier = $2
           UNION SELECT node_key FROM verifications WHERE node_key = ANY($1::text[]) AND simulated""",
        node_keys,
        TIER_SIMULATED,
    )
    return {r["node_key"] for r in rows}
