"""The data plane into a lease's job: multiplexed streams between the coordinator's relay and a
node, and the end-to-end channel (TLS 1.3, the node's key pinned) that a client opens through one.

Three layers, each with one job:

- **The link** (`Link`, `Stream`): one WebSocket per node and coordinator replica, opened by the
  worker (suppliers sit behind NAT), apart from the worker's control session, so that no transfer
  can delay a heartbeat or a dispatch. It carries numbered streams in binary frames
  (`kind u8, stream u32, payload`), each with its own credit window: a side sends at most the
  bytes the other has granted, and grants more only as its reader takes them, so a slow reader
  holds back only its own stream and the relay buffers at most one window per stream.
- **The channel** (`SecureChannel`): TLS 1.3 over any byte pipe (a stream, or a WebSocket when
  the client reaches the node directly). The node presents a self-signed certificate of its own
  Ed25519 node key; the client checks that the key in it is the node key the chain's lease
  assignment names, so the relay in between sees only ciphertext and cannot stand in for the node.
- **The access request** (`AccessRequest`): inside the channel, the node sends a fresh nonce and
  the client answers with what it asks for (a shell, one command, a TCP port) signed by its wallet
  over `access_message` (lease, node key, nonce, request). The node admits only the lease's client
  as the chain names it. The nonce is bound to a channel the client has pinned, so nobody but the
  node ever sees it: a relay cannot replay a signature into a session of its own.

Why TLS with the key pinned and not Noise: TLS 1.3 comes with Python and OpenSSL, audited and
maintained, and accepts Ed25519 certificates (RFC 8410), the key type every node already has on
chain; the only Noise library on PyPI is unmaintained. Python's ssl cannot check a client
certificate by its key alone, which is why the client proves its wallet inside the channel.
"""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import json
import secrets
import ssl
import struct
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.x509.oid import NameOID
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.signature import Signature

from gpunet.errors import GpunetError
from gpunet.json_input import NotJson, parse_json

__all__ = [
    "MAX_DATA",
    "WINDOW",
    "AccessRequest",
    "Link",
    "LinkClosed",
    "Pipe",
    "SecureChannel",
    "Stream",
    "StreamRefused",
    "TunnelError",
    "WebSocketPipe",
    "access_message",
    "client_context",
    "node_context",
]

# --- the link's frames

OPEN, ACCEPT, REFUSE, DATA, CREDIT, FIN, RESET = range(1, 8)
_HEADER = struct.Struct("!BI")
MAX_DATA = 64 * 1024  # the most payload one frame carries (a larger frame closes the link)
WINDOW = 256 * 1024  # what each side of a stream may have in flight before the other grants more
MAX_STREAMS = 1024  # streams open at once on one link
LINK_DOMAIN_TAG = b"gpunet-tunnel-link-v1\x00"  # what a worker signs to open its link (with the nonce)


class TunnelError(GpunetError):
    """Something in the data plane failed; the message says what, and what to do."""


class LinkClosed(TunnelError):
    """The link to the node went away (its worker disconnected, or the node was lost)."""


class StreamRefused(TunnelError):
    """The other end would not open (or closed) the stream; the message is its reason."""


class _Socket(Protocol):
    async def send(self, message: bytes) -> None: ...
    async def recv(self) -> str | bytes: ...
    async def close(self, code: int = 1000, reason: str = "") -> None: ...


def link_message(nonce: bytes, node_key: Pubkey) -> bytes:
    """The bytes a worker signs with its node key to open a data-plane link (the relay's nonce)."""
    return LINK_DOMAIN_TAG + bytes(node_key) + nonce


@dataclass(eq=False)
class Stream:
    """One stream of a link: bytes in order both ways, with its own credit window each way."""

    link: Link
    id: int
    opening: bytes = b""  # what the opener said it is for (OPEN's payload)
    closed_reason: str | None = None  # set when the stream ended by a reset (ours or the peer's)
    _credit: int = WINDOW  # what this side may still send
    _allowed: int = WINDOW  # what the peer may have sent in all: the window and every grant since
    _received: int = 0
    _taken: int = 0  # taken by our reader and not yet granted back
    buffered: int = 0  # received and not yet taken by our reader: at most a window
    _inbox: asyncio.Queue[bytes | None] = field(default_factory=asyncio.Queue)
    _may_send: asyncio.Event = field(default_factory=asyncio.Event)
    _sent_fin: bool = False
    _got_fin: bool = False

    async def send(self, data: bytes) -> None:
        """Sends `data`, waiting for credit; StreamRefused when the stream was reset."""
        view = memoryview(data)
        while view:
            while self._credit <= 0 and self.closed_reason is None:
                self._may_send.clear()
                await self._may_send.wait()
            if self.closed_reason is not None:
                raise StreamRefused(self.closed_reason)
            n = min(len(view), self._credit, MAX_DATA)
            self._credit -= n
            await self.link.write(DATA, self.id, bytes(view[:n]))
            view = view[n:]

    async def recv(self) -> bytes | None:
        """The next bytes, or None once the other end finished; StreamRefused on a reset."""
        data = await self._inbox.get()
        if data is None:
            self._inbox.put_nowait(None)  # every later call sees the end too
            if self.closed_reason is not None:
                raise StreamRefused(self.closed_reason)
            return None
        self.buffered -= len(data)
        self._taken += len(data)
        if self._taken >= WINDOW // 2:  # in batches: not a frame per read
            grant, self._taken = self._taken, 0
            self._allowed += grant
            try:
                await self.link.write(CREDIT, self.id, struct.pack("!I", grant))
            except LinkClosed:
                pass
        return data

    async def close(self) -> None:
        """Says this side is done sending (the other end's recv returns None)."""
        if self._sent_fin or self.closed_reason is not None:
            return
        self._sent_fin = True
        try:
            await self.link.write(FIN, self.id, b"")
        except LinkClosed:
            pass
        if self._got_fin:
            self.link.streams.pop(self.id, None)

    async def reset(self, reason: str) -> None:
        """Ends the stream both ways at once, telling the other end why."""
        if self.closed_reason is None:
            self._ended(reason)
            try:
                await self.link.write(RESET, self.id, reason.encode()[:1024])
            except LinkClosed:
                pass
        self.link.streams.pop(self.id, None)

    # --- what the link delivers

    def _data(self, data: bytes) -> bool:
        """Queues what the peer sent; False when it sent beyond its window."""
        self._received += len(data)
        if self._received > self._allowed:
            return False
        self.buffered += len(data)
        self._inbox.put_nowait(data)
        return True

    def _credited(self, n: int) -> None:
        self._credit += n
        self._may_send.set()

    def _ended(self, reason: str | None) -> None:
        if reason is not None and self.closed_reason is None:
            self.closed_reason = reason
        self._inbox.put_nowait(None)
        self._may_send.set()


class Link:
    """One data-plane WebSocket carrying a node's streams. The relay opens streams (odd ids: only it
    opens them); `on_open(stream)` on the node's side decides whether to accept each one (it returns
    None to accept, else the reason to refuse) and serves it."""

    def __init__(
        self,
        ws: _Socket,
        on_open: Callable[[Stream], Awaitable[str | None]] | None = None,
        *,
        serve: Callable[[Stream], Awaitable[None]] | None = None,
    ) -> None:
        self.ws, self.on_open, self.serve = ws, on_open, serve
        self.streams: dict[int, Stream] = {}
        self._next = 1
        self._opening: dict[int, asyncio.Future[str | None]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._write_lock = asyncio.Lock()
        self.closed: str | None = None

    async def write(self, kind: int, stream: int, payload: bytes) -> None:
        if self.closed is not None:
            raise LinkClosed(self.closed)
        frame = _HEADER.pack(kind, stream) + payload
        try:
            async with self._write_lock:
                await self.ws.send(frame)
        except Exception as e:  # the socket is gone: every stream learns it from run()'s end
            raise LinkClosed(f"the data-plane link closed ({type(e).__name__})") from None

    async def open(self, opening: bytes, timeout: float = 10.0) -> Stream:
        """A new stream to the other end (the relay's side), once it accepts; StreamRefused with its
        reason, LinkClosed when the link goes meanwhile."""
        if len(self.streams) >= MAX_STREAMS:
            raise StreamRefused(f"this node has {MAX_STREAMS} streams open already: close some and retry")
        sid, self._next = self._next, self._next + 2
        stream = Stream(self, sid, opening)
        self.streams[sid] = stream
        answer: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        self._opening[sid] = answer
        try:
            await self.write(OPEN, sid, opening)
            reason = await asyncio.wait_for(answer, timeout)
        except TimeoutError:
            self.streams.pop(sid, None)
            raise StreamRefused(f"the node did not answer the stream's opening within {timeout:g} s") from None
        except BaseException:
            self.streams.pop(sid, None)
            raise
        finally:
            self._opening.pop(sid, None)
        if reason is not None:
            self.streams.pop(sid, None)
            raise StreamRefused(reason)
        return stream

    async def run(self) -> None:
        """Reads frames until the link closes; then every stream ends with LinkClosed's reason."""
        reason = "the data-plane link closed"
        try:
            while True:
                frame = await self.ws.recv()
                if isinstance(frame, str) or len(frame) < _HEADER.size:
                    reason = "a data-plane frame that is not binary or shorter than its header"
                    await self.ws.close(4400, reason)
                    break
                if len(frame) > _HEADER.size + MAX_DATA + 1024:
                    reason = f"a data-plane frame of {len(frame)} bytes (at most {MAX_DATA} of data)"
                    await self.ws.close(4400, reason[:120])
                    break
                kind, sid = _HEADER.unpack_from(frame)
                if (problem := await self._frame(kind, sid, frame[_HEADER.size :])) is not None:
                    reason = problem
                    await self.ws.close(4400, problem[:120])
                    break
        except Exception as e:
            reason = f"the data-plane link closed ({type(e).__name__})"
        finally:
            self.closed = reason
            for answer in self._opening.values():
                if not answer.done():
                    answer.set_exception(LinkClosed(reason))
            for stream in list(self.streams.values()):
                stream._ended(reason)
            self.streams.clear()
            for task in list(self._tasks):
                task.cancel()

    async def _frame(self, kind: int, sid: int, payload: bytes) -> str | None:
        """Handles one frame; the reason to close the link when it breaks the rules."""
        stream = self.streams.get(sid)
        if kind == OPEN:
            if self.on_open is None:
                return "this side opens the streams: the other may not"
            if sid in self.streams or sid % 2 == 0:
                return f"stream {sid} cannot be opened (in use, or not the opener's number)"
            if len(self.streams) >= MAX_STREAMS:
                await self.write(REFUSE, sid, f"{MAX_STREAMS} streams are open on this link".encode())
                return None
            stream = Stream(self, sid, payload)
            self.streams[sid] = stream
            task = asyncio.create_task(self._accept(stream))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            return None
        if kind in (ACCEPT, REFUSE):
            answer = self._opening.get(sid)
            if answer is not None and not answer.done():
                answer.set_result(None if kind == ACCEPT else payload.decode(errors="replace")[:1024])
            return None
        if stream is None:
            return None  # a stream that ended here already: what was in flight is dropped
        if kind == DATA:
            if not payload:
                return None
            if not stream._data(payload):
                await stream.reset(f"stream {sid} sent beyond its window of {WINDOW} bytes")
                return None
        elif kind == CREDIT:
            if len(payload) != 4:
                return "a credit frame carries 4 bytes"
            stream._credited(struct.unpack("!I", payload)[0])
        elif kind == FIN:
            stream._got_fin = True
            stream._ended(None)
            if stream._sent_fin:
                self.streams.pop(sid, None)
        elif kind == RESET:
            stream._ended(payload.decode(errors="replace")[:1024] or "the stream was reset")
            self.streams.pop(sid, None)
        else:
            return f"unknown data-plane frame kind {kind}"
        return None

    async def _accept(self, stream: Stream) -> None:
        assert self.on_open is not None
        try:
            refusal = await self.on_open(stream)
        except Exception as e:  # never a half-open stream the relay waits on
            refusal = f"the node could not open the stream ({type(e).__name__})"
        try:
            if refusal is not None:
                self.streams.pop(stream.id, None)
                await self.write(REFUSE, stream.id, refusal.encode()[:1024])
                return
            await self.write(ACCEPT, stream.id, b"")
            if self.serve is not None:
                await self.serve(stream)
        except LinkClosed:
            pass
        finally:
            if stream.id in self.streams and stream.closed_reason is None:
                await stream.close()


# --- byte pipes the channel runs over


class Pipe(Protocol):
    """Bytes both ways: a link's stream, or a WebSocket."""

    async def send(self, data: bytes) -> None: ...
    async def recv(self) -> bytes | None: ...
    async def close(self) -> None: ...


class WebSocketPipe:
    """A WebSocket's binary messages as a pipe (the client's connection to the relay or the node)."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws

    async def send(self, data: bytes) -> None:
        """Sends `data`; StreamRefused with the close's reason once the WebSocket closed (as recv)."""
        view = memoryview(data)
        try:
            for i in range(0, len(view), MAX_DATA):
                await self.ws.send(bytes(view[i : i + MAX_DATA]))
        except Exception as e:  # websockets' ConnectionClosed: the relay's code and reason say why
            raise StreamRefused(_close_reason(e)) from None

    async def recv(self) -> bytes | None:
        try:
            message = await self.ws.recv()
        except Exception as e:
            if _closed_cleanly(e):
                return None
            raise StreamRefused(_close_reason(e)) from None
        if isinstance(message, str):
            raise TunnelError("a text message on a tunnel's WebSocket: only binary frames carry its bytes")
        return message

    async def close(self) -> None:
        await self.ws.close()


def _closed_cleanly(error: Exception) -> bool:
    rcvd = getattr(error, "rcvd", None)
    return rcvd is not None and rcvd.code == 1000


def _close_reason(error: Exception) -> str:
    rcvd = getattr(error, "rcvd", None)
    if rcvd is not None and rcvd.reason:
        return str(rcvd.reason)
    return f"the tunnel's connection closed ({type(error).__name__})"


# --- TLS with the node key pinned


def _private_key(node: Keypair) -> Ed25519PrivateKey:
    return Ed25519PrivateKey.from_private_bytes(bytes(node)[:32])


def node_certificate(node: Keypair) -> tuple[bytes, bytes]:
    """A self-signed X.509 certificate of the node key and the key itself (PEM): what the node
    presents. Only its key matters (the client pins it); the dates span every clock a node may have."""
    key = _private_key(node)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, str(node.pubkey()))])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(datetime.datetime(2000, 1, 1, tzinfo=datetime.UTC))
        .not_valid_after(datetime.datetime(9999, 12, 31, tzinfo=datetime.UTC))
        .sign(key, None)
    )
    pem_key = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.PEM), pem_key


def node_context(node: Keypair, directory: Path | None = None) -> ssl.SSLContext:
    """The node's TLS 1.3 server context, presenting `node_certificate`. Python's ssl loads a key
    from a file only: it is written, readable by this user alone, into `directory` (the worker's
    state directory) and removed once loaded."""
    cert, key = node_certificate(node)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    with tempfile.TemporaryDirectory(dir=directory, prefix="tls-") as where:
        (Path(where) / "cert.pem").write_bytes(cert)
        key_path = Path(where) / "key.pem"
        key_path.touch(mode=0o600)
        key_path.write_bytes(key)
        context.load_cert_chain(Path(where) / "cert.pem", key_path)
    return context


def client_context() -> ssl.SSLContext:
    """The client's TLS 1.3 context: no certificate authority, since the node's certificate is
    self-signed; `SecureChannel.handshake` checks its key against the pinned node key instead."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


class SecureChannel:
    """TLS 1.3 over a pipe (memory BIOs: the pipe may be a stream of a link). A client channel
    pins `node_key`: its handshake fails unless the node's certificate holds exactly that key."""

    def __init__(self, pipe: Pipe, context: ssl.SSLContext, *, server_side: bool, node_key: Pubkey | None = None):
        if not server_side and node_key is None:
            raise ValueError("a client channel pins the node key")
        self.pipe, self.node_key = pipe, node_key
        self._in, self._out = ssl.MemoryBIO(), ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._in, self._out, server_side=server_side)
        self._buffer = bytearray()
        self._eof = False

    async def _flush(self) -> None:
        if pending := self._out.read():
            await self.pipe.send(pending)

    async def _fill(self) -> bool:
        """More ciphertext from the pipe; False at its end."""
        data = await self.pipe.recv()
        if data is None:
            self._in.write_eof()
            return False
        self._in.write(data)
        return True

    async def handshake(self, timeout: float = 15.0) -> None:
        """The TLS handshake; TunnelError when it fails or (client) the node's key is not the pinned one."""
        try:
            await asyncio.wait_for(self._handshake(), timeout)
        except TimeoutError:
            raise TunnelError(f"the tunnel's TLS handshake did not finish within {timeout:g} s") from None
        except ssl.SSLError as e:
            raise TunnelError(f"the tunnel's TLS handshake failed: {e.reason or e}") from None
        if self.node_key is not None:
            der = self._tls.getpeercert(binary_form=True)
            key = x509.load_der_x509_certificate(der).public_key() if der else None
            if not isinstance(key, Ed25519PublicKey) or key.public_bytes(
                serialization.Encoding.Raw, serialization.PublicFormat.Raw
            ) != bytes(self.node_key):
                raise TunnelError(
                    f"the other end of the tunnel is not node {self.node_key} (its TLS key is not the one the "
                    "chain's lease assignment names): refusing it; the relay or the network may be tampering"
                )

    async def _handshake(self) -> None:
        while True:
            try:
                self._tls.do_handshake()
                await self._flush()
                return
            except ssl.SSLWantReadError:
                await self._flush()
                if not await self._fill():
                    raise TunnelError("the tunnel closed during its TLS handshake") from None

    async def send(self, data: bytes) -> None:
        view = memoryview(data)
        for i in range(0, len(view), 16 * 1024):  # one TLS record each
            self._tls.write(view[i : i + 16 * 1024])
            if self._out.pending >= MAX_DATA:
                await self._flush()
        await self._flush()

    async def recv(self) -> bytes | None:
        """The next plaintext (buffered first), or None at the end of the channel."""
        if self._buffer:
            data = bytes(self._buffer)
            self._buffer.clear()
            return data
        while not self._eof:
            chunks = []
            try:
                while chunk := self._tls.read(256 * 1024):
                    chunks.append(chunk)
                self._eof = True  # an empty read: the other end closed the channel (close_notify)
            except ssl.SSLWantReadError:
                pass
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                self._eof = True
            except ssl.SSLError as e:
                raise TunnelError(f"the tunnel's TLS channel broke: {e.reason or e}") from None
            if data := b"".join(chunks) if chunks else b"":
                return data
            if self._eof or not await self._fill():
                self._eof = True
        return None

    async def read_exactly(self, n: int) -> bytes:
        while len(self._buffer) < n:
            data = await self.recv()
            if data is None:
                raise TunnelError("the tunnel ended in the middle of a message")
            self._buffer += data
        out = bytes(self._buffer[:n])
        del self._buffer[:n]
        return out

    async def send_message(self, message: dict[str, Any]) -> None:
        """One JSON message, length-prefixed (the access exchange)."""
        body = json.dumps(message, separators=(",", ":")).encode()
        await self.send(struct.pack("!I", len(body)) + body)

    async def read_message(self, limit: int = 64 * 1024) -> dict[str, Any]:
        (n,) = struct.unpack("!I", await self.read_exactly(4))
        if n > limit:
            raise TunnelError(f"a tunnel message of {n} bytes (at most {limit})")
        try:
            value = parse_json(await self.read_exactly(n))
        except NotJson as e:
            raise TunnelError(f"a tunnel message that is not JSON: {e}") from None
        if not isinstance(value, dict):
            raise TunnelError("a tunnel message must be a JSON object")
        return value

    async def close_write(self) -> None:
        """Says this side is done sending (TLS close_notify) and keeps reading: the other end's recv
        returns None, and what it still sends comes through (a TCP half-close, forwarded)."""
        try:
            self._tls.unwrap()
        except ssl.SSLError:  # SSLWantReadError: the close_notify is written, the peer's not yet read
            pass
        await self._flush()

    async def close(self) -> None:
        try:
            self._tls.unwrap()
        except ssl.SSLError:
            pass
        try:
            await self._flush()
            await self.pipe.close()
        except Exception:  # the pipe went first: nothing left to say
            pass


# --- what the client asks the node for, inside the channel

ACCESS_DOMAIN_TAG = b"gpunet-access-v1\x00"


class AccessRequest(BaseModel):
    """What a client asks of its lease's node: `shell` (a terminal; `command` empty for the job's
    shell), `exec` (one command, no terminal) or `tcp` (a connection to `port` inside the job)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    kind: Literal["shell", "exec", "tcp"]
    lease: str
    command: list[str] = Field(default=[], max_length=256)
    port: int | None = Field(default=None, ge=1, le=65535)
    rows: int = Field(default=24, ge=1, le=1000)
    cols: int = Field(default=80, ge=1, le=1000)
    term: str = Field(default="xterm-256color", max_length=64, pattern=r"^[A-Za-z0-9._+-]*$")

    def canonical(self) -> bytes:
        return json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":")).encode()


def access_message(node_key: Pubkey, nonce: bytes, request: AccessRequest) -> bytes:
    """The bytes a client's wallet signs to be let in: domain tag, node key, the node's nonce (fresh
    in this channel), the request's SHA-256. Bound to one node and one channel: never valid twice."""
    return ACCESS_DOMAIN_TAG + bytes(node_key) + nonce + hashlib.sha256(request.canonical()).digest()


def new_nonce() -> bytes:
    return secrets.token_bytes(32)


def sign_access(wallet: Keypair, node_key: Pubkey, nonce: bytes, request: AccessRequest) -> dict[str, Any]:
    """The client's answer to the node's nonce: its request, wallet and signature."""
    return {
        "request": request.model_dump(mode="json"),
        "wallet": str(wallet.pubkey()),
        "signature": str(wallet.sign_message(access_message(node_key, nonce, request))),
    }


def read_access(answer: dict[str, Any], node_key: Pubkey, nonce: bytes) -> tuple[AccessRequest, Pubkey]:
    """The request and the wallet that signed it; TunnelError saying what is wrong."""
    if set(answer) != {"request", "wallet", "signature"}:
        raise TunnelError('an access answer is {"request": {...}, "wallet": base58, "signature": base58}')
    try:
        request = AccessRequest.model_validate(answer["request"])
        wallet = Pubkey.from_string(str(answer["wallet"]))
        signature = Signature.from_string(str(answer["signature"]))
    except ValidationError as e:
        first = e.errors()[0]
        raise TunnelError(f"request.{'.'.join(map(str, first['loc']))}: {first['msg']}") from None
    except ValueError:
        raise TunnelError("the wallet or the signature is not base58") from None
    if not signature.verify(wallet, access_message(node_key, nonce, request)):
        raise TunnelError("the signature is not the wallet's over this request and this channel's nonce")
    return request, wallet


# --- a shell or a command, once admitted: typed frames inside the channel

# client -> node
STDIN, STDIN_EOF, RESIZE, SIGNAL = 1, 2, 3, 4
# node -> client
STDOUT, STDERR, EXIT = 5, 6, 7
_FRAME = struct.Struct("!BI")
MAX_FRAME = 1 << 20


async def send_frame(channel: SecureChannel, kind: int, payload: bytes = b"") -> None:
    await channel.send(_FRAME.pack(kind, len(payload)) + payload)


async def read_frame(channel: SecureChannel) -> tuple[int, bytes] | None:
    """The next (kind, payload), or None when the channel ended between frames."""
    if not channel._buffer:
        data = await channel.recv()
        if data is None:
            return None
        channel._buffer += data
    kind, n = _FRAME.unpack(await channel.read_exactly(_FRAME.size))
    if n > MAX_FRAME:
        raise TunnelError(f"a shell frame of {n} bytes (at most {MAX_FRAME})")
    return kind, await channel.read_exactly(n)


def resize_payload(rows: int, cols: int) -> bytes:
    return struct.pack("!HH", rows, cols)


def exit_payload(code: int) -> bytes:
    return struct.pack("!i", code)
