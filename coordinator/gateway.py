"""The worker gateway: a WebSocket server where worker agents authenticate with their node key
and then heartbeat, stream job status and logs, and send signed usage receipts; the coordinator
dispatches and cancels jobs and acknowledges receipts through it (protocol: gpunet.protocol).

Admission: the hello names a node key; the gateway asks the coordinator whether that node may
connect (registered on chain; a jailed node is admitted but gets no work), sends a fresh random
challenge, and admits the worker only when the challenge answer is that key's signature (a
replayed answer signs another nonce). A message that is malformed, out of place, or claims to be what the session is not
(another simulated flag, a usage receipt the node did not sign) closes the session with the
protocol's close code and a reason, and reaches the coordinator not at all.

Replicas: only the leader's gateway admits workers and sends to them. A follower's closes every
session after the hello with CLOSE_NOT_LEADER and the leader's gateway URL as the reason
(`leader_url`); a replica that stops leading sends the sessions it has there the same way once
another replica leads (`redirect_all`; until then they stay, idle: while the database is down, say).

A usage receipt is acknowledged only after the coordinator has recorded it durably, so a worker
re-sends anything that was lost in between; the coordinator's record is idempotent. One of a share
the node never held is answered with an error and neither stored nor acknowledged. Job status,
log lines and checkpoints are numbered by the worker and recorded in order: each is confirmed
(`recorded`) once the coordinator has it; one it cannot record now (its database down) is asked
for again (`error{resend_from}`) and nothing after it is recorded until it comes again, so none is
lost and none is recorded twice or out of order.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from solders.pubkey import Pubkey
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from gpunet import logs
from gpunet.logs import get_logger
from gpunet.protocol import (
    CLOSE_MALFORMED,
    CLOSE_NOT_LEADER,
    CLOSE_NOT_REGISTERED,
    CLOSE_UNAUTHORISED,
    MAX_MESSAGE_BYTES,
    Ack,
    Challenge,
    ChallengeAnswer,
    Checkpoint,
    Error,
    Heartbeat,
    Hello,
    JobLog,
    JobStatus,
    PortRange,
    ProtocolError,
    Recorded,
    UsageAck,
    UsageReceiptMessage,
    VerifyCommit,
    VerifyMemoryOpenings,
    VerifyOpenings,
    Welcome,
    encode,
    parse_worker_message,
    verify_challenge_answer,
)

__all__ = ["Gateway", "GatewayHandler", "NodeOffline", "NotRegistered"]

log = get_logger("gpunet.coordinator.gateway")
HANDSHAKE_TIMEOUT = 10.0


class NodeOffline(Exception):
    """No worker session for that node right now."""


@dataclass(frozen=True)
class NotRegistered:
    """`admit`'s answer for a node key with no Node account on chain: the session is closed with
    CLOSE_NOT_REGISTERED (not CLOSE_UNAUTHORISED), so its worker can say what to do."""

    reason: str


class GatewayHandler(Protocol):
    """What the coordinator does with what workers say (implemented by the coordinator service)."""

    async def admit(self, node_key: Pubkey, hello: Hello) -> str | NotRegistered | None:
        """None to admit the node, else why it may not connect."""

    async def connected(self, node_key: Pubkey, hello: Hello) -> None: ...

    async def heartbeat(self, node_key: Pubkey, beat: Heartbeat) -> None: ...

    async def job_status(self, node_key: Pubkey, status: JobStatus) -> None: ...

    async def job_log(self, node_key: Pubkey, line: JobLog) -> None: ...

    async def usage(self, node_key: Pubkey, receipt: UsageReceiptMessage) -> str | None:
        """Record the (signature-checked) receipt durably; the gateway acks it after this returns
        None. Else the reason it is refused (not recorded, not acked: a share the node never held)."""

    async def checkpoint(self, node_key: Pubkey, checkpoint: Checkpoint) -> None: ...

    async def worker_ack(self, node_key: Pubkey, ack: Ack) -> None: ...

    async def verify_commit(self, node_key: Pubkey, commit: VerifyCommit) -> None: ...

    async def verify_openings(self, node_key: Pubkey, openings: VerifyOpenings | VerifyMemoryOpenings) -> None: ...

    async def disconnected(self, node_key: Pubkey) -> None: ...


@dataclass
class _Numbered:
    """Where a session's numbered messages stand: the last one recorded, and the one the coordinator
    could not record (nothing after it is recorded until the worker sends it again)."""

    last: int = 0
    missing: int | None = None


class _Refused(Exception):
    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code, self.reason = code, reason


class Gateway:
    def __init__(
        self, handler: GatewayHandler | None = None, *, heartbeat_seconds: float = 2.0, usage_period_seconds: int = 60
    ) -> None:
        self._handler = handler  # may be set after (the coordinator's handler sends through this gateway)
        self.welcome = Welcome(heartbeat_seconds=heartbeat_seconds, usage_period_seconds=usage_period_seconds)
        self.sessions: dict[Pubkey, ServerConnection] = {}
        self.hellos: dict[Pubkey, Hello] = {}  # each session's hello: how the node's cluster peers reach it
        self.refused: dict[int, int] = {}  # close code -> sessions closed with it (for /metrics)
        self._server: Server | None = None
        # Whether this replica leads now (a lone gateway does): a follower admits nobody (it refuses with
        # the leader's gateway URL) and sends nothing, nor does a leader whose lease may have run out.
        self.leading: Callable[[], bool] = lambda: True
        self.leader_url: Callable[[], Awaitable[str]] = _no_leader
        self._closing: set[asyncio.Task[None]] = set()  # redirected sessions still closing
        # Other WebSocket paths this server answers (the relay's data plane: coordinator.relay), on every
        # replica, leading or not; every other path is a worker's control session.
        self.routes: dict[str, Callable[[ServerConnection], Awaitable[None]]] = {}

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> Gateway:
        if self._handler is None:
            raise RuntimeError("the gateway needs its handler before it starts")
        # Keepalive pings every 5 s also measure each session's latency (the scheduler scores it).
        self._server = await serve(self._route, host, port, max_size=MAX_MESSAGE_BYTES, ping_interval=5)
        return self

    @property
    def handler(self) -> GatewayHandler:
        assert self._handler is not None, "the gateway has no handler"
        return self._handler

    @handler.setter
    def handler(self, handler: GatewayHandler) -> None:
        self._handler = handler

    @property
    def url(self) -> str:
        assert self._server is not None, "the gateway is not started"
        host, port = next(iter(self._server.sockets)).getsockname()[:2]
        return f"ws://{host}:{port}/worker"

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def redirect_all(self, leader_url: str) -> None:
        """Every worker is sent to the leader's gateway at `leader_url` (this replica's own, when it
        starts a term with sessions left from before: they reconnect into the new term)."""
        url = _close_reason(leader_url)
        # All at once, and not waiting long on each worker's answer: a close waits up to 10 s for the
        # peer's close frame, and a replica that is not the leader must not hold its sessions meanwhile.
        closing = {asyncio.create_task(ws.close(CLOSE_NOT_LEADER, url)) for ws in self.sessions.values()}
        if closing:
            await asyncio.wait(closing, timeout=1.0)
        self._closing |= {task for task in closing if not task.done()}
        for task in self._closing:
            task.add_done_callback(self._closing.discard)

    def online(self, node_key: Pubkey) -> bool:
        return node_key in self.sessions

    def latency_ms(self, node_key: Pubkey) -> float | None:
        """The session's round trip, measured by the WebSocket keepalive pings (None: not yet)."""
        ws = self.sessions.get(node_key)
        return ws.latency * 1000 if ws is not None and ws.latency > 0 else None

    def host(self, node_key: Pubkey) -> str:
        """How the node's cluster peers reach it, as a URL host (IPv6 in brackets): the address it
        advertises; from an older worker that advertises none, the address its session comes from
        (a proxy's, behind NAT or a TLS-terminating proxy)."""
        hello = self.hellos.get(node_key)
        ws = self.sessions.get(node_key)
        if hello is not None and hello.advertise_addr is not None:
            host = hello.advertise_addr
        else:
            host = ws.remote_address[0] if ws is not None and ws.remote_address else "127.0.0.1"
        return f"[{host}]" if ":" in host else host

    def cluster_ports(self, node_key: Pubkey) -> PortRange | None:
        """The ports the node opens for cluster traffic (None: an older worker that says none)."""
        hello = self.hellos.get(node_key)
        return hello.cluster_ports if hello is not None else None

    async def send(self, node_key: Pubkey, message: Any) -> None:
        """Sends a coordinator message to the node's worker; NodeOffline when it has no session."""
        ws = self.sessions.get(node_key)
        if ws is None:
            raise NodeOffline(f"node {node_key} has no worker session")
        if not self.leading():
            raise NodeOffline(f"this coordinator replica does not lead: nothing is sent to node {node_key}")
        try:
            await ws.send(encode(message))
        except ConnectionClosed:
            raise NodeOffline(f"node {node_key}'s worker session closed") from None

    async def _route(self, ws: ServerConnection) -> None:
        path = ws.request.path.partition("?")[0] if ws.request is not None else ""
        route = self.routes.get(path, self._session)
        await route(ws)

    @logs.scoped
    async def _session(self, ws: ServerConnection) -> None:
        node_key: Pubkey | None = None
        try:
            key, hello = await asyncio.wait_for(self._handshake(ws), HANDSHAKE_TIMEOUT)
            node_key = key
            logs.bind(node=key)  # every line of the session's work carries its node
            old, self.sessions[key] = self.sessions.get(key), ws
            self.hellos[key] = hello
            if old is not None:  # the newest session wins (a worker that reconnected before noticing)
                await old.close(CLOSE_UNAUTHORISED, "replaced by a newer session of the same node")
            await self.handler.connected(key, hello)
            numbered = _Numbered()
            async for raw in ws:
                await self._dispatch(key, hello.simulated, raw, ws, numbered)
        except _Refused as e:
            self.refused[e.code] = self.refused.get(e.code, 0) + 1
            log.info("gateway.session_refused", node=node_key, remote=ws.remote_address, reason=e.reason)
            await ws.close(e.code, e.reason[:120])
        except (TimeoutError, ConnectionClosed):
            pass
        finally:
            if node_key is not None and self.sessions.get(node_key) is ws:
                del self.sessions[node_key]
                self.hellos.pop(node_key, None)
                await self.handler.disconnected(node_key)

    async def _handshake(self, ws: ServerConnection) -> tuple[Pubkey, Hello]:
        hello = self._parse(await ws.recv())
        if not isinstance(hello, Hello):
            raise _Refused(CLOSE_MALFORMED, f"expected hello first, got {hello.type}")
        if not self.leading():
            raise _Refused(CLOSE_NOT_LEADER, _close_reason(await self.leader_url()))
        node_key = Pubkey.from_string(hello.node_key)
        if hello.inventory.simulated != hello.simulated:
            raise _Refused(CLOSE_MALFORMED, "hello.simulated and inventory.simulated differ")
        if isinstance(refusal := await self.handler.admit(node_key, hello), NotRegistered):
            raise _Refused(CLOSE_NOT_REGISTERED, refusal.reason)
        if refusal is not None:
            raise _Refused(CLOSE_UNAUTHORISED, refusal)
        nonce = secrets.token_bytes(32).hex()
        await ws.send(encode(Challenge(nonce=nonce)))
        answer = self._parse(await ws.recv())
        if not isinstance(answer, ChallengeAnswer) or not verify_challenge_answer(node_key, nonce, answer):
            raise _Refused(CLOSE_UNAUTHORISED, "the challenge answer is not the node key's signature of this nonce")
        await ws.send(encode(self.welcome))
        return node_key, hello

    @staticmethod
    def _parse(raw: str | bytes) -> Any:
        try:
            return parse_worker_message(raw)
        except ProtocolError as e:
            raise _Refused(e.close_code, str(e)) from None

    async def _dispatch(
        self, node_key: Pubkey, simulated: bool, raw: str | bytes, ws: ServerConnection, numbered: _Numbered
    ) -> None:
        message = self._parse(raw)
        if not self.leading() and (leader := await self.leader_url()):
            # This replica stopped leading (it stepped down, or woke from a pause to find another in its
            # place): the worker is sent on at its next message (a heartbeat at most), whatever became of
            # the step-down's own redirect. With no leader known yet, it stays rather than reconnect in a loop.
            raise _Refused(CLOSE_NOT_LEADER, _close_reason(leader))
        if message.simulated != simulated:
            raise _Refused(CLOSE_MALFORMED, "a session's messages must keep its hello's simulated flag")
        n = getattr(message, "n", None)
        if n is not None:
            if numbered.missing is not None and n > numbered.missing:
                return  # sent before the worker heard that `missing` must come again: it will, in order
            if n <= numbered.last:
                await ws.send(encode(Recorded(upto=numbered.last)))  # a repeat: recorded already
                return
        try:
            await self._handle(node_key, message, ws)
        except (_Refused, ConnectionClosed):
            raise
        except Exception as e:  # the coordinator's side failed (its database is down, say): not the worker's fault
            # The session stays up: dropping it would only make every worker reconnect in a loop. A usage
            # report is not acknowledged and a numbered message is asked for again: the worker keeps both.
            log.warning("gateway.could_not_record", node=node_key, message=message.type, error=str(e))
            if n is not None:
                numbered.missing = n
            await ws.send(
                encode(
                    Error(
                        message=f"the coordinator could not record your {message.type} now "
                        f"({type(e).__name__}); hold on and send it again later",
                        resend_from=n,
                    )
                )
            )
            return
        if n is not None:
            numbered.last, numbered.missing = n, None
            await ws.send(encode(Recorded(upto=n)))

    async def _handle(self, node_key: Pubkey, message: Any, ws: ServerConnection) -> None:
        h = self.handler
        match message:
            case Heartbeat():
                await h.heartbeat(node_key, message)
            case JobStatus():
                await h.job_status(node_key, message)
            case JobLog():
                await h.job_log(node_key, message)
            case UsageReceiptMessage():
                if not message.verify(node_key):
                    raise _Refused(
                        CLOSE_UNAUTHORISED, f"usage receipt of lease {message.lease} is not signed by this node"
                    )
                if (refused := await h.usage(node_key, message)) is not None:
                    # not acked, and the session stays: an honest worker keeps it and offers it again
                    # after a reconnect, and is refused again; nothing is stored
                    await ws.send(encode(Error(message=refused)))
                    return
                ack = UsageAck(
                    lease=message.lease, epoch=message.epoch, gpu_seconds=message.gpu_seconds, through=message.through
                )
                await ws.send(encode(ack))
            case Checkpoint():
                await h.checkpoint(node_key, message)
            case Ack():
                await h.worker_ack(node_key, message)
            case VerifyCommit():
                await h.verify_commit(node_key, message)
            case VerifyOpenings() | VerifyMemoryOpenings():
                await h.verify_openings(node_key, message)
            case _:
                raise _Refused(CLOSE_MALFORMED, f"{message.type} is only valid during the handshake")


async def _no_leader() -> str:
    return ""


def _close_reason(url: str) -> str:
    """The URL as a close reason; empty when it would not fit one (the worker tries its next gateway)."""
    return url if len(url.encode()) <= 120 else ""
