"""The check every private client route makes: a request signed (gpunet.protocol.request_message,
headers X-Gpunet-Time-Ms, X-Gpunet-Wallet, X-Gpunet-Nonce, X-Gpunet-Signature; within 60 s and used
once, on any replica) by the lease's client, or, where a route lets them read, by the supplier of a
node the lease is on. The job routes (coordinator.api.work) and the endpoint routes
(coordinator.endpoints) share it."""

from __future__ import annotations

import time

from solders.pubkey import Pubkey
from solders.signature import Signature
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

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

__all__ = ["authorize"]


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


async def authorize(conn: Connection, request: Request, lease: str, body: bytes, *, suppliers: bool) -> Response | None:
    """None when the request is signed (request_message, fresh, never seen) by the lease's client
    (or, with `suppliers`, by the supplier of a node the lease is on); else the 4xx to answer
    (BadRequest for a malformed header)."""
    raw_at = request.headers.get(REQUEST_AT_HEADER)
    raw_wallet = request.headers.get(REQUEST_WALLET_HEADER)
    raw_signature = request.headers.get(REQUEST_SIGNATURE_HEADER)
    who = "the lease's client" + (" or a supplier of its nodes" if suppliers else "")
    if raw_at is None or raw_wallet is None or raw_signature is None:
        return _error(
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
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    nonce = request.headers.get(REQUEST_NONCE_HEADER, "")[:64]
    message = request_message(request.method, target, body, at_ms, Pubkey.from_string(wallet), nonce)
    if not signature.verify(Pubkey.from_string(wallet), message):
        return _error(401, "the signature is not the wallet's over this request (method, path, body, time)")
    row = await ledger.lease_row(conn, lease)
    if row is None:
        return _error(404, f"lease {lease} is not indexed (yet): retry in a moment")
    if wallet != row["client"] and not (suppliers and await jobs.supplies_lease(conn, lease, wallet)):
        return _error(401, f"wallet {wallet} is not {who}")
    at = at_ms / 1000
    # The replay guard is in the ledger: a signature answered by one replica is refused by all.
    if abs(time.time() - at) > REQUEST_CLOCK_SKEW_SECONDS or not await requests.first_use(
        conn, str(signature), at, REQUEST_CLOCK_SKEW_SECONDS
    ):
        return _error(
            401,
            f"a stale or replayed request (sign a fresh one: {REQUEST_AT_HEADER} within "
            f"{REQUEST_CLOCK_SKEW_SECONDS} s of the coordinator's clock)",
        )
    return None
