"""The relay: the coordinator's end of every node's data plane (gpunet.tunnel). Workers open one
link each to every replica (`/tunnel`: any replica relays for any worker, leader or not); a client
reaches a node of its lease through a WebSocket (`/client?lease=...&node=...`, signed as a client
API request) that the relay joins to a stream of that node's link. The relay checks who may open a
stream (the lease's client, a node that holds the lease's share now, a lease not closed) but carries
only ciphertext: the client's TLS channel ends at the node, which checks the client again itself.

What the relay still learns: which client reaches which node of which lease, when, and how many
bytes each way in what rhythm (TLS hides content, not sizes or timing).
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Awaitable, Callable
from urllib.parse import parse_qs, urlsplit

import asyncpg
from solders.pubkey import Pubkey
from solders.signature import Signature
from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from coordinator.api.params import BadRequest, parse_pubkey
from coordinator.api.signed import Refused, check_signed
from coordinator.db import leases as ledger
from coordinator.db import nodes as node_rows
from gpunet.logs import get_logger
from gpunet.tunnel import (
    MAX_DATA,
    Link,
    LinkClosed,
    SecureChannel,
    Stream,
    StreamRefused,
    TunnelError,
    client_context,
    link_message,
)

__all__ = ["CLOSE_LEASE_CLOSED", "CLOSE_REFUSED", "Relay"]

log = get_logger("gpunet.coordinator.relay")
HANDSHAKE_TIMEOUT = 10.0
# Close codes of a client's tunnel WebSocket (the reason says what to do).
CLOSE_REFUSED = 4403  # not the lease's client, not the lease's node, a bad request
CLOSE_LEASE_CLOSED = 4410  # the lease has closed: nothing of it is reached any more
CLOSE_NODE_LOST = 4502  # the node's link went (its worker disconnected, or the node was lost)


class Relay:
    """Each node's data-plane link on this replica, and the streams clients open through them."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool
        self.links: dict[Pubkey, Link] = {}

    def linked(self, node_key: Pubkey) -> bool:
        return node_key in self.links

    def routes(self) -> dict[str, Callable[[ServerConnection], Awaitable[None]]]:
        """The WebSocket paths the relay answers on the gateway's server."""
        return {"/tunnel": self.node_link, "/client": self.client_connection}

    # --- a worker's link

    async def node_link(self, ws: ServerConnection) -> None:
        """A worker's data-plane link: it proves its node key on a fresh nonce, then carries streams
        until it closes (a newer link of the same node replaces it)."""
        try:
            node_key = await asyncio.wait_for(self._admit(ws), HANDSHAKE_TIMEOUT)
        except (TimeoutError, ConnectionClosed):
            return
        except TunnelError as e:
            await ws.close(CLOSE_REFUSED, str(e)[:120])
            return
        link = Link(ws)
        old, self.links[node_key] = self.links.get(node_key), link
        if old is not None:
            await old.ws.close(CLOSE_REFUSED, "replaced by a newer link of the same node")
        log.info("relay.node_linked", node=node_key)
        try:
            await link.run()
        finally:
            if self.links.get(node_key) is link:
                del self.links[node_key]
            log.info("relay.node_unlinked", node=node_key, reason=link.closed)

    async def _admit(self, ws: ServerConnection) -> Pubkey:
        nonce = secrets.token_bytes(32)
        await ws.send(json.dumps({"nonce": nonce.hex()}))
        try:
            answer = json.loads(await ws.recv())
            node_key = Pubkey.from_string(str(answer["node_key"]))
            signature = Signature.from_string(str(answer["signature"]))
        except (ValueError, KeyError, TypeError):
            raise TunnelError('a link opens with {"node_key": base58, "signature": base58}') from None
        if not signature.verify(node_key, link_message(nonce, node_key)):
            raise TunnelError("the link's signature is not the node key's over this nonce")
        async with self.pool.acquire() as conn:
            if not await node_rows.is_registered(conn, node_key):
                raise TunnelError(f"node {node_key} is not registered (as this coordinator's ledger has it)")
        await ws.send(json.dumps({"ok": True}))
        return node_key

    async def open(self, node_key: Pubkey, opening: dict[str, str]) -> Stream:
        """A stream to the node (its worker decides whether to accept it); StreamRefused saying why."""
        link = self.links.get(node_key)
        if link is None:
            raise StreamRefused(
                f"node {node_key} has no data-plane link to this coordinator now (its worker is offline, or "
                "predates the data plane): retry once it reconnects"
            )
        stream = await link.open(json.dumps(opening).encode())
        return stream

    async def open_endpoint(self, lease: str, node_key: Pubkey, name: str) -> SecureChannel:
        """A TLS channel (pinned to the node key) to the job's exposed port `name`: the node refuses a
        name its current job of the lease does not expose."""
        stream = await self.open(node_key, {"lease": lease, "purpose": "endpoint", "name": name})
        channel = SecureChannel(stream, client_context(), server_side=False, node_key=node_key)
        try:
            await channel.handshake()
            answer = await channel.read_message()
        except BaseException:
            await stream.reset("the relay gave up on the endpoint's channel")
            raise
        if "error" in answer:
            await channel.close()
            raise StreamRefused(str(answer["error"]))
        return channel

    # --- a client's connection

    async def client_connection(self, ws: ServerConnection) -> None:
        """A client's tunnel to one node of its lease: checked, then joined to a stream of the node's
        link byte for byte (the client's TLS records), each way with its own backpressure."""
        try:
            stream = await self._client_stream(ws)
        except _Close as e:
            log.info("relay.client_refused", remote=ws.remote_address, reason=e.reason)
            await ws.close(e.code, e.reason[:120])
            return
        await self._join(ws, stream)

    async def _client_stream(self, ws: ServerConnection) -> Stream:
        request = ws.request
        assert request is not None
        query = parse_qs(urlsplit(request.path).query)
        try:
            if set(query) != {"lease", "node"} or any(len(v) != 1 for v in query.values()):
                raise BadRequest("a tunnel is /client?lease=LEASE&node=NODE_KEY (the node: one of the lease's)")
            lease = parse_pubkey("lease", query["lease"][0])
            node_key = Pubkey.from_string(parse_pubkey("node", query["node"][0]))
            async with self.pool.acquire() as conn:
                await check_signed(conn, "GET", request.path, request.headers, b"", lease, suppliers=False)
                row = await ledger.lease_row(conn, lease)
                shares = await ledger.active_shares(conn, lease=lease)
        except BadRequest as e:
            raise _Close(CLOSE_REFUSED, str(e)) from None
        except Refused as e:
            raise _Close(CLOSE_REFUSED, e.message) from None
        if row is None or row["status"] != "active":
            raise _Close(CLOSE_LEASE_CLOSED, f"lease {lease} is not active: its jobs are no longer reached")
        if node_key not in {s.node_key for s in shares}:
            raise _Close(CLOSE_REFUSED, f"node {node_key} holds no share of lease {lease} now")
        try:
            return await self.open(node_key, {"lease": lease, "purpose": "client"})
        except (StreamRefused, LinkClosed) as e:
            raise _Close(CLOSE_NODE_LOST, str(e)) from None

    async def _join(self, ws: ServerConnection, stream: Stream) -> None:
        async def to_node() -> None:
            async for message in ws:
                if isinstance(message, str) or len(message) > MAX_DATA:
                    raise _Close(CLOSE_REFUSED, f"a tunnel carries binary messages of at most {MAX_DATA} bytes")
                await stream.send(message)  # waits for the stream's credit: the client's TCP holds back
            await stream.close()

        async def to_client() -> None:
            try:
                while (data := await stream.recv()) is not None:
                    await ws.send(data)
            except StreamRefused as e:
                raise _Close(CLOSE_NODE_LOST, f"the node's end closed: {e}") from None
            await ws.close()

        tasks = [asyncio.create_task(to_node()), asyncio.create_task(to_client())]
        code, reason = 1000, ""
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            for task in done:
                if (error := task.exception()) is not None:
                    if isinstance(error, _Close):
                        code, reason = error.code, error.reason
                    elif isinstance(error, StreamRefused | LinkClosed):
                        code, reason = CLOSE_NODE_LOST, str(error)
                    elif not isinstance(error, ConnectionClosed):
                        raise error
            if tasks[0] in done and tasks[0].exception() is None:
                try:
                    await tasks[1]  # the client finished sending: the node's answer still comes
                except ConnectionClosed:
                    pass  # the client went after all: nothing more to send it
                except _Close as e:
                    code, reason = e.code, e.reason
        except StreamRefused as e:
            code, reason = CLOSE_NODE_LOST, str(e)
        finally:
            for task in tasks:
                task.cancel()
            if code != 1000:
                await stream.reset(reason or "the client's tunnel closed")
                await ws.close(code, reason[:120])
            elif ws.close_code is None:
                await ws.close()


class _Close(Exception):
    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code, self.reason = code, reason
