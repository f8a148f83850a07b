"""The agent's WebSocket session with the coordinator's gateway: authenticate with the node key,
heartbeat, deliver the outbox, hand coordinator messages to the agent, and reconnect with
exponential backoff and full jitter when anything breaks — without losing queued messages. Given
several gateways (coordinator replicas), it goes where a follower says the leader is, else to the
next one, and backs off only once it has tried them all. A node the coordinator finds not registered
on chain (4404) is told why and what to do, and the session ends (NodeNotRegistered) if that lasts
the grace period.

Job status, log lines and checkpoints are numbered (protocol: `origin`, `n`) and kept after they
are sent until the gateway says they are recorded: when it could not record one (its database is
down) it asks for it again, and the session holds everything from there on and sends it again, in
order, a little later; what a dropped session left unconfirmed is sent again after the next welcome.
Usage receipts have their own, durable, path: the journal.
"""

from __future__ import annotations

import asyncio
import random
import secrets
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel
from solders.keypair import Keypair
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from gpunet.json_input import NotJson, parse_json
from gpunet.logs import get_logger
from gpunet.protocol import (
    CLOSE_MALFORMED,
    CLOSE_NOT_LEADER,
    CLOSE_NOT_REGISTERED,
    CLOSE_UNAUTHORISED,
    CLOSE_VERSION_MISMATCH,
    MAX_MESSAGE_BYTES,
    Ack,
    Challenge,
    Checkpoint,
    Error,
    Heartbeat,
    Hello,
    JobLog,
    JobStatus,
    ProtocolError,
    Recorded,
    UsageReceiptMessage,
    Welcome,
    answer_challenge,
    encode,
    parse_coordinator_message,
)

__all__ = ["Backoff", "NodeNotRegistered", "Session"]

log = get_logger("gpunet.worker.session")

HANDSHAKE_TIMEOUT = 15.0
# A coordinator that stops answering pings (frozen, its host gone) is left within PING_SECONDS +
# PING_TIMEOUT_SECONDS + CLOSE_TIMEOUT_SECONDS (9 s): a frozen leader's workers are on the replica
# that replaced it (within GPUNET_LEADER_TTL_SECONDS + GPUNET_LEADER_RENEW_SECONDS, 4 s) within
# about that, inside the reconnect grace a new leader gives them (GPUNET_RECONNECT_GRACE_SECONDS,
# 30 s) and the default lost_after (10 s). The timeout leaves room for a pong queued behind a large
# message; the close does not wait for a gateway that misses its pong (it will not answer that either).
PING_SECONDS = 3.0
PING_TIMEOUT_SECONDS = 5.0
CLOSE_TIMEOUT_SECONDS = 1.0
# Log lines kept while the coordinator cannot take them; newer ones are dropped (and counted) past
# this, never a status or a checkpoint: dropping a line already numbered could leave a gap the
# gateway waits on.
MAX_QUEUED_LOG_LINES = 10_000
RECORDED = (JobStatus, JobLog, Checkpoint)
# What each close code means, logged beside the coordinator's own reason (which says why).
_CLOSE_MEANINGS = {
    CLOSE_MALFORMED: "malformed message",
    CLOSE_UNAUTHORISED: "unauthorised",
    CLOSE_NOT_LEADER: "not the leader",
    CLOSE_NOT_REGISTERED: "node not registered",
    CLOSE_VERSION_MISMATCH: "protocol version mismatch (upgrade the worker)",
}


class NodeNotRegistered(Exception):
    """The coordinator kept refusing the node key as not registered on chain for the whole grace
    period: the worker stops (exit code 13) instead of knocking forever; the message says what to do."""


class Backoff:
    """Exponential backoff with full jitter: a random delay in [0, min(cap, base * 2**attempt)]."""

    def __init__(self, base: float = 0.5, cap: float = 30.0, rng: random.Random | None = None) -> None:
        self.base, self.cap, self.attempt = base, cap, 0
        self._rng = rng or random.Random()

    def next_delay(self) -> float:
        delay = self._rng.uniform(0, min(self.cap, self.base * 2**self.attempt))
        self.attempt = min(self.attempt + 1, 30)
        return delay

    def reset(self) -> None:
        self.attempt = 0


class _HandshakeRefused(Exception):
    pass


class Session:
    """`hello()` builds the hello; `on_welcome(welcome)` returns what must be (re)sent first
    (the journal's unacked usage receipts); `handle(message)` gets each valid coordinator
    message. Invalid ones are refused here with an ack naming the error."""

    def __init__(
        self,
        urls: list[str],
        node: Keypair,
        *,
        simulated: bool,
        hello: Callable[[], Hello],
        heartbeat: Callable[[], Heartbeat],
        on_welcome: Callable[[Welcome], list[BaseModel]],
        handle: Callable[[Any], Awaitable[None]],
        backoff: Backoff | None = None,
        resend_after: float = 1.0,
        not_registered_grace: float = 300.0,
    ) -> None:
        if not urls:
            raise ValueError("a worker needs at least one gateway URL")
        # Coordinator replicas: any of them may be the leader's; a follower names the leader's (CLOSE_NOT_LEADER).
        self.urls, self.url, self.node, self.simulated = list(urls), urls[0], node, simulated
        self._tried = 0  # gateways tried since the last welcome, without waiting
        self._hello, self._heartbeat, self._on_welcome, self._handle = hello, heartbeat, on_welcome, handle
        self.backoff = backoff or Backoff()
        self.heartbeat_seconds = 2.0
        self.connected = asyncio.Event()
        self.sessions = 0  # welcomed sessions so far
        self._outbox: deque[BaseModel] = deque()  # sent once per session (usage receipts: from the journal)
        self.origin = secrets.token_hex(8)  # this agent process's numbering of what the coordinator records
        self._numbered = 0
        self._records: deque[Any] = deque()  # numbered, to be sent (again)
        self._unconfirmed: deque[Any] = deque()  # numbered, sent, not yet recorded by the coordinator
        self._queued_logs = 0  # log lines in the two queues above
        self.dropped_log_lines = 0
        self.holding = False  # the coordinator asked to resend: nothing numbered goes out until then
        self.resend_after = resend_after
        self._resend_delay = resend_after
        self._resend: asyncio.TimerHandle | None = None
        self._wake = asyncio.Event()
        # A node refused as not registered since then (monotonic), while it stays refused: a worker
        # started just before its `gpunet node register` lands is admitted within the grace.
        self.not_registered_grace = not_registered_grace
        self._not_registered_since: float | None = None
        self.refusal: str | None = None  # why the coordinator refused the last session (None once welcomed)

    def send(self, message: BaseModel) -> None:
        """Queues a message; it is sent now if connected, else after the next welcome.
        Usage receipts are journaled before they get here and re-sent from the journal instead."""
        if isinstance(message, RECORDED):
            if isinstance(message, JobLog):
                if self._queued_logs >= MAX_QUEUED_LOG_LINES:
                    self.dropped_log_lines += 1
                    return
                self._queued_logs += 1
            self._numbered += 1
            self._records.append(message.model_copy(update={"origin": self.origin, "n": self._numbered}))
        else:
            self._outbox.append(message)
        self._wake.set()

    @property
    def unconfirmed(self) -> int:
        """Numbered messages the coordinator has not confirmed recording yet (sent or not)."""
        return len(self._records) + len(self._unconfirmed)

    def _recorded(self, upto: int) -> None:
        for queue in (self._unconfirmed, self._records):
            while queue and queue[0].n <= upto:
                self._queued_logs -= isinstance(queue.popleft(), JobLog)
        self._resend_delay = self.resend_after

    def _hold(self, resend_from: int) -> None:
        """The coordinator could not record message `resend_from`: it records nothing later until it
        comes again. Hold the numbered messages, and send them all again, in order, a bit later."""
        if self._resend is not None:
            self._resend.cancel()
        self.holding = True
        log.info(
            "session.holding",
            resend_from=resend_from,
            in_seconds=round(self._resend_delay, 1),
            unconfirmed=self.unconfirmed,
        )
        self._resend = asyncio.get_running_loop().call_later(self._resend_delay, self._send_unconfirmed_again)
        self._resend_delay = min(self._resend_delay * 2, 10.0)  # soon after the database is back

    def _send_unconfirmed_again(self) -> None:
        if self._resend is not None:
            self._resend.cancel()
            self._resend = None
        self._records.extendleft(reversed(self._unconfirmed))
        self._unconfirmed.clear()
        self.holding = False
        self._wake.set()

    async def run_forever(self) -> None:
        while True:
            leader = None
            try:
                async with connect(
                    self.url,
                    max_size=MAX_MESSAGE_BYTES,
                    open_timeout=HANDSHAKE_TIMEOUT,
                    ping_interval=PING_SECONDS,
                    ping_timeout=PING_TIMEOUT_SECONDS,
                    close_timeout=CLOSE_TIMEOUT_SECONDS,
                ) as ws:
                    welcome = await self._handshake(ws)
                    self.backoff.reset()
                    self._tried = 0
                    self._not_registered_since = self.refusal = None
                    await self._serve(ws, welcome)
            except ConnectionClosed as e:
                # e.g. 4401 (a bad answer) or 4426 (upgrade the worker): logged with the coordinator's
                # reason, retried with backoff; 4404 (not registered): said plainly, and the end if it stays
                code, reason = (e.rcvd.code, e.rcvd.reason) if e.rcvd else (None, "no close frame")
                if code == CLOSE_NOT_LEADER:
                    leader = reason if reason.startswith(("ws://", "wss://")) else None
                    log.info("session.not_leader", url=self.url, leader=leader or "unknown yet")
                elif code == CLOSE_NOT_REGISTERED:
                    self.refusal = reason or _CLOSE_MEANINGS[code]
                    self._not_registered(reason)
                else:
                    if code in _CLOSE_MEANINGS:  # a refusal of the gateway's, not a dropped connection
                        self.refusal = f"{_CLOSE_MEANINGS[code]}: {reason}"
                    log.warning("session.closed", code=code, meaning=_CLOSE_MEANINGS.get(code or 0), reason=reason)
            except (OSError, TimeoutError, InvalidHandshake, _HandshakeRefused) as e:
                log.warning("session.failed", url=self.url, error=str(e) or type(e).__name__)
            except InvalidURI as e:
                raise ValueError(f"bad gateway URL {self.url!r}: {e}") from None
            finally:
                self.connected.clear()
            await self._next_gateway(leader)

    def _not_registered(self, reason: str) -> None:
        """The coordinator found no Node account for this key: says so with what to do, and raises
        NodeNotRegistered once that has lasted the grace period."""
        now = asyncio.get_running_loop().time()
        if self._not_registered_since is None:
            self._not_registered_since = now
        left = self._not_registered_since + self.not_registered_grace - now
        what = (
            f"the coordinator at {self.url} refuses node {self.node.pubkey()}: {reason or 'not registered'}. "
            "A node key gets work only while its node is registered: register it with your supplier wallet "
            "(`gpunet node register NODE_KEY_NAME --gpu ... --count ... --region ... --price ... -k WALLET`; "
            "a deregistered node registers again the same way once `gpunet node release` freed it), or start "
            "the worker with the key of a registered node (-k)"
        )
        if left <= 0:
            raise NodeNotRegistered(f"{what}; stopped after {self.not_registered_grace:g} s of refusals")
        log.error("session.not_registered", url=self.url, reason=reason, what_to_do=what, stops_in_seconds=round(left))

    async def _next_gateway(self, leader: str | None) -> None:
        """Moves to the leader's gateway when a follower named it, else to the next one given; waits
        (backoff) only once as many gateways as were given have been tried without a welcome."""
        self._tried += 1
        given = self.urls.index(self.url) + 1 if self.url in self.urls else 0
        self.url = leader or self.urls[given % len(self.urls)]
        if self._tried < len(self.urls) + (leader is not None):  # a named leader is tried at once, once a round
            return
        self._tried = 0
        delay = self.backoff.next_delay()
        log.info("session.reconnect", url=self.url, in_seconds=round(delay, 2), attempt=self.backoff.attempt)
        await asyncio.sleep(delay)

    async def _recv(self, ws: ClientConnection) -> Any:
        raw = await asyncio.wait_for(ws.recv(), HANDSHAKE_TIMEOUT)
        try:
            message = parse_coordinator_message(raw)
        except ProtocolError as e:
            raise _HandshakeRefused(f"bad message from the gateway during the handshake: {e}") from None
        if isinstance(message, Error):
            raise _HandshakeRefused(f"the gateway refused the session: {message.message}")
        return message

    async def _handshake(self, ws: ClientConnection) -> Welcome:
        await ws.send(encode(self._hello()))
        challenge = await self._recv(ws)
        if not isinstance(challenge, Challenge):
            raise _HandshakeRefused(f"expected a challenge, got {challenge.type}")
        await ws.send(encode(answer_challenge(self.node, challenge, self.simulated)))
        welcome = await self._recv(ws)
        if not isinstance(welcome, Welcome):
            raise _HandshakeRefused(f"expected welcome, got {welcome.type}")
        self.heartbeat_seconds = welcome.heartbeat_seconds
        # receipts already queued are in the journal: send them once, in order, from there
        resend = self._on_welcome(welcome)
        self._outbox = deque([*resend, *(m for m in self._outbox if not isinstance(m, UsageReceiptMessage))])
        self._send_unconfirmed_again()  # the last session may have ended before they were recorded
        self.sessions += 1
        self.connected.set()
        log.info("session.welcome", url=self.url, resent_receipts=len(resend))
        return welcome

    async def _serve(self, ws: ClientConnection, welcome: Welcome) -> None:
        tasks = [
            asyncio.create_task(self._receive(ws)),
            asyncio.create_task(self._deliver(ws)),
            asyncio.create_task(self._beat(ws)),
        ]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            for task in done:
                task.result()  # re-raise what ended the session
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _receive(self, ws: ClientConnection) -> None:
        async for raw in ws:
            try:
                message = parse_coordinator_message(raw)
            except ProtocolError as e:
                # refused and reported; the session and the agent carry on
                log.warning("session.refused", error=str(e))
                self.send(refusal(raw, e, self.simulated))
                continue
            if isinstance(message, Recorded):
                self._recorded(message.upto)
            elif isinstance(message, Error) and message.resend_from is not None:
                self._hold(message.resend_from)
            else:
                await self._handle(message)

    async def _deliver(self, ws: ClientConnection) -> None:
        while True:
            # taken off a queue only once sent: a dropped connection loses nothing
            if self._outbox:
                await ws.send(encode(self._outbox[0]))
                self._outbox.popleft()
            elif self._records and not self.holding:
                message = self._records[0]
                await ws.send(encode(message))
                if self._records and self._records[0] is message:  # (not confirmed or requeued meanwhile)
                    self._unconfirmed.append(self._records.popleft())  # kept until recorded
            else:
                self._wake.clear()
                await self._wake.wait()

    async def _beat(self, ws: ClientConnection) -> None:
        while True:
            await ws.send(encode(self._heartbeat()))
            await asyncio.sleep(self.heartbeat_seconds)


def refusal(raw: str | bytes, error: ProtocolError, simulated: bool) -> Ack:
    """The ack that refuses an unreadable coordinator message, naming its type when it has one."""
    of = "?"
    try:
        value = parse_json(raw)
        if isinstance(value, dict) and isinstance(value.get("type"), str):
            of = value["type"][:64]
    except NotJson:
        pass
    return Ack(simulated=simulated, of=of, error=str(error)[:4096])
