"""The node's end of the data plane (gpunet.tunnel): a link to every coordinator replica's relay,
opened outward (a node behind NAT is reached all the same), and, where the supplier opens a port
for it, a direct listener that clients try first. Each stream is a TLS channel under the node key;
inside it the node admits the lease's client as the chain names it (never as the coordinator says),
and only into a job of a lease this node holds now: a shell or a command in the job's sandbox, a
TCP connection to a port inside it. The relay's own streams (`endpoint`) reach only the ports the
client's job exposes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit, urlunsplit

from solana.rpc.async_api import AsyncClient
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from websockets.asyncio.client import connect
from websockets.asyncio.server import Server, ServerConnection, serve

from gpunet.accounts import AccountError, fetch
from gpunet.logs import get_logger
from gpunet.protocol import Expose
from gpunet.tunnel import (
    EXIT,
    MAX_DATA,
    RESIZE,
    SIGNAL,
    STDERR,
    STDIN,
    STDIN_EOF,
    STDOUT,
    Link,
    SecureChannel,
    Stream,
    TunnelError,
    WebSocketPipe,
    exit_payload,
    link_message,
    new_nonce,
    node_context,
    read_access,
    read_frame,
    send_frame,
)
from worker.job_access import JobUnreachable, spawn
from worker.job_access import connect as connect_job
from worker.runner import JobRunner

__all__ = ["DataPlane", "relay_url"]

log = get_logger("gpunet.worker.tunnel")


def relay_url(gateway_url: str) -> str:
    """A replica's relay for workers: its gateway's server, path /tunnel."""
    parts = urlsplit(gateway_url)
    return urlunsplit((parts.scheme, parts.netloc, "/tunnel", "", ""))


class DataPlane:
    """Links to the relays and the direct listener. `job_of(lease)` is the runner of the job of a
    lease whose share this node holds now (None: it holds none, or no job runs on it);
    `holds(lease)` whether it holds a share of it."""

    def __init__(
        self,
        node: Keypair,
        gateway_urls: list[str],
        *,
        holds: Callable[[str], bool],
        job_of: Callable[[str], JobRunner | None],
        rpc_url: str | None,
        state_dir: Path,
        direct: tuple[str, int] | None = None,
    ) -> None:
        self.node, self.node_key = node, node.pubkey()
        self.urls = [relay_url(u) for u in gateway_urls]
        self.holds, self.job_of, self.rpc_url, self.direct = holds, job_of, rpc_url, direct
        self.context = node_context(node, state_dir)
        self.links: dict[str, Link] = {}
        self._clients: dict[str, Pubkey] = {}  # lease -> its client on chain (a lease's client never changes)
        self._server: Server | None = None
        self.port: int | None = None

    async def listen(self) -> None:
        """Opens the direct listener, if the supplier gave it a port (before the hello, which advertises it)."""
        if self.direct is not None and self._server is None:
            host, port = self.direct
            self._server = await serve(
                self._direct, host, port, max_size=MAX_DATA + 1024, ping_interval=5, compression=None
            )
            self.port = next(iter(self._server.sockets)).getsockname()[1]
            log.info("tunnel.direct_listening", host=host, port=self.port)

    async def run(self) -> None:
        """Until cancelled: a link to each relay (reconnecting); the direct listener closes at the end."""
        await self.listen()
        try:
            await asyncio.gather(*(self._keep_link(url) for url in self.urls))
        finally:
            if self._server is not None:
                self._server.close()

    async def _keep_link(self, url: str) -> None:
        delay = 0.5
        while True:
            try:
                # no permessage-deflate (here, at the direct listener, and the client's, gpunet.reach): the
                # streams carry TLS ciphertext, which does not compress (bench/tunnel)
                async with connect(
                    url, max_size=MAX_DATA + 1024, ping_interval=3, ping_timeout=5, compression=None
                ) as ws:
                    nonce = bytes.fromhex(json.loads(await asyncio.wait_for(ws.recv(), 10))["nonce"])
                    signature = self.node.sign_message(link_message(nonce, self.node_key))
                    await ws.send(json.dumps({"node_key": str(self.node_key), "signature": str(signature)}))
                    answer = await asyncio.wait_for(ws.recv(), 10)
                    if not isinstance(answer, str) or not json.loads(answer).get("ok"):
                        raise TunnelError(f"the relay refused the link: {answer!r}")
                    link = self.links[url] = Link(ws, self._on_open, serve=self._serve_stream)
                    log.info("tunnel.linked", relay=url)
                    delay = 0.5
                    await link.run()
                    log.info("tunnel.unlinked", relay=url, reason=link.closed)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # the relay is down or refused: try again, backing off
                log.debug("tunnel.link_failed", relay=url, error=str(e) or type(e).__name__)
            finally:
                self.links.pop(url, None)
            await asyncio.sleep(random.uniform(0, delay))
            delay = min(delay * 2, 30.0)

    # --- a stream the relay opens

    async def _on_open(self, stream: Stream) -> str | None:
        try:
            opening = json.loads(stream.opening)
            lease, purpose = str(opening["lease"]), str(opening["purpose"])
        except (ValueError, KeyError, TypeError):
            return 'a stream opens with {"lease": ..., "purpose": "client" or "endpoint"}'
        if purpose not in ("client", "endpoint"):
            return f"unknown stream purpose {purpose[:32]!r}"
        if not self.holds(lease):
            return f"node {self.node_key} holds no share of lease {lease[:44]}"
        return None

    async def _serve_stream(self, stream: Stream) -> None:
        opening = json.loads(stream.opening)
        await self.serve_channel(stream, str(opening["lease"]), str(opening["purpose"]), opening.get("name"))

    async def _direct(self, ws: ServerConnection) -> None:
        """A client that reaches this node directly: /client?lease=LEASE, then as through the relay."""
        assert ws.request is not None
        query = parse_qs(urlsplit(ws.request.path).query)
        lease = (query.get("lease") or [""])[0]
        if not lease or not self.holds(lease):
            await ws.close(4403, f"node {self.node_key} holds no share of that lease"[:120])
            return
        await self.serve_channel(WebSocketPipe(ws), lease, "client", None)

    # --- inside the channel

    async def serve_channel(self, pipe: Any, lease: str, purpose: str, name: str | None) -> None:
        channel = SecureChannel(pipe, self.context, server_side=True)
        try:
            await channel.handshake()
            if purpose == "endpoint":
                await self._endpoint(channel, lease, name)
            else:
                await self._client(channel, lease)
        except (TunnelError, ConnectionError) as e:
            log.debug("tunnel.stream_ended", lease=lease, error=str(e))
        finally:
            await channel.close()

    async def _refuse(self, channel: SecureChannel, why: str) -> None:
        log.info("tunnel.refused", node=self.node_key, reason=why)
        await channel.send_message({"error": why})

    async def _endpoint(self, channel: SecureChannel, lease: str, name: str | None) -> None:
        runner = self.job_of(lease)
        expose = _exposed(runner, name)
        if runner is None or expose is None:
            await self._refuse(channel, f"the job of lease {lease} on this node exposes no port named {name!r}")
            return
        try:
            reader, writer = await connect_job(runner, expose.port)
        except JobUnreachable as e:
            await self._refuse(channel, str(e))
            return
        await channel.send_message({"ok": True})
        await _pump(channel, reader, writer)

    async def _client(self, channel: SecureChannel, lease: str) -> None:
        nonce = new_nonce()
        await channel.send_message({"nonce": nonce.hex(), "node_key": str(self.node_key)})
        try:
            request, wallet = read_access(await channel.read_message(), self.node_key, nonce)
        except TunnelError as e:
            await self._refuse(channel, str(e))
            return
        if request.lease != lease:
            await self._refuse(channel, f"the request names lease {request.lease[:44]}, the stream lease {lease}")
            return
        try:
            client = await self._lease_client(lease)
        except TunnelError as e:
            await self._refuse(channel, str(e))
            return
        if wallet != client:
            await self._refuse(
                channel, f"wallet {wallet} is not the client of lease {lease} (the chain names {client})"
            )
            return
        runner = self.job_of(lease)
        if runner is None:
            await self._refuse(channel, f"no job of lease {lease} runs on node {self.node_key} now")
            return
        try:
            if request.kind == "tcp":
                assert request.port is not None
                reader, writer = await connect_job(runner, request.port)
                await channel.send_message({"ok": True})
                log.info("tunnel.forward", lease=lease, port=request.port)
                await _pump(channel, reader, writer)
            else:
                tty = request.kind == "shell"
                process = await spawn(
                    runner, request.command, tty=tty, rows=request.rows, cols=request.cols, term=request.term
                )
                await channel.send_message({"ok": True})
                log.info("tunnel.shell" if tty else "tunnel.exec", lease=lease)
                await _shell(channel, process)
        except JobUnreachable as e:
            await self._refuse(channel, str(e))

    async def _lease_client(self, lease: str) -> Pubkey:
        """The lease's client, as the chain says (this node's own RPC), never as the coordinator does."""
        if lease in self._clients:
            return self._clients[lease]
        if self.rpc_url is None:
            raise TunnelError(
                "this node reads no chain, so it cannot tell who the lease's client is: its supplier sets "
                "--url (GPUNET_WORKER_RPC_URL) for shells and forwards into its jobs"
            )
        try:
            async with AsyncClient(self.rpc_url) as chain:
                account = await fetch(chain, Pubkey.from_string(lease), "Lease")
        except AccountError as e:
            raise TunnelError(f"cannot read lease {lease} on chain: {e}") from None
        except Exception as e:
            raise TunnelError(
                f"cannot read lease {lease} from {self.rpc_url} now ({type(e).__name__}): retry"
            ) from None
        self._clients[lease] = account.client
        return account.client


def _exposed(runner: JobRunner | None, name: str | None) -> Expose | None:
    if runner is None or name is None:
        return None
    return next((e for e in runner.spec.expose if e.name == name), None)


async def _pump(channel: SecureChannel, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Bytes both ways between the channel and a TCP connection inside the job, until both ends finish."""

    async def to_job() -> None:
        while (data := await channel.recv()) is not None:
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()

    async def from_job() -> None:
        while data := await reader.read(MAX_DATA):
            await channel.send(data)

    inbound = asyncio.create_task(to_job())
    try:
        await from_job()  # the job's side ends the connection: the client hears its end
    finally:
        inbound.cancel()
        writer.close()


async def _shell(channel: SecureChannel, process: Any) -> None:
    """A shell's or a command's frames: its input, window size and signals in; its output and exit out."""

    async def input_() -> None:
        while (frame := await read_frame(channel)) is not None:
            kind, payload = frame
            if kind == STDIN:
                await process.write(payload)
            elif kind == STDIN_EOF:
                process.close_stdin()
            elif kind == RESIZE and len(payload) == 4:
                process.resize(int.from_bytes(payload[:2], "big"), int.from_bytes(payload[2:], "big"))
            elif kind == SIGNAL and len(payload) == 1:
                with contextlib.suppress(ValueError):  # no such signal: nothing sent
                    process.signal(payload[0])
        process.kill()  # the client went: nothing of its session outlives it

    inbound = asyncio.create_task(input_())
    try:
        while (chunk := await process.read()) is not None:
            name, data = chunk
            await send_frame(channel, STDOUT if name == "stdout" else STDERR, data)
        await send_frame(channel, EXIT, exit_payload(await process.wait()))
    finally:
        inbound.cancel()
        process.kill()
