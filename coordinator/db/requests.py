"""Signed API requests already answered (migration 0016): the replay guard every replica shares."""

from __future__ import annotations

from coordinator.db.connection import Connection

__all__ = ["first_use"]


async def first_use(conn: Connection, signature: str, signed_at: float, window_seconds: float) -> bool:
    """Records `signature` as used; False when any replica recorded it before. Signatures older than
    the window are dropped first (a request that old is refused as stale without looking here)."""
    await conn.execute(
        "DELETE FROM request_signatures WHERE signed_at < now() - make_interval(secs => $1)", 2 * window_seconds
    )
    recorded = await conn.fetchval(
        """INSERT INTO request_signatures (signature, signed_at) VALUES ($1, to_timestamp($2))
           ON CONFLICT (signature) DO NOTHING RETURNING signature""",
        signature,
        signed_at,
    )
    return recorded is not None
