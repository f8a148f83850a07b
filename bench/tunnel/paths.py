"""The ways the benchmark's client reaches the job's server, each as the same small byte-pipe
interface (send, recv, close), and what the client does over them (bench/tunnel/target.py's
commands): the same pump on every path, 64 KiB at a time."""

from __future__ import annotations

import asyncio
import os
import socket
import struct
import threading
import time
from typing import Protocol
from urllib.parse import urlencode

from solana.rpc.async_api import AsyncClient
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from websockets.asyncio.client import connect

from gpunet.protocol import sign_request
from gpunet.reach import open_access
from gpunet.tunnel import (
    MAX_DATA,
    AccessRequest,
    SecureChannel,
    TunnelError,
    WebSocketPipe,
    client_context,
    sign_access,
)

CHUNK = 64 * 1024
BLOCK = os.urandom(CHUNK)  # what the client sends (incompressible, as anything through TLS is)


class Conn(Protocol):
    async def send(self, data: bytes) -> None: ...
    async def recv(self) -> bytes | None: ...
    async def close(self) -> None: ...


class TcpConn:
    """A plain asyncio TCP connection to the job's port (the baseline): write and drain, read 64 KiB."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int) -> TcpConn:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer)

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def recv(self) -> bytes | None:
        return await self.reader.read(CHUNK) or None

    async def close(self) -> None:
        self.writer.close()


class Reader:
    """Exact reads over a Conn."""

    def __init__(self, conn: Conn) -> None:
        self.conn, self.buffer = conn, bytearray()

    async def exactly(self, n: int) -> bytes:
        while len(self.buffer) < n:
            data = await self.conn.recv()
            if data is None:
                raise ConnectionError(f"the connection ended {n - len(self.buffer)} bytes short")
            self.buffer += data
        out = bytes(self.buffer[:n])
        del self.buffer[:n]
        return out


async def forward(api: str, chain: AsyncClient, client: Keypair, lease: Pubkey, port: int, *, direct: bool) -> Conn:
    """A port forward as `gpunet lease forward` opens it (gpunet.reach.open_access): through the relay,
    or (direct) to the node's own listener, the relay's URL and the node's key looked up each time."""
    request = AccessRequest(kind="tcp", lease=str(lease), port=port)
    access = await open_access(api, chain, client, lease, request, direct=direct)
    if access.via != ("direct" if direct else "relay"):
        raise RuntimeError(f"the forward went {access.via}, not {'direct' if direct else 'through the relay'}")
    return access.channel


async def relay_forward(relay: str, client: Keypair, lease: Pubkey, node_key: Pubkey, port: int) -> SecureChannel:
    """open_access's relay attempt, step for step (the signed tunnel, TLS pinned to the node key, the
    signed access request), with the relay's URL and the node's key looked up once beforehand."""
    query = urlencode({"lease": str(lease), "node": str(node_key)})
    headers = sign_request(client, "GET", f"/client?{query}")
    ws = await connect(
        f"{relay}?{query}",
        additional_headers=headers,
        max_size=MAX_DATA + 1024,
        ping_interval=5,
        open_timeout=10,
        compression=None,  # as open_access
    )
    channel = SecureChannel(WebSocketPipe(ws), client_context(), server_side=False, node_key=node_key)
    try:
        await channel.handshake()
        hello = await channel.read_message()
        request = AccessRequest(kind="tcp", lease=str(lease), port=port)
        await channel.send_message(sign_access(client, node_key, bytes.fromhex(str(hello["nonce"])), request))
        answer = await channel.read_message()
    except BaseException:
        await ws.close()
        raise
    if "error" in answer:
        await channel.close()
        raise TunnelError(f"the node refused: {answer['error']}")
    return channel


# --- what the client does over a connection


async def upload(conn: Conn, n: int) -> float:
    """Seconds to send n bytes and hear the server has them all."""
    reader = Reader(conn)
    t0 = time.perf_counter()
    await conn.send(b"U" + struct.pack("!Q", n))
    left = n
    while left:
        k = min(CHUNK, left)
        await conn.send(BLOCK if k == CHUNK else BLOCK[:k])
        left -= k
    reply = await reader.exactly(9)
    elapsed = time.perf_counter() - t0
    if reply != b"K" + struct.pack("!Q", n):
        raise RuntimeError(f"the server answered {reply!r} to an upload of {n} bytes")
    return elapsed


async def download(conn: Conn, n: int) -> float:
    """Seconds from asking for n bytes to having them all."""
    t0 = time.perf_counter()
    await conn.send(b"D" + struct.pack("!Q", n))
    got = 0
    while got < n:
        data = await conn.recv()
        if data is None:
            raise ConnectionError(f"the download ended at {got} of {n} bytes")
        got += len(data)
    return time.perf_counter() - t0


async def echo_start(conn: Conn, size: int) -> Reader:
    """Puts the server into echo mode for messages of `size` bytes; the reader for the answers."""
    await conn.send(b"E" + struct.pack("!I", size))
    return Reader(conn)


async def round_trips(conn: Conn, reader: Reader, message: bytes, count: int) -> list[float]:
    """`count` round trips of `message` (a request, its echo as the response); seconds each."""
    times = []
    for _ in range(count):
        t0 = time.perf_counter()
        await conn.send(message)
        got = await reader.exactly(len(message))
        times.append(time.perf_counter() - t0)
        if got != message:
            raise RuntimeError("the echo came back different")
    return times


# --- the machine's own ceiling: blocking sockets on loopback, one thread each end


def raw_loopback(n: int, chunk: int = 1 << 20) -> float:
    """Seconds to move n bytes over loopback TCP with sendall/recv_into (1 MiB at a time), no event loop."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def sink() -> None:
        conn, _ = server.accept()
        buffer, got = bytearray(chunk), 0
        with conn:
            while got < n and (k := conn.recv_into(buffer)):
                got += k
            conn.sendall(b"K")

    thread = threading.Thread(target=sink, daemon=True)
    thread.start()
    data = memoryview(os.urandom(chunk))
    with socket.create_connection(("127.0.0.1", port)) as sock:
        t0 = time.perf_counter()
        left = n
        while left:
            k = min(chunk, left)
            sock.sendall(data[:k])
            left -= k
        sock.recv(1)
        elapsed = time.perf_counter() - t0
    thread.join()
    server.close()
    return elapsed
