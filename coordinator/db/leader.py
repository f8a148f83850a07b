"""The leader row and the decisions log (migration 0015): the election's statements and the
fencing check every decision of a leader runs first (coordinator.leader)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from coordinator.db.connection import Connection

__all__ = [
    "Fenced",
    "Leader",
    "acquire",
    "check_term",
    "current",
    "decisions",
    "forget_decisions",
    "record_decision",
    "release",
    "renew",
    "seconds_left",
]


class Fenced(Exception):
    """The term is not current (another replica leads, or the lease expired): the decision is refused."""


@dataclass(frozen=True)
class Leader:
    holder: str
    term: int
    expires_at: datetime
    gateway_url: str
    api_url: str
    live: bool  # not expired by the database's clock


async def current(conn: Connection) -> Leader:
    row = await conn.fetchrow(
        "SELECT holder, term, expires_at, gateway_url, api_url, expires_at > now() AS live FROM leader"
    )
    assert row is not None, "migration 0015 inserts the leader row"
    return Leader(row["holder"], row["term"], row["expires_at"], row["gateway_url"], row["api_url"], row["live"])


async def acquire(conn: Connection, holder: str, ttl_seconds: float, gateway_url: str, api_url: str) -> int | None:
    """Takes the lead if the row has expired (or nobody ever held it); the new term, else None."""
    return await conn.fetchval(
        """UPDATE leader SET holder = $1, term = term + 1, expires_at = now() + make_interval(secs => $2),
                             gateway_url = $3, api_url = $4, since = now()
           WHERE expires_at <= now() RETURNING term""",
        holder,
        ttl_seconds,
        gateway_url,
        api_url,
    )


async def seconds_left(conn: Connection) -> float:
    """Seconds until the current lead expires by the database's clock (<= 0: it has)."""
    return float(await conn.fetchval("SELECT extract(epoch FROM expires_at - now()) FROM leader"))


async def renew(conn: Connection, holder: str, term: int, ttl_seconds: float) -> bool:
    """Extends this holder's lease of `term`; False when it is not its any more (or has expired)."""
    renewed = await conn.fetchval(
        """UPDATE leader SET expires_at = now() + make_interval(secs => $3)
           WHERE holder = $1 AND term = $2 AND expires_at > now() RETURNING term""",
        holder,
        term,
        ttl_seconds,
    )
    return renewed is not None


async def release(conn: Connection, holder: str, term: int) -> None:
    """Ends this holder's lease now (a clean stop): another replica takes over at once."""
    await conn.execute(
        "UPDATE leader SET expires_at = now() WHERE holder = $1 AND term = $2 AND expires_at > now()", holder, term
    )


async def check_term(conn: Connection, holder: str, term: int, idle_seconds: float) -> None:
    """Raises Fenced unless `term` is current, held by `holder` and not expired. Run inside the
    transaction that writes the decision: the row is share-locked until it commits, so the lead
    cannot change hands between this check and the write (a takeover waits for the commit). A
    process paused inside that transaction would hold the lock and so the lead: the server ends
    the transaction (and its session) once it has been idle for `idle_seconds`."""
    await conn.execute(f"SET LOCAL idle_in_transaction_session_timeout = {max(1, int(idle_seconds * 1000))}")
    held = await conn.fetchval(
        "SELECT term FROM leader WHERE holder = $1 AND term = $2 AND expires_at > now() FOR SHARE", holder, term
    )
    if held is None:
        raise Fenced(f"term {term} of {holder} is not the current lead")


async def record_decision(conn: Connection, holder: str, term: int, kind: str, subject: str) -> None:
    """Records a decision about to be sent to the chain (after `check_term`, in its transaction)."""
    await conn.execute(
        "INSERT INTO decisions (term, holder, kind, subject) VALUES ($1, $2, $3, $4)", term, holder, kind, subject
    )


async def decisions(conn: Connection) -> list[tuple[int, str, str, str]]:
    """Every recorded decision, oldest first: (term, holder, kind, subject)."""
    rows = await conn.fetch("SELECT term, holder, kind, subject FROM decisions ORDER BY id")
    return [(r["term"], r["holder"], r["kind"], r["subject"]) for r in rows]


async def forget_decisions(conn: Connection, older_than_seconds: float) -> int:
    """Deletes the decisions recorded more than `older_than_seconds` ago (the log would grow with
    every settlement for good); how many. Fencing needs none of them: only the leader row's term."""
    deleted = await conn.fetchval(
        "WITH gone AS (DELETE FROM decisions WHERE at < clock_timestamp() - make_interval(secs => $1) RETURNING 1) "
        "SELECT count(*) FROM gone",
        older_than_seconds,
    )
    return int(deleted)
