"""The serving side of endpoints (see coordinator.endpoints): what a request to
/endpoints/{lease}/{name}/... goes through (access, limits, the node, HTTP/1.1 over the relay), the
health checks, and the access log's writer. All state here is this replica's memory; what must be
shared (tokens, public names, the log) is in the ledger (coordinator.db.endpoints)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import math
import re
import secrets
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol
from urllib.parse import quote

import asyncpg
import h11
from solders.pubkey import Pubkey
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from coordinator.db import endpoints as rows
from coordinator.db import jobs
from coordinator.db import leases as ledger
from coordinator.db.jobs import UnreadableJob
from coordinator.metrics import Metrics
from coordinator.settings import Settings
from gpunet.logs import get_logger
from gpunet.protocol import Expose
from gpunet.tunnel import TunnelError

__all__ = ["NAME", "TOKEN", "Channel", "EndpointRelay", "Endpoints", "Serving", "new_token", "token_hash"]

log = get_logger("gpunet.coordinator.endpoints")

NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$")  # as gpunet.protocol.Expose names them
TOKEN_PREFIX = "gpe_"
TOKEN = re.compile(r"^gpe_[A-Za-z0-9_-]{43}$")  # the prefix, then 32 random bytes in unpadded base64url
CACHE_SECONDS = 1.0  # a lease's serving state and a token's row are read again after this long
SERVED_SECONDS = 600.0  # an endpoint requested within this long is health-checked
CONNECT_SECONDS = 5.0  # the most a stream to a node may take to open (then the next node is tried)
LOG_BATCH = 1000  # access log entries written per transaction
LOG_PENDING = 20_000  # entries waiting to be written at most (beyond: dropped, counted)
PATH_CHARS = 512  # of a request's path, the access log keeps this many characters
CHECKS_AT_ONCE = 32
# A channel whose answer ended cleanly is kept for the next request to the same node (HTTP/1.1
# keep-alive to the job): a new one costs a stream and a TLS handshake (about 5 ms of a 13 ms request
# on loopback). Kept at most this long idle (under the usual servers' keep-alive timeouts of 5 s, so
# that a job seldom closes one first) and this many per endpoint and node.
IDLE_SECONDS = 4.0
IDLE_PER_NODE = 8
# Headers that name one hop, never forwarded either way (RFC 9110 7.6.1), and the ones the relay sets.
HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
SET_BY_RELAY = frozenset(
    {"content-length", "expect", "x-forwarded-for", "x-forwarded-proto", "x-forwarded-host", "x-forwarded-prefix"}
)
SANDBOX = "sandbox allow-scripts allow-forms allow-popups allow-downloads allow-modals"


class Channel(Protocol):
    """A byte pipe to the job's port (gpunet.tunnel.SecureChannel's plaintext side)."""

    async def send(self, data: bytes) -> None: ...
    async def recv(self) -> bytes | None: ...
    async def close(self) -> None: ...


class EndpointRelay(Protocol):
    """What the endpoints use of the relay (coordinator.relay.Relay)."""

    async def open_endpoint(self, lease: str, node_key: Pubkey, name: str) -> Channel: ...
    def linked(self, node_key: Pubkey) -> bool: ...


def new_token() -> tuple[str, str, bytes]:
    """A fresh token: (its id, the token, its SHA-256). The id names it in lists and the log."""
    token = TOKEN_PREFIX + base64.urlsafe_b64encode(secrets.token_bytes(32)).rstrip(b"=").decode()
    return secrets.token_hex(8), token, token_hash(token)


def token_hash(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


@dataclass(frozen=True)
class Serving:
    """What a lease's endpoints are, as the ledger says (read again after CACHE_SECONDS)."""

    status: str | None  # None: the lease is not indexed
    exposes: dict[str, Expose]  # the current job's, by name ({}: no job)
    job_number: int | None
    public: frozenset[str]
    nodes: tuple[Pubkey, ...]  # the active shares' node keys, by rank
    unreadable: str | None = None  # the current job's spec fails today's rules (why)


@dataclass
class Health:
    healthy: bool
    at: float  # unix time
    reason: str = ""


@dataclass
class _Bucket:
    tokens: float
    at: float


@dataclass
class _Exchange:
    """One request's way through the relay: what the access log and the metrics get at its end."""

    lease: str
    name: str
    method: str
    path: str
    started: float = field(default_factory=time.monotonic)
    at: datetime = field(default_factory=lambda: datetime.now(UTC))
    bytes_in: int = 0
    bytes_out: int = 0
    node: Pubkey | None = None
    token: str | None = None
    logged: bool = True  # False: not the log of any lease (a lease not indexed)


@dataclass
class _Idle:
    channel: Channel
    conn: h11.Connection
    since: float  # monotonic


async def _close(channel: Channel) -> None:
    with contextlib.suppress(Exception):
        await channel.close()


class _Broken(Exception):
    """The answer broke off after it started: the caller's connection is cut (never a clean end)."""


class Endpoints:
    def __init__(self, pool: asyncpg.Pool, settings: Settings, metrics: Metrics, relay: EndpointRelay) -> None:
        self.pool, self.settings, self.metrics, self.relay = pool, settings, metrics, relay
        self._serving: dict[str, tuple[float, Serving]] = {}
        self._tokens: dict[bytes, tuple[float, rows.Token | None]] = {}
        self.health: dict[tuple[str, str, Pubkey], Health] = {}
        self._served: dict[tuple[str, str], float] = {}  # (lease, name) -> last requested (monotonic)
        self._turn: dict[tuple[str, str], int] = {}  # round robin
        self._buckets: dict[str, _Bucket] = {}
        self.streams: dict[str, int] = {}  # lease -> requests in flight
        self._log: list[rows.AccessEntry] = []
        self._log_lock = asyncio.Lock()
        self._idle: dict[tuple[str, str, Pubkey], list[_Idle]] = {}
        self._closing: set[asyncio.Task[None]] = set()

    # --- what the ledger says, cached briefly

    async def serving(self, lease: str) -> Serving:
        now = time.monotonic()
        cached = self._serving.get(lease)
        if cached is not None and now - cached[0] < CACHE_SECONDS:
            return cached[1]
        async with self.pool.acquire() as conn:
            row = await ledger.lease_row(conn, lease)
            if row is None:
                found = Serving(None, {}, None, frozenset(), ())
            else:
                unreadable = None
                try:
                    job = await jobs.current_job(conn, lease)
                except UnreadableJob as e:
                    job, unreadable = None, str(e)
                shares = await ledger.active_shares(conn, lease=lease)
                found = Serving(
                    row["status"],
                    {e.name: e for e in job.spec.expose} if job else {},
                    job.number if job else None,
                    frozenset(await rows.public_names(conn, lease)),
                    tuple(s.node_key for s in shares),
                    unreadable,
                )
        if len(self._serving) > 10_000:
            self._serving.clear()
        self._serving[lease] = (now, found)
        return found

    def forget(self, lease: str) -> None:
        """The lease's serving state is read again at its next request (this replica changed it)."""
        self._serving.pop(lease, None)

    async def token(self, sha256: bytes) -> rows.Token | None:
        now = time.monotonic()
        cached = self._tokens.get(sha256)
        if cached is not None and now - cached[0] < CACHE_SECONDS:
            return cached[1]
        async with self.pool.acquire() as conn:
            found = await rows.token_by_hash(conn, sha256)
        if len(self._tokens) > 10_000:  # unknown tokens are cached too: a guesser's flood stays in memory
            self._tokens.clear()
        self._tokens[sha256] = (now, found)
        return found

    def revoked(self, token_id: str) -> None:
        """A token this replica revoked is refused here at once (other replicas: within CACHE_SECONDS)."""
        for key, (_, token) in list(self._tokens.items()):
            if token is not None and token.id == token_id:
                del self._tokens[key]

    def url(self, lease: str, name: str) -> str:
        return f"{self.settings.endpoints_url}/endpoints/{lease}/{name}/"

    # --- one request

    async def handle(self, request: Request) -> Response:
        """A request to /endpoints/{lease}/{name}/{path} (see coordinator.endpoints for the order of
        the checks)."""
        lease_text, name = request.path_params["lease"], request.path_params["name"]
        exchange = _Exchange(lease_text, name, request.method, request.url.path[:PATH_CHARS], logged=False)
        try:
            lease = str(Pubkey.from_string(lease_text))
        except ValueError:
            return self._done(exchange, _error(400, f"lease: {lease_text[:60]!r} is not a base58 public key"))
        exchange.lease = lease
        declared = request.headers.get("content-length")
        limit = self.settings.endpoint_max_body_bytes
        if declared is not None and not declared.strip().isdigit():
            return self._done(exchange, _error(400, f"Content-Length: {declared[:40]!r} is not a number of bytes"))
        if declared is not None and int(declared) > limit:
            return self._done(exchange, _error(413, f"an endpoint takes a request body of at most {limit} bytes"))
        try:
            serving = await self.serving(lease)
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as e:
            return self._done(
                exchange,
                _error(503, f"the ledger cannot be read now ({type(e).__name__}): retry", {"Retry-After": "5"}),
            )
        if serving.status is None:
            return self._done(exchange, _error(404, f"lease {lease} is not indexed (yet): retry in a moment"))
        exchange.logged = True
        if serving.status in ("closing", "closed"):
            return self._done(
                exchange, _error(410, f"lease {lease} has ended ({serving.status}): its endpoints are gone")
            )
        expose = serving.exposes.get(name)
        public = name in serving.public and expose is not None and expose.protocol == "http"
        if not public:
            try:
                refused = await self._access(request, lease, exchange)
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as e:
                refused = _error(
                    503, f"the ledger cannot be read now ({type(e).__name__}): retry", {"Retry-After": "5"}
                )
            if refused is not None:
                return self._done(exchange, refused)
        if serving.unreadable is not None:
            return self._done(exchange, _error(404, f"lease {lease}'s current {serving.unreadable}"))
        if expose is None:
            http = sorted(n for n, e in serving.exposes.items() if e.protocol == "http")
            which = f"its HTTP endpoints: {', '.join(http)}" if http else "it exposes no HTTP port"
            job = f"job {serving.job_number}" if serving.job_number else "job (it has none yet)"
            return self._done(exchange, _error(404, f"lease {lease}'s {job} exposes no port named {name!r} ({which})"))
        if expose.protocol != "http":
            return self._done(
                exchange,
                _error(
                    404,
                    f"port {name!r} of lease {lease}'s job is exposed as tcp, which is not served over HTTP: "
                    f"reach it with `gpunet lease forward {lease} {name}`",
                ),
            )
        retry = self._retry_after()
        if serving.status != "active" or not serving.nodes:
            return self._done(
                exchange,
                _error(
                    503,
                    f"lease {lease} is not placed on nodes yet: retry in {retry} s",
                    {"Retry-After": str(retry)},
                ),
            )
        wait = self._take(lease)
        if wait > 0:
            seconds = max(1, math.ceil(wait))
            return self._done(
                exchange,
                _error(
                    429,
                    f"lease {lease}'s endpoints take {self.settings.endpoint_requests_per_second:g} requests per "
                    f"second (bursts of {self.settings.endpoint_burst}): retry in {seconds} s",
                    {"Retry-After": str(seconds)},
                ),
            )
        if self.streams.get(lease, 0) >= self.settings.endpoint_max_streams:
            return self._done(
                exchange,
                _error(
                    429,
                    f"lease {lease}'s endpoints have {self.settings.endpoint_max_streams} requests in flight, "
                    "their most at once: retry in 1 s",
                    {"Retry-After": "1"},
                ),
            )
        self._served[(lease, name)] = time.monotonic()
        self.streams[lease] = self.streams.get(lease, 0) + 1
        self.metrics.endpoint_streams.inc()
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self.streams[lease] -= 1
                if not self.streams[lease]:
                    del self.streams[lease]
                self.metrics.endpoint_streams.dec()

        try:
            body = await self._body(request, limit)
            if body is None:
                release()
                return self._done(exchange, _error(413, f"an endpoint takes a request body of at most {limit} bytes"))
            exchange.bytes_in = len(body)
            answer = await self._forward(request, lease, name, serving.nodes, body, exchange, public)
        except BaseException:
            release()
            raise
        if not isinstance(answer, _Relayed):
            release()
            reason = "; ".join(answer) if answer else "none of its nodes has a data-plane link to this replica"
            return self._done(
                exchange,
                _error(
                    503,
                    f"no node of lease {lease} serves {name!r} right now ({reason}; its share may be moving, or "
                    f"the job not listening on port {expose.port}): retry in {retry} s",
                    {"Retry-After": str(retry)},
                ),
            )
        answer.release = release
        return answer

    def _retry_after(self) -> int:
        return max(1, math.ceil(self.settings.endpoint_health_seconds))

    async def _access(self, request: Request, lease: str, exchange: _Exchange) -> Response | None:
        """None when the request carries a live token of the lease; else the refusal (401, 403, 400)."""
        header = request.headers.get("authorization")
        challenge = {"WWW-Authenticate": 'Bearer realm="gpunet endpoint"'}
        if header is None:
            return _error(
                401,
                f"this endpoint of lease {lease} takes a bearer token (Authorization: Bearer <token>) its client "
                f"created: `gpunet lease endpoint token {lease}`",
                challenge,
            )
        scheme, _, value = header.strip().partition(" ")
        value = value.strip()
        if scheme.lower() != "bearer" or not TOKEN.fullmatch(value):
            return _error(
                400,
                "the Authorization header must be 'Bearer gpe_...', a token `gpunet lease endpoint token` created",
            )
        token = await self.token(token_hash(value))
        if token is None:
            return _error(401, "not a token this coordinator issued (or revoked long ago): create one", challenge)
        exchange.token = token.id
        if token.lease != lease:
            return _error(403, f"token {token.id} is not one of lease {lease}'s")
        if token.revoked_at is not None:
            return _error(403, f"token {token.id} was revoked at {token.revoked_at.isoformat()}")
        return None

    def _take(self, lease: str) -> float:
        """Takes one request from the lease's bucket: 0, or how many seconds until one is there."""
        rate, burst = self.settings.endpoint_requests_per_second, float(self.settings.endpoint_burst)
        now = time.monotonic()
        bucket = self._buckets.get(lease)
        if bucket is None:
            bucket = self._buckets[lease] = _Bucket(burst, now)
        bucket.tokens = min(burst, bucket.tokens + (now - bucket.at) * rate)
        bucket.at = now
        if bucket.tokens >= 1:
            bucket.tokens -= 1
            return 0.0
        return (1 - bucket.tokens) / rate

    @staticmethod
    async def _body(request: Request, limit: int) -> bytes | None:
        """The whole request body, or None when it passes `limit` (nothing more is read)."""
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                return None
            chunks.append(chunk)
        return b"".join(chunks)

    def candidates(self, lease: str, name: str, nodes: tuple[Pubkey, ...]) -> list[Pubkey]:
        """The nodes to try, in order: those linked and not marked unhealthy, round robin; then (in
        case a mark is stale) the linked ones marked unhealthy."""
        linked = [n for n in nodes if self.relay.linked(n)]
        good = [n for n in linked if (h := self.health.get((lease, name, n))) is None or h.healthy]
        turn = self._turn.get((lease, name), 0)
        self._turn[(lease, name)] = turn + 1
        if good:
            start = turn % len(good)
            good = good[start:] + good[:start]
        return good + [n for n in linked if n not in good]

    def _mark(self, lease: str, name: str, node: Pubkey, healthy: bool, reason: str = "") -> None:
        before = self.health.get((lease, name, node))
        self.health[(lease, name, node)] = Health(healthy, time.time(), reason)
        if before is None or before.healthy != healthy:
            log.info("endpoint.health", lease=lease, name=name, node_key=node, healthy=healthy, reason=reason or None)

    async def _forward(
        self,
        request: Request,
        lease: str,
        name: str,
        nodes: tuple[Pubkey, ...],
        body: bytes,
        exchange: _Exchange,
        public: bool,
    ) -> _Relayed | list[str]:
        """The job's answer from the first node that gives one (its head read, its body to stream), or
        why each node tried gave none. A kept channel to a node is tried first; one that fails (the
        job closed it meanwhile) is dropped and a fresh one opened, the node not held to blame."""
        why: list[str] = []
        head_of_request = _request_head(request, lease, name, body, public)
        for i, node in enumerate(self.candidates(lease, name, nodes)):
            if i:
                self.metrics.endpoint_retries.inc()
            key = (lease, name, node)
            while (kept := self._checkout(key)) is not None:
                try:
                    head = await self._ask(kept.channel, kept.conn, head_of_request, body)
                except (TunnelError, TimeoutError, OSError, h11.ProtocolError):
                    self._drop(kept.channel)
                    continue
                return self._answered(exchange, key, kept.channel, kept.conn, head)
            try:
                async with asyncio.timeout(CONNECT_SECONDS):
                    channel = await self.relay.open_endpoint(lease, node, name)
            except (TunnelError, TimeoutError, OSError) as e:
                why.append(f"node {node}: no stream: {str(e) or type(e).__name__}")
                self._mark(lease, name, node, False, why[-1])
                continue
            conn = h11.Connection(h11.CLIENT)
            try:
                head = await self._ask(channel, conn, head_of_request, body)
            except (TunnelError, TimeoutError, OSError, h11.ProtocolError) as e:
                self._drop(channel)
                why.append(f"node {node}: no answer: {str(e) or type(e).__name__}")
                self._mark(lease, name, node, False, why[-1])
                continue
            return self._answered(exchange, key, channel, conn, head)
        return why

    async def _ask(self, channel: Channel, conn: h11.Connection, head: h11.Request, body: bytes) -> h11.Response:
        """Sends the request on the channel; the job's response head."""
        wire = conn.send(head) or b""
        if body:
            wire += conn.send(h11.Data(data=body)) or b""
        wire += conn.send(h11.EndOfMessage()) or b""
        async with asyncio.timeout(self.settings.endpoint_timeout_seconds):
            await channel.send(wire)
            return await _head(conn, channel)

    def _answered(
        self,
        exchange: _Exchange,
        key: tuple[str, str, Pubkey],
        channel: Channel,
        conn: h11.Connection,
        head: h11.Response,
    ) -> _Relayed:
        self._mark(*key, True)
        exchange.node = key[2]
        self.metrics.endpoint_latency_seconds.observe(time.monotonic() - exchange.started)
        return _Relayed(self, exchange, key, conn, channel, head)

    # --- channels kept for the next request

    def _checkout(self, key: tuple[str, str, Pubkey]) -> _Idle | None:
        """The newest kept channel to the node, if one is fresh enough (older ones are closed)."""
        kept = self._idle.get(key)
        now = time.monotonic()
        while kept:
            idle = kept.pop()
            if now - idle.since < IDLE_SECONDS:
                if not kept:
                    del self._idle[key]
                return idle
            self._drop(idle.channel)
        self._idle.pop(key, None)
        return None

    def _checkin(self, key: tuple[str, str, Pubkey], channel: Channel, conn: h11.Connection) -> bool:
        """Keeps the channel for the next request when its exchange ended cleanly both ways and the job
        keeps the connection open; False: it is not kept (close it)."""
        if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
            return False
        try:
            conn.start_next_cycle()
        except h11.LocalProtocolError:
            return False
        kept = self._idle.setdefault(key, [])
        kept.append(_Idle(channel, conn, time.monotonic()))
        while len(kept) > IDLE_PER_NODE:
            self._drop(kept.pop(0).channel)
        return True

    def _drop(self, channel: Channel) -> None:
        """Closes a channel in the background (its TLS close and the stream's end)."""
        task = asyncio.get_running_loop().create_task(_close(channel))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        """Closes the kept channels (the coordinator stops)."""
        for kept in self._idle.values():
            for idle in kept:
                self._drop(idle.channel)
        self._idle.clear()
        if self._closing:
            await asyncio.wait(set(self._closing), timeout=5)

    def _prune_idle(self) -> None:
        now = time.monotonic()
        for key, kept in list(self._idle.items()):
            fresh = [k for k in kept if now - k.since < IDLE_SECONDS]
            for stale in kept:
                if stale not in fresh:
                    self._drop(stale.channel)
            if fresh:
                self._idle[key] = fresh
            else:
                del self._idle[key]

    # --- the end of a request: metrics and the access log

    def _done(self, exchange: _Exchange, response: Response) -> Response:
        self._account(exchange, response.status_code)
        return response

    def _account(self, exchange: _Exchange, status: int) -> None:
        self.metrics.endpoint_requests.labels(str(status)).inc()
        self.metrics.endpoint_bytes.labels("in").inc(exchange.bytes_in)
        self.metrics.endpoint_bytes.labels("out").inc(exchange.bytes_out)
        if not exchange.logged:
            return
        if len(self._log) >= LOG_PENDING:
            self.metrics.endpoint_log_dropped.inc()
            return
        self._log.append(
            rows.AccessEntry(
                lease=exchange.lease,
                at=exchange.at,
                name=exchange.name[:64],
                method=exchange.method[:16],
                path=exchange.path,
                status=status,
                bytes_in=exchange.bytes_in,
                bytes_out=exchange.bytes_out,
                ms=round((time.monotonic() - exchange.started) * 1000),
                node_key=None if exchange.node is None else str(exchange.node),
                token=exchange.token,
            )
        )

    async def flush_log(self) -> None:
        """Writes the access log entries waiting (the coordinator runs it every second)."""
        async with self._log_lock:
            while self._log:
                batch, self._log = self._log[:LOG_BATCH], self._log[LOG_BATCH:]
                try:
                    async with self.pool.acquire() as conn, conn.transaction():
                        await rows.record_requests(conn, batch, self.settings.endpoint_log_per_lease)
                except BaseException:
                    self._log = batch + self._log  # written next time (or dropped past LOG_PENDING)
                    if len(self._log) > LOG_PENDING:
                        self.metrics.endpoint_log_dropped.inc(len(self._log) - LOG_PENDING)
                        self._log = self._log[:LOG_PENDING]
                    raise

    # --- health

    async def check_health(self) -> None:
        """Checks every node of each endpoint requested within SERVED_SECONDS (a stream opened to the
        job's port and closed); forgets the others' marks and the idle leases' buckets."""
        self._prune_idle()
        now = time.monotonic()
        for key in [k for k, at in self._served.items() if now - at > SERVED_SECONDS]:
            del self._served[key]
            self._turn.pop(key, None)
        served = set(self._served)
        for mark in [k for k in self.health if (k[0], k[1]) not in served]:
            del self.health[mark]
        rate, burst = self.settings.endpoint_requests_per_second, self.settings.endpoint_burst
        for lease in [k for k, b in self._buckets.items() if b.tokens + (now - b.at) * rate >= burst]:
            del self._buckets[lease]  # full again: as good as a new one
        gate = asyncio.Semaphore(CHECKS_AT_ONCE)

        async def check(lease: str, name: str, node: Pubkey) -> None:
            async with gate:
                if not self.relay.linked(node):
                    self._mark(lease, name, node, False, "its worker has no data-plane link to this replica")
                    return
                try:
                    async with asyncio.timeout(CONNECT_SECONDS):
                        channel = await self.relay.open_endpoint(lease, node, name)
                except (TunnelError, TimeoutError, OSError) as e:
                    self._mark(lease, name, node, False, f"check failed: {str(e) or type(e).__name__}")
                    return
                with contextlib.suppress(Exception):
                    await channel.close()
                self._mark(lease, name, node, True)

        checks = []
        for lease, name in served:
            serving = await self.serving(lease)
            expose = serving.exposes.get(name)
            if serving.status != "active" or expose is None or expose.protocol != "http":
                continue
            for mark in [k for k in self.health if k[:2] == (lease, name) and k[2] not in serving.nodes]:
                del self.health[mark]  # a node the lease moved away from
            checks += [check(lease, name, node) for node in serving.nodes]
        await asyncio.gather(*checks)


def _request_head(request: Request, lease: str, name: str, body: bytes, public: bool) -> h11.Request:
    """The request as the job gets it: the target after /endpoints/{lease}/{name} as sent, the
    headers less hop-by-hop ones and the caller's gpunet token, the relay's X-Forwarded-* and a
    Content-Length."""
    raw = request.scope.get("raw_path") or quote(request.url.path).encode()
    parts = raw.split(b"/", 4)  # b"", b"endpoints", lease, name, the rest
    target = b"/" + (parts[4] if len(parts) > 4 else b"")
    if query := request.scope.get("query_string"):
        target += b"?" + query
    named = {
        t.strip().lower() for k, v in request.headers.items() if k == "connection" for t in v.split(",") if t.strip()
    }
    headers: list[tuple[bytes, bytes]] = []
    for key, value in request.headers.raw:
        lower = key.decode("latin-1").lower()
        if lower in HOP or lower in SET_BY_RELAY or lower in named:
            continue
        if lower == "authorization" and (not public or TOKEN_PREFIX.encode() in value):
            continue  # the caller's gpunet token never reaches the job
        headers.append((key, value))
    client = request.client.host if request.client else ""
    host = request.headers.get("host", "")
    headers += [
        (b"content-length", str(len(body)).encode()),
        (b"x-forwarded-for", client.encode()),
        (b"x-forwarded-proto", request.url.scheme.encode()),
        (b"x-forwarded-host", host.encode("latin-1")),
        (b"x-forwarded-prefix", f"/endpoints/{lease}/{name}".encode()),
    ]
    if not host:
        headers.append((b"host", b"localhost"))
    return h11.Request(method=request.method, target=target, headers=headers)


async def _head(conn: h11.Connection, channel: Channel) -> h11.Response:
    """The job's response head (informational ones skipped); TunnelError when the job closed first."""
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            data = await channel.recv()
            conn.receive_data(data or b"")
            continue
        if isinstance(event, h11.InformationalResponse):
            continue
        if isinstance(event, h11.Response):
            return event
        raise TunnelError(f"the job closed the connection before it answered ({type(event).__name__})")


def _response_headers(head: h11.Response, prefix: str, sandbox: bool) -> list[tuple[bytes, bytes]]:
    """The job's headers as the caller gets them: less hop-by-hop ones; a redirect to a path of the
    job's (Location: /...) and its cookies' paths under the endpoint's prefix (`/endpoints/{lease}/
    {name}`: the leases' endpoints share one origin, and one job's cookies must never reach another's);
    and the sandbox."""
    named = {
        t.strip().lower()
        for k, v in head.headers
        if k == b"connection"
        for t in v.decode("latin-1").split(",")
        if t.strip()
    }
    out = []
    for key, value in head.headers:
        lower = key.decode("latin-1")
        if lower in HOP or lower in named or lower == "date":
            continue
        if lower == "location" and value.startswith(b"/") and not value.startswith(b"//"):
            value = prefix.encode() + value
        elif lower == "set-cookie":
            value = _scoped_cookie(value, prefix)
        out.append((key, value))
    if sandbox:
        out.append((b"content-security-policy", SANDBOX.encode()))
    return out


def _scoped_cookie(value: bytes, prefix: str) -> bytes:
    """A Set-Cookie under the endpoint's prefix: its Path prefixed (`/` when it had none), its Domain
    dropped (host-only)."""
    cookie, *attributes = value.split(b";")
    path = b"/"
    kept = []
    for attribute in attributes:
        name = attribute.strip().split(b"=", 1)[0].lower()
        if name == b"path":
            given = attribute.strip().split(b"=", 1)[1].strip() if b"=" in attribute else b""
            path = given if given.startswith(b"/") else b"/"
        elif name != b"domain":
            kept.append(attribute)
    return b";".join([cookie, *kept, b" Path=" + prefix.encode() + path])


class _Relayed(StreamingResponse):
    """The job's answer, streamed as it comes from the node; the request is accounted for (metrics,
    access log, its stream given back) once it ends, however it ends."""

    def __init__(
        self,
        endpoints: Endpoints,
        exchange: _Exchange,
        key: tuple[str, str, Pubkey],
        conn: h11.Connection,
        channel: Channel,
        head: h11.Response,
    ) -> None:
        self.endpoints, self.exchange, self.key, self.conn, self.channel = endpoints, exchange, key, conn, channel
        self.release: Callable[[], None] = lambda: None
        self._ended = False
        self._whole = False  # the whole answer came (the channel may serve the next request)
        super().__init__(self._body(), status_code=head.status_code)
        prefix = f"/endpoints/{key[0]}/{key[1]}"
        self.raw_headers = _response_headers(head, prefix, endpoints.settings.endpoint_sandbox)

    async def _body(self) -> AsyncIterator[bytes]:
        timeout = self.endpoints.settings.endpoint_timeout_seconds
        while True:
            try:
                event = self.conn.next_event()
            except h11.ProtocolError as e:
                raise _Broken(f"the job's answer broke off: {e}") from None
            if event is h11.NEED_DATA:
                try:
                    async with asyncio.timeout(timeout):
                        data = await self.channel.recv()
                except (TunnelError, TimeoutError, OSError) as e:
                    raise _Broken(f"the answer broke off: {str(e) or type(e).__name__}") from None
                self.conn.receive_data(data or b"")
                continue
            if isinstance(event, h11.Data):
                self.exchange.bytes_out += len(event.data)
                yield bytes(event.data)
            elif isinstance(event, h11.EndOfMessage):
                self._whole = True
                return
            else:
                raise _Broken(f"the job's answer broke off ({type(event).__name__})")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        status = self.status_code
        try:
            await super().__call__(scope, receive, send)
        except _Broken as e:
            log.warning("endpoint.broken", lease=self.exchange.lease, name=self.exchange.name, reason=str(e))
            status = 502  # logged so: the caller got a cut-off answer
            raise
        except (ClientDisconnect, OSError, asyncio.CancelledError):
            status = 499  # the caller went away (nginx's code for it), in the log only
            raise
        finally:
            await self._end(status)

    async def _end(self, status: int) -> None:
        if self._ended:
            return
        self._ended = True
        self.release()
        self.endpoints._account(self.exchange, status)
        if not (self._whole and self.endpoints._checkin(self.key, self.channel, self.conn)):
            await _close(self.channel)
