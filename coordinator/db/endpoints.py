"""A lease's served endpoints (migration 0022): the bearer tokens its client issued (by SHA-256;
the token itself is never stored), the names it made public, and its access log, bounded per lease."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import asyncpg

from coordinator.db.connection import Connection

__all__ = [
    "AccessEntry",
    "Token",
    "access_log",
    "create_token",
    "live_tokens",
    "public_names",
    "record_requests",
    "revoke_token",
    "set_public",
    "token_by_hash",
]


@dataclass(frozen=True)
class Token:
    id: str
    lease: str
    label: str
    created_at: datetime
    revoked_at: datetime | None


@dataclass(frozen=True)
class AccessEntry:
    """One request to an endpoint of the lease, as the access log keeps it."""

    lease: str
    at: datetime
    name: str
    method: str
    path: str
    status: int
    bytes_in: int
    bytes_out: int
    ms: int
    node_key: str | None
    token: str | None


def _token(row: asyncpg.Record) -> Token:
    return Token(row["id"], row["lease"], row["label"], row["created_at"], row["revoked_at"])


async def create_token(
    conn: Connection, lease: str, token_id: str, sha256: bytes, label: str, *, max_live: int, keep_revoked: int
) -> Token | None:
    """Records a new token of the lease (by its SHA-256); None, and nothing recorded, when the lease
    holds `max_live` live tokens already. Revoked tokens of the lease beyond the newest `keep_revoked`
    are forgotten (one presented later is then refused as unknown, not as revoked)."""
    row = await conn.fetchrow(
        """INSERT INTO endpoint_tokens (id, lease, sha256, label)
           SELECT $1, $2, $3, $4
           WHERE (SELECT count(*) FROM endpoint_tokens WHERE lease = $2 AND revoked_at IS NULL) < $5
           RETURNING *""",
        token_id,
        lease,
        sha256,
        label,
        max_live,
    )
    await conn.execute(
        """DELETE FROM endpoint_tokens WHERE lease = $1 AND revoked_at IS NOT NULL AND id NOT IN
             (SELECT id FROM endpoint_tokens WHERE lease = $1 AND revoked_at IS NOT NULL
              ORDER BY revoked_at DESC LIMIT $2)""",
        lease,
        keep_revoked,
    )
    return None if row is None else _token(row)


async def revoke_token(conn: Connection, lease: str, token_id: str) -> Token | None:
    """Revokes the lease's token `token_id` (a token revoked before keeps its time); None when the
    lease has no such token."""
    row = await conn.fetchrow(
        """UPDATE endpoint_tokens SET revoked_at = coalesce(revoked_at, clock_timestamp())
           WHERE lease = $1 AND id = $2 RETURNING *""",
        lease,
        token_id,
    )
    return None if row is None else _token(row)


async def token_by_hash(conn: Connection, sha256: bytes) -> Token | None:
    """The token whose SHA-256 this is, of whichever lease, revoked or not (None: never issued)."""
    row = await conn.fetchrow("SELECT * FROM endpoint_tokens WHERE sha256 = $1", sha256)
    return None if row is None else _token(row)


async def live_tokens(conn: Connection, lease: str) -> list[Token]:
    """The lease's tokens not revoked, oldest first."""
    rows = await conn.fetch(
        "SELECT * FROM endpoint_tokens WHERE lease = $1 AND revoked_at IS NULL ORDER BY created_at, id", lease
    )
    return [_token(r) for r in rows]


async def set_public(conn: Connection, lease: str, name: str, public: bool) -> None:
    await conn.execute(
        """INSERT INTO endpoint_access (lease, name, public) VALUES ($1, $2, $3)
           ON CONFLICT (lease, name) DO UPDATE SET public = $3, updated_at = clock_timestamp()""",
        lease,
        name,
        public,
    )


async def public_names(conn: Connection, lease: str) -> set[str]:
    """The names the lease's client made public (whether its current job exposes them or not)."""
    rows = await conn.fetch("SELECT name FROM endpoint_access WHERE lease = $1 AND public", lease)
    return {r["name"] for r in rows}


async def record_requests(conn: Connection, entries: list[AccessEntry], keep: int) -> int:
    """Appends to the leases' access logs, then drops each touched lease's entries beyond its newest
    `keep`; how many were dropped."""
    await conn.executemany(
        """INSERT INTO endpoint_requests
             (lease, at, name, method, path, status, bytes_in, bytes_out, ms, node_key, token)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)""",
        [
            (e.lease, e.at, e.name, e.method, e.path, e.status, e.bytes_in, e.bytes_out, e.ms, e.node_key, e.token)
            for e in entries
        ],
    )
    dropped = 0
    for lease in sorted({e.lease for e in entries}):
        done = await conn.execute(
            """DELETE FROM endpoint_requests WHERE lease = $1 AND id <=
                 (SELECT id FROM endpoint_requests WHERE lease = $1 ORDER BY id DESC OFFSET $2 LIMIT 1)""",
            lease,
            keep,
        )
        dropped += int(done.split()[-1])
    return dropped


async def access_log(
    conn: Connection, lease: str, *, after: int = 0, limit: int = 100, tail: int | None = None
) -> tuple[list[asyncpg.Record], bool]:
    """The lease's access log in order: the entries after id `after` (at most `limit`), or its last
    `tail`; and whether more follow."""
    columns = "id, at, name, method, path, status, bytes_in, bytes_out, ms, node_key, token"
    if tail is not None:
        rows = await conn.fetch(
            f"SELECT * FROM (SELECT {columns} FROM endpoint_requests WHERE lease = $1 ORDER BY id DESC LIMIT $2) t "
            "ORDER BY id",
            lease,
            tail,
        )
        return list(rows), False
    rows = await conn.fetch(
        f"SELECT {columns} FROM endpoint_requests WHERE lease = $1 AND id > $2 ORDER BY id LIMIT $3",
        lease,
        after,
        limit + 1,
    )
    return list(rows[:limit]), len(rows) > limit
