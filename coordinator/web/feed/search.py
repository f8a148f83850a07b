"""Search (/web/search?q=): an address or a transaction signature, told apart by its length once
decoded from base58 (32 bytes, 64 bytes), then looked up in the ledger. One page to go to: a redirect
there; several: a list; none: "nothing found" (404); not base58, or another length: a 400 that says
which."""

from __future__ import annotations

from dataclasses import dataclass

from coordinator.db import feed as ledger
from coordinator.db.connection import Connection

__all__ = ["BadQuery", "Match", "base58_bytes", "search"]

_ALPHABET = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
_DIGIT = {c: i for i, c in enumerate(_ALPHABET)}
MAX_QUERY = 100  # a signature is at most 88 characters

# What each kind of match is, and the page it links: a node found by its node key goes to its
# node account's page, a wallet to its provider's page or its leases.
_KINDS = {
    "lease": ("lease", "leases"),
    "client": ("lease of this client", "leases"),
    "node": ("node", "nodes"),
    "node_key": ("node (by its node key)", "nodes"),
    "provider": ("provider", "providers"),
    "authority": ("provider of this wallet", "providers"),
}


class BadQuery(ValueError):
    """Not an address or a signature; the message says why."""


@dataclass(frozen=True)
class Match:
    what: str
    key: str
    url: str


def base58_bytes(text: str) -> bytes:
    """`text` decoded from base58 (BadQuery naming the first character outside its alphabet)."""
    number = 0
    for c in text:
        if c not in _DIGIT:
            raise BadQuery(f"{text[:MAX_QUERY]!r} is not base58: {c!r} is not in its alphabet (no 0, O, I or l)")
        number = number * 58 + _DIGIT[c]
    zeros = len(text) - len(text.lstrip("1"))  # each leading "1" is a zero byte
    return b"\0" * zeros + number.to_bytes((number.bit_length() + 7) // 8, "big")


async def search(conn: Connection, q: str) -> list[Match]:
    """What `q` names in the ledger (BadQuery if it is neither an address nor a signature)."""
    q = q.strip()
    if not q:
        raise BadQuery("type an address (a lease, node, node key, provider or wallet) or a transaction signature")
    if len(q) > MAX_QUERY:
        raise BadQuery(f"{len(q)} characters is too long for an address (44 at most) or a signature (88 at most)")
    size = len(base58_bytes(q))
    if size == 64:
        found = await ledger.transaction(conn, q)
        return [Match("transaction", q, f"/web/tx/{q}")] if found else []
    if size != 32:
        raise BadQuery(f"{q!r} decodes to {size} bytes: an address is 32 bytes, a transaction signature 64")
    matches = []
    for kind, key in await ledger.matches(conn, q):
        what, section = _KINDS[kind]
        matches.append(Match(what, key, f"/web/{section}/{key}"))
    return matches
