"""Who signed a request of a lease's private routes: the one check behind the client API's signed
requests (gpunet.protocol.request_message) and the relay's tunnel connections."""

from __future__ import annotations

import time
from collections.abc import Mapping

from solders.pubkey import Pubkey
from solders.signature import Signature

from coordinator.api.params import BadRequest, parse_pubkey
from coordinator.db import jobs, requests
from coordinator.db import leases as ledger
from coordinator.db.connection import Connection
from gpunet.protocol import (
    REQUEST_AT_HEADER,
    REQUEST_CLOCK_SKEW_SECONDS,
    REQUEST_NONCE_HEADER,
    REQUEST_SIGNATURE_HEADER,
    REQUEST_WALLET_HEADER,
    request_message,
)

__all__ = ["Refused", "check_signed"]


class Refused(Exception):
    """The request is not signed by whom the route admits: `status` (401, 404) and why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


async def check_signed(
    conn: Connection,
    method: str,
    target: str,
    headers: Mapping[str, str],
    body: bytes,
    lease: str,
    *,
    suppliers: bool,
) -> Pubkey:
    """The wallet that signed this request (method, `target`: path and query as sent, body), fresh
    and never seen, when it is the lease's client (or, with `suppliers`, the supplier of a node the
    lease is on); else Refused (BadRequest for headers that are malformed)."""
    raw_at = headers.get(REQUEST_AT_HEADER)
    raw_wallet = headers.get(REQUEST_WALLET_HEADER)
    raw_signature = headers.get(REQUEST_SIGNATURE_HEADER)
    who = "the lease's client" + (" or a supplier of its nodes" if suppliers else "")
    if raw_at is None or raw_wallet is None or raw_signature is None:
        raise Refused(
            401,
            f"a private route: sign the request as {who}: headers {REQUEST_AT_HEADER} (unix milliseconds), "
            f"{REQUEST_WALLET_HEADER} and {REQUEST_SIGNATURE_HEADER} (over gpunet.protocol.request_message; "
            "the gpunet command and SDK do it)",
        )
    try:
        at_ms = int(raw_at, 10)
    except ValueError:
        raise BadRequest(f"{REQUEST_AT_HEADER}: {raw_at[:40]!r} is not an integer (unix milliseconds)") from None
    wallet = parse_pubkey(REQUEST_WALLET_HEADER, raw_wallet)
    try:
        signature = Signature.from_string(raw_signature)
    except ValueError:
        raise BadRequest(f"{REQUEST_SIGNATURE_HEADER}: not a base58 Ed25519 signature") from None
    nonce = headers.get(REQUEST_NONCE_HEADER, "")[:64]
    message = request_message(method, target, body, at_ms, Pubkey.from_string(wallet), nonce)
    if not signature.verify(Pubkey.from_string(wallet), message):
        raise Refused(401, "the signature is not the wallet's over this request (method, path, body, time)")
    row = await ledger.lease_row(conn, lease)
    if row is None:
        raise Refused(404, f"lease {lease} is not indexed (yet): retry in a moment")
    if wallet != row["client"] and not (suppliers and await jobs.supplies_lease(conn, lease, wallet)):
        raise Refused(401, f"wallet {wallet} is not {who}")
    at = at_ms / 1000
    # The replay guard is in the ledger: a signature answered by one replica is refused by all.
    if abs(time.time() - at) > REQUEST_CLOCK_SKEW_SECONDS or not await requests.first_use(
        conn, str(signature), at, REQUEST_CLOCK_SKEW_SECONDS
    ):
        raise Refused(
            401,
            f"a stale or replayed request (sign a fresh one: {REQUEST_AT_HEADER} within "
            f"{REQUEST_CLOCK_SKEW_SECONDS} s of the coordinator's clock)",
        )
    return Pubkey.from_string(wallet)
