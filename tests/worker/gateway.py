"""A minimal coordinator gateway for the worker tests: speaks gpunet.protocol over a real
WebSocket (the fake sits at the module boundary; the real gateway is the coordinator's).

It checks the hello and the challenge answer, welcomes the worker, records every message,
acks usage receipts (unless told not to), records numbered messages once each and in order as the
real gateway does (or asks for them again while told it cannot), and lets a test send any text to
the worker.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from typing import Any, Self

from solders.pubkey import Pubkey
from websockets.asyncio.server import Server, ServerConnection, serve

from gpunet.protocol import (
    CLOSE_NOT_REGISTERED,
    CLOSE_UNAUTHORISED,
    Challenge,
    ChallengeAnswer,
    Error,
    Hello,
    Recorded,
    UsageAck,
    UsageReceiptMessage,
    Welcome,
    encode,
    parse_worker_message,
    verify_challenge_answer,
)


class FakeGateway:
    def __init__(self, *, heartbeat_seconds: float = 0.5, usage_period_seconds: int = 2) -> None:
        self.welcome = Welcome(heartbeat_seconds=heartbeat_seconds, usage_period_seconds=usage_period_seconds)
        self.received: list[tuple[int, Any]] = []  # (session number, message)
        self.sessions = 0
        self.ack_usage: Callable[[UsageReceiptMessage], bool] = lambda receipt: True
        self.can_record: Callable[[Any], bool] = lambda message: True  # False: "my database is down"
        self.recorded: list[Any] = []  # numbered messages recorded: once each (by origin and n), in order
        self.refuse_next = 0  # sessions to close as an unregistered node's (4404) before admitting one
        self.refused = 0
        self._connection: ServerConnection | None = None
        self._server: Server | None = None
        self._changed = asyncio.Condition()

    @property
    def url(self) -> str:
        assert self._server is not None
        port = next(iter(self._server.sockets)).getsockname()[1]
        return f"ws://127.0.0.1:{port}/worker"

    async def __aenter__(self) -> Self:
        self._server = await serve(self._session, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _record(self, session: int, message: Any) -> None:
        async with self._changed:
            self.received.append((session, message))
            self._changed.notify_all()

    async def _session(self, ws: ServerConnection) -> None:
        hello = parse_worker_message(await ws.recv())
        assert isinstance(hello, Hello), hello
        if self.refuse_next:
            self.refuse_next -= 1
            self.refused += 1
            await ws.close(CLOSE_NOT_REGISTERED, "node not registered")
            return
        nonce = os.urandom(32).hex()
        await ws.send(encode(Challenge(nonce=nonce)))
        answer = parse_worker_message(await ws.recv())
        if not (
            isinstance(answer, ChallengeAnswer)
            and verify_challenge_answer(Pubkey.from_string(hello.node_key), nonce, answer)
        ):
            await ws.close(CLOSE_UNAUTHORISED, "bad challenge answer")
            return
        await ws.send(encode(self.welcome))
        self.sessions += 1
        session = self.sessions
        self._connection = ws
        await self._record(session, hello)
        last, missing = 0, None
        async for raw in ws:
            message = parse_worker_message(raw)
            await self._record(session, message)
            if isinstance(message, UsageReceiptMessage) and self.ack_usage(message):
                ack = UsageAck(
                    lease=message.lease, epoch=message.epoch, gpu_seconds=message.gpu_seconds, through=message.through
                )
                await ws.send(encode(ack))
            n = getattr(message, "n", None)
            if n is None or (missing is not None and n > missing):
                continue
            if n <= last:
                await ws.send(encode(Recorded(upto=last)))
            elif not self.can_record(message):
                missing = n
                await ws.send(encode(Error(message="cannot record now", resend_from=n)))
            else:
                last, missing = n, None
                if (message.origin, n) not in {(m.origin, m.n) for m in self.recorded}:
                    self.recorded.append(message)
                await ws.send(encode(Recorded(upto=n)))

    async def send(self, message: Any) -> None:
        """A protocol model or raw text, to the worker's current session (waits for one)."""
        await self.wait_for(lambda: self._connection, what="a worker to connect")
        assert self._connection is not None
        await self._connection.send(message if isinstance(message, str) else encode(message))

    async def drop(self) -> None:
        """Cuts the current session as a network failure would (no close handshake)."""
        assert self._connection is not None
        self._connection.transport.abort()

    def recorded_of(self, kind: type) -> list[Any]:
        return [m for m in self.recorded if isinstance(m, kind)]

    def messages(self, kind: type | None = None, session: int | None = None) -> list[Any]:
        return [
            m for s, m in self.received if (kind is None or isinstance(m, kind)) and (session is None or s == session)
        ]

    async def wait_for(self, predicate: Callable[[], Any], timeout: float = 60.0, what: str = "") -> Any:
        """Waits until predicate() is truthy (re-checked on every message); returns its value."""

        async def check() -> Any:
            async with self._changed:
                while not (value := predicate()):
                    await self._changed.wait()
                return value

        try:
            return await asyncio.wait_for(check(), timeout)
        except TimeoutError:
            raise AssertionError(f"gateway: timed out waiting for {what or predicate}") from None
