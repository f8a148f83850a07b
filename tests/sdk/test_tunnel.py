"""The data plane's layers on their own (gpunet.tunnel): two links joined by an in-memory socket
pair (the one fake, at the WebSocket boundary), TLS with the node key pinned, the signed access."""

from __future__ import annotations

import asyncio

import pytest
from solders.keypair import Keypair
from websockets.exceptions import ConnectionClosedError
from websockets.frames import Close

from gpunet.tunnel import (
    MAX_DATA,
    WINDOW,
    AccessRequest,
    Link,
    SecureChannel,
    Stream,
    StreamRefused,
    TunnelError,
    WebSocketPipe,
    client_context,
    new_nonce,
    node_context,
    read_access,
    sign_access,
)


class _End:
    """One end of an in-memory WebSocket pair: binary messages in order, a close both ways."""

    def __init__(self) -> None:
        self.inbox: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.peer: _End | None = None
        self.sent: list[bytes] = []

    async def send(self, message: bytes) -> None:
        assert self.peer is not None
        self.sent.append(message)
        self.peer.inbox.put_nowait(message)

    async def recv(self) -> bytes:
        message = await self.inbox.get()
        if message is None:
            self.inbox.put_nowait(None)
            raise ConnectionError("closed")
        return message

    async def close(self, code: int = 1000, reason: str = "") -> None:
        assert self.peer is not None
        self.peer.inbox.put_nowait(None)
        self.inbox.put_nowait(None)


def _pair() -> tuple[_End, _End]:
    a, b = _End(), _End()
    a.peer, b.peer = b, a
    return a, b


async def _echo(stream: Stream) -> None:
    while (data := await stream.recv()) is not None:
        await stream.send(data)
    await stream.close()


async def _links(on_open=None, serve=_echo):
    relay_end, node_end = _pair()
    relay = Link(relay_end)
    node = Link(node_end, on_open or (lambda s: _accept()), serve=serve)
    tasks = [asyncio.create_task(relay.run()), asyncio.create_task(node.run())]
    return relay, node, tasks, relay_end


async def _accept() -> None:
    return None


async def test_a_stream_carries_bytes_both_ways_in_order_and_ends() -> None:
    relay, _, tasks, _ = await _links()
    stream = await relay.open(b"echo")
    payload = bytes(range(256)) * 5000  # 1.28 MB: several windows, many frames
    sender = asyncio.create_task(stream.send(payload))
    got = bytearray()
    while len(got) < len(payload):
        got += await stream.recv() or b""
    await sender
    await stream.close()
    assert await stream.recv() is None
    assert bytes(got) == payload
    for t in tasks:
        t.cancel()


async def test_a_refusal_reaches_the_opener_with_its_reason() -> None:
    async def refuse(stream: Stream) -> str | None:
        return "no such lease here"

    relay, _, tasks, _ = await _links(on_open=refuse)
    with pytest.raises(StreamRefused, match="no such lease here"):
        await relay.open(b"x")
    for t in tasks:
        t.cancel()


async def test_a_reader_that_does_not_read_holds_back_only_its_own_stream() -> None:
    held: list[Stream] = []

    async def sink(stream: Stream) -> None:
        if stream.opening == b"slow":
            held.append(stream)
            await asyncio.Event().wait()  # never reads
        await _echo(stream)

    relay, _, tasks, relay_end = await _links(serve=sink)
    slow = await relay.open(b"slow")
    stuck = asyncio.create_task(slow.send(b"x" * (4 * WINDOW)))
    await asyncio.sleep(0.2)
    assert not stuck.done()  # out of credit after one window
    sent = sum(len(m) - 5 for m in relay_end.sent if m[0] == 4)
    assert sent == WINDOW  # exactly the window: never more in flight
    fast = await relay.open(b"fast")
    await fast.send(b"ping")
    assert await fast.recv() == b"ping"  # the other stream is not held up
    stuck.cancel()
    for t in tasks:
        t.cancel()


async def test_a_peer_that_sends_beyond_its_window_has_its_stream_reset() -> None:
    relay, node, tasks, _ = await _links(serve=lambda s: asyncio.Event().wait())
    stream = await relay.open(b"x")
    stream._credit = 10 * WINDOW  # a cheating sender ignores its window
    await stream.send(b"y" * (WINDOW + MAX_DATA))
    await asyncio.sleep(0.1)
    with pytest.raises(StreamRefused, match="beyond its window"):
        await stream.send(b"z")
    # honest control: the link still opens and serves streams
    assert stream.id not in node.streams
    for t in tasks:
        t.cancel()


async def test_an_oversized_frame_closes_the_link() -> None:
    relay, node, tasks, relay_end = await _links()
    stream = await relay.open(b"x")
    await relay_end.send(bytes([4]) + stream.id.to_bytes(4, "big") + b"z" * (MAX_DATA + 2048))
    await asyncio.wait_for(tasks[1], 2)
    assert "at most" in (node.closed or "")
    tasks[0].cancel()


async def _channel_pair(node: Keypair, pinned, tmp_path):
    relay, _, tasks, _ = await _links(serve=_serve_tls(node, tmp_path))
    stream = await relay.open(b"tls")
    client = SecureChannel(stream, client_context(), server_side=False, node_key=pinned)
    return client, tasks


def _serve_tls(node: Keypair, tmp_path):
    async def serve(stream: Stream) -> None:
        channel = SecureChannel(stream, node_context(node, tmp_path), server_side=True)
        try:
            await channel.handshake()
        except TunnelError:
            return
        nonce = new_nonce()
        await channel.send_message({"nonce": nonce.hex()})
        try:
            request, wallet = read_access(await channel.read_message(), node.pubkey(), nonce)
            await channel.send_message({"ok": str(wallet), "kind": request.kind})
        except TunnelError as e:
            await channel.send_message({"error": str(e)})
        await channel.close()

    return serve


async def test_the_client_reaches_the_pinned_node_and_proves_its_wallet(tmp_path) -> None:
    node, wallet = Keypair(), Keypair()
    client, tasks = await _channel_pair(node, node.pubkey(), tmp_path)
    await client.handshake()
    nonce = bytes.fromhex((await client.read_message())["nonce"])
    await client.send_message(sign_access(wallet, node.pubkey(), nonce, AccessRequest(kind="shell", lease="L")))
    assert await client.read_message() == {"ok": str(wallet.pubkey()), "kind": "shell"}
    for t in tasks:
        t.cancel()


async def test_a_channel_closed_by_its_peer_ends_for_the_reader_and_never_spins(tmp_path) -> None:
    """The client closes (TLS close_notify, then the stream's end) while the node reads: the node's
    recv says the end (None), and the event loop runs on meanwhile (it once looped on read()'s b"")."""
    node = Keypair()
    ended: asyncio.Future[bytes | None] = asyncio.get_running_loop().create_future()

    async def serve(stream: Stream) -> None:
        channel = SecureChannel(stream, node_context(node, tmp_path), server_side=True)
        await channel.handshake()
        await channel.send_message({"ok": True})
        ended.set_result(await channel.recv())
        await channel.close()

    relay, _, tasks, _ = await _links(serve=serve)
    client = SecureChannel(await relay.open(b"tls"), client_context(), server_side=False, node_key=node.pubkey())
    await client.handshake()
    assert await client.read_message() == {"ok": True}
    await client.close()
    assert await asyncio.wait_for(ended, 5) is None
    for t in tasks:
        t.cancel()


async def test_a_node_that_is_not_the_pinned_one_is_refused(tmp_path) -> None:
    impostor, expected = Keypair(), Keypair()
    client, tasks = await _channel_pair(impostor, expected.pubkey(), tmp_path)
    with pytest.raises(TunnelError, match="not node"):
        await client.handshake()
    for t in tasks:
        t.cancel()


async def test_an_access_signed_for_another_nonce_or_node_or_request_is_refused(tmp_path) -> None:
    node, wallet = Keypair(), Keypair()
    request = AccessRequest(kind="tcp", lease="L", port=8888)
    nonce = new_nonce()
    good = sign_access(wallet, node.pubkey(), nonce, request)
    assert read_access(good, node.pubkey(), nonce) == (request, wallet.pubkey())  # the honest control
    with pytest.raises(TunnelError, match="signature"):
        read_access(good, node.pubkey(), new_nonce())  # replayed into another channel
    with pytest.raises(TunnelError, match="signature"):
        read_access(good, Keypair().pubkey(), nonce)  # shown to another node
    changed = {**good, "request": {**good["request"], "port": 22}}
    with pytest.raises(TunnelError, match="signature"):
        read_access(changed, node.pubkey(), nonce)  # the request changed on the way
    with pytest.raises(TunnelError, match="port"):
        read_access({**good, "request": {**good["request"], "port": 70000}}, node.pubkey(), nonce)


async def test_a_channel_the_node_closes_ends_for_the_client(tmp_path) -> None:
    node = Keypair()

    async def say_bye(stream: Stream) -> None:
        channel = SecureChannel(stream, node_context(node, tmp_path), server_side=True)
        await channel.handshake()
        await channel.send(b"bye")
        await channel.close()

    relay, _, tasks, _ = await _links(serve=say_bye)
    client = SecureChannel(await relay.open(b"tls"), client_context(), server_side=False, node_key=node.pubkey())
    await client.handshake()
    got = b""
    while (data := await asyncio.wait_for(client.recv(), 5)) is not None:  # it once spun on empty reads
        got += data
    assert got == b"bye"
    for t in tasks:
        t.cancel()


async def test_a_websocket_closed_under_a_send_says_why_as_a_tunnel_error() -> None:
    """The relay closes a client's tunnel (4502, its reason) as the client sends its handshake: the
    send fails with the relay's reason as a TunnelError, as a receive does (it was websockets' own
    ConnectionClosedError, past every caller's `except TunnelError`)."""

    class Closed:
        async def send(self, message: bytes) -> None:
            raise ConnectionClosedError(Close(4502, "node N has no data-plane link"), None)

        async def recv(self) -> bytes:
            raise ConnectionClosedError(Close(4502, "node N has no data-plane link"), None)

    pipe = WebSocketPipe(Closed())
    with pytest.raises(StreamRefused, match="node N has no data-plane link"):
        await pipe.send(b"hello")
    with pytest.raises(StreamRefused, match="node N has no data-plane link"):
        await pipe.recv()
