"""`gpunet lease shell|exec|forward` without services: bad input refused before anything is
reached, the local terminal's raw mode and size (on a pty), and the pumps against a node of this
process (a real TLS channel with the node key pinned, over an in-memory pipe): a session's frames
both ways, its exit status, a channel lost before it, a forwarded connection's half-close. The end
to end runs, with a coordinator and workers, are tests/coordinator/test_cli_reach.py."""

from __future__ import annotations

import asyncio
import fcntl
import os
import pty
import signal
import socket
import struct
import termios
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from solders.keypair import Keypair
from typer.testing import CliRunner

from gpunet.cli import app, lease_reach
from gpunet.cli.common import BadInput
from gpunet.cli.lease_reach import (
    ChannelLost,
    Input,
    Interrupted,
    _reach_exit,
    exit_status,
    parse_forward,
    pump_tcp,
    raw_terminal,
    run_session,
    terminal_type,
    window_size,
)
from gpunet.exits import Exit
from gpunet.keys import create_keypair_file
from gpunet.reach import Access, ReachError
from gpunet.tunnel import (
    EXIT,
    RESIZE,
    SIGNAL,
    STDERR,
    STDIN,
    STDIN_EOF,
    STDOUT,
    SecureChannel,
    client_context,
    exit_payload,
    node_context,
    read_frame,
    send_frame,
)

LEASE = str(Keypair().pubkey())
DEAD = "http://127.0.0.1:9"  # nothing answers there: a command that reached out would say so


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def wallet(tmp_path: Path) -> Path:
    path = tmp_path / "wallet.json"
    create_keypair_file(path, Keypair())
    return path


def _gpunet(*args: str, wallet: Path | None = None) -> tuple[int, str]:
    """`gpunet ARGS` with nothing to reach at --url and --coordinator (given first: after `--`, an
    exec's arguments are its command's)."""
    argv = ["--url", DEAD, "--coordinator", DEAD, *(["--keypair", str(wallet)] if wallet else [])]
    result = CliRunner().invoke(app, [*args[:2], *argv, *args[2:]])
    return result.exit_code, result.output


# --- bad input: a clear error, the house's exit code, nothing started


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("abc", "is not REMOTE_PORT[:LOCAL_PORT]"),
        ("8888:", "is not REMOTE_PORT[:LOCAL_PORT]"),
        ("88:88:88", "is not REMOTE_PORT[:LOCAL_PORT]"),
        ("8888:-1", "is not REMOTE_PORT[:LOCAL_PORT]"),
        ("0", "the job's port 0 is out of range"),
        ("70000", "the job's port 70000 is out of range"),
        ("8888:65536", "the local port 65536 is out of range"),
    ],
)
def test_a_bad_forward_spec_is_refused(spec: str, message: str, wallet: Path) -> None:
    code, output = _gpunet("lease", "forward", LEASE, spec, wallet=wallet)
    assert code == Exit.BAD_INPUT and message in output, output
    with pytest.raises(BadInput, match=r"out of range|is not REMOTE_PORT"):
        parse_forward(spec)


def test_forward_specs() -> None:
    assert parse_forward("8888") == (8888, 8888)
    assert parse_forward("8888:9999") == (8888, 9999)
    assert parse_forward(" 22:0 ") == (22, 0)


def test_a_local_port_in_use_is_refused_before_anything_is_reached(wallet: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, output = _gpunet("lease", "forward", LEASE, f"8888:{port}", wallet=wallet)
    assert code == Exit.BAD_INPUT, output
    assert f"local port {port} is in use" in output and "0 for any free one" in output
    assert "cannot reach" not in output  # neither the RPC node nor the coordinator was asked


def test_a_forward_that_cannot_start_leaves_its_port_free(wallet: Path) -> None:
    port = _free_port()
    code, output = _gpunet("lease", "forward", LEASE, f"8888:{port}", wallet=wallet)
    assert code == Exit.UNREACHABLE and "cannot reach the RPC node" in output, output
    with socket.socket() as again:  # nothing listens there any more
        again.bind(("127.0.0.1", port))


@pytest.mark.parametrize("command", [["shell"], ["exec", "--", "true"], ["forward", "8888:0"]])
def test_a_bad_lease_address_or_keypair_is_refused(command: list[str], wallet: Path, tmp_path: Path) -> None:
    name, *rest = command
    code, output = _gpunet("lease", name, "not-a-lease", *rest, wallet=wallet)
    assert code == Exit.BAD_INPUT and "'not-a-lease' is not a valid lease address" in output, output
    code, output = _gpunet("lease", name, LEASE, *rest, wallet=tmp_path / "missing.json")
    assert code == Exit.KEYPAIR and "missing.json" in output, output


def test_exec_needs_a_command_and_rank_is_a_count(wallet: Path) -> None:
    code, output = _gpunet("lease", "exec", LEASE, wallet=wallet)
    assert code == Exit.BAD_INPUT and "Missing argument" in output
    code, output = _gpunet("lease", "exec", LEASE, "--rank", "-1", "--", "true", wallet=wallet)
    assert code == Exit.BAD_INPUT and "--rank" in output


def test_an_oversized_command_is_refused(wallet: Path) -> None:
    code, output = _gpunet("lease", "exec", LEASE, "--", *["x"] * 300, wallet=wallet)
    assert code == Exit.BAD_INPUT and "command" in output and "256" in output, output
    code, output = _gpunet("lease", "exec", LEASE, "--", "echo", "y" * 70_000, wallet=wallet)
    assert code == Exit.BAD_INPUT and "too long" in output, output


# --- the local terminal


def test_exit_status_and_terminal_type() -> None:
    assert [exit_status(c) for c in (0, 3, 255, 256, -2, -9, -1000)] == [0, 3, 255, 255, 130, 137, 255]
    assert terminal_type({"TERM": "screen-256color"}) == "screen-256color"
    assert terminal_type({}) == terminal_type({"TERM": "bad term;rm"}) == "xterm-256color"


def test_raw_mode_is_restored_on_every_way_out() -> None:
    main, secondary = pty.openpty()
    try:
        before = termios.tcgetattr(secondary)
        assert before[3] & termios.ICANON and before[3] & termios.ECHO and before[3] & termios.ISIG
        with raw_terminal(secondary):
            inside = termios.tcgetattr(secondary)
            assert not inside[3] & (termios.ICANON | termios.ECHO | termios.ISIG)  # Ctrl-C is a byte
        assert termios.tcgetattr(secondary) == before
        with pytest.raises(RuntimeError), raw_terminal(secondary):
            raise RuntimeError("the session failed")
        assert termios.tcgetattr(secondary) == before
    finally:
        os.close(main)
        os.close(secondary)


def test_window_size_of_the_first_terminal() -> None:
    main, secondary = pty.openpty()
    read, write = os.pipe()
    try:
        fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", 33, 101, 0, 0))
        assert window_size(read, secondary) == (33, 101)
        assert window_size(read) == (24, 80)  # no terminal
    finally:
        for fd in (main, secondary, read, write):
            os.close(fd)


async def test_input_reads_pipes_and_regular_files(tmp_path: Path) -> None:
    read, write = os.pipe()
    os.write(write, b"hi\n")
    os.close(write)
    piped = Input(read)
    assert await piped.read() == b"hi\n" and await piped.read() is None
    os.close(read)
    path = tmp_path / "input"
    path.write_bytes(b"from a file")
    with path.open("rb") as f:
        filed = Input(f.fileno())  # epoll refuses regular files: read in a thread
        assert await filed.read() == b"from a file" and await filed.read() is None


# --- a node of this process: a real TLS channel pinned to its key, over an in-memory pipe


class _Pipe:
    def __init__(self) -> None:
        self.inbox: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.peer: _Pipe | None = None

    async def send(self, data: bytes) -> None:
        assert self.peer is not None
        self.peer.inbox.put_nowait(data)

    async def recv(self) -> bytes | None:
        data = await self.inbox.get()
        if data is None:
            self.inbox.put_nowait(None)
        return data

    async def close(self) -> None:
        assert self.peer is not None
        self.peer.inbox.put_nowait(None)


async def _channel(
    tmp_path: Path, serve: Callable[[SecureChannel], Awaitable[None]]
) -> tuple[SecureChannel, asyncio.Task[None]]:
    """A client channel to a node that runs `serve` on its end (and then closes it)."""
    node = Keypair()
    ours, theirs = _Pipe(), _Pipe()
    ours.peer, theirs.peer = theirs, ours
    server = SecureChannel(theirs, node_context(node, tmp_path), server_side=True)

    async def run() -> None:
        await server.handshake()
        try:
            await serve(server)
        finally:
            await server.close()

    task = asyncio.create_task(run())
    client = SecureChannel(ours, client_context(), server_side=False, node_key=node.pubkey())
    await client.handshake()
    return client, task


def _collect() -> tuple[list[bytes], Callable[[bytes], None]]:
    seen: list[bytes] = []
    return seen, seen.append


async def test_a_session_carries_input_resizes_and_signals_and_returns_the_exit_status(tmp_path: Path) -> None:
    heard: list[tuple[int, bytes]] = []

    async def node(channel: SecureChannel) -> None:  # a command that echoes its input until its end
        while (frame := await read_frame(channel)) is not None:
            heard.append(frame)
            kind, payload = frame
            if kind == STDIN:
                await send_frame(channel, STDOUT, payload.upper())
            elif kind == STDIN_EOF:
                await send_frame(channel, STDERR, b"bye\n")
                await send_frame(channel, EXIT, exit_payload(7))
                return

    channel, task = await _channel(tmp_path, node)
    read, write = os.pipe()
    os.write(write, b"hello\n")
    resizes: asyncio.Queue[tuple[int, int]] = asyncio.Queue()
    signals: asyncio.Queue[int] = asyncio.Queue()
    out, err = _collect(), _collect()
    session = asyncio.create_task(run_session(channel, Input(read), out[1], err[1], resizes=resizes, signals=signals))
    await _until(lambda: out[0] == [b"HELLO\n"])
    resizes.put_nowait((40, 120))
    signals.put_nowait(signal.SIGINT)  # the first Ctrl-C goes to the remote command
    await _until(lambda: len(heard) == 3)
    os.close(write)
    assert await asyncio.wait_for(session, 5) == 7
    assert err[0] == [b"bye\n"]
    assert heard == [(STDIN, b"hello\n"), (RESIZE, struct.pack("!HH", 40, 120)), (SIGNAL, bytes([2])), (STDIN_EOF, b"")]
    os.close(read)
    await task


async def test_a_second_ctrl_c_ends_the_session_here(tmp_path: Path) -> None:
    channel, task = await _channel(tmp_path, _silent)
    signals: asyncio.Queue[int] = asyncio.Queue()
    session = asyncio.create_task(run_session(channel, None, _collect()[1], _collect()[1], signals=signals))
    signals.put_nowait(signal.SIGINT)
    signals.put_nowait(signal.SIGINT)
    with pytest.raises(Interrupted) as interrupted:
        await asyncio.wait_for(session, 5)
    assert interrupted.value.code == 130
    task.cancel()


async def _silent(channel: SecureChannel) -> None:
    while await read_frame(channel) is not None:
        pass


async def test_a_channel_that_ends_before_the_exit_status_is_lost(tmp_path: Path) -> None:
    async def node(channel: SecureChannel) -> None:
        await send_frame(channel, STDOUT, b"started\n")  # then the node goes

    channel, task = await _channel(tmp_path, node)
    out = _collect()
    with pytest.raises(ChannelLost, match="before the command's exit status"):
        await asyncio.wait_for(run_session(channel, None, out[1], _collect()[1]), 5)
    assert out[0] == [b"started\n"]
    await task


async def test_a_forwarded_connection_half_closes_and_still_gets_its_answer(tmp_path: Path) -> None:
    """The local client ends sending (as `nc -N` does); the node's side sees the end, answers, closes."""

    async def node(channel: SecureChannel) -> None:
        request = b""
        while (data := await channel.recv()) is not None:
            request += data
        await channel.send(b"answer to " + request)

    pumps: list[asyncio.Task[None]] = []

    async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        channel, node_task = await _channel(tmp_path, node)
        try:
            await pump_tcp(channel, reader, writer)
        finally:
            node_task.cancel()

    def local(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        pumps.append(asyncio.create_task(pump(reader, writer)))

    server = await asyncio.start_server(local, "127.0.0.1", 0)
    reader, writer = await asyncio.open_connection(*server.sockets[0].getsockname()[:2])
    try:
        writer.write(b"the question")
        writer.write_eof()
        assert await asyncio.wait_for(reader.read(), 5) == b"answer to the question"
        await asyncio.wait_for(asyncio.gather(*pumps), 5)  # and the pump ended with the node's end
    finally:
        writer.close()
        server.close()
        for task in pumps:
            task.cancel()
        await asyncio.gather(*pumps, return_exceptions=True)


async def _until(check: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.01)


# --- the commands against a node of this process (the coordinator and the chain stood in for)


@pytest.fixture
def node_here(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """`open_access` answered by a node of this process running `serve`; the chain's assignment too."""
    node_key = Keypair().pubkey()
    served: dict[str, Callable[[SecureChannel], Awaitable[None]]] = {}

    async def assigned(chain, lease, rank):
        return node_key

    async def open_access(coordinator, chain, client, lease, request, *, rank=0, direct=True):
        channel, _ = await _channel(tmp_path, served["serve"])
        return Access(channel, node_key, rank, "relay")

    monkeypatch.setattr(lease_reach, "node_of_rank", assigned)
    monkeypatch.setattr(lease_reach, "open_access", open_access)
    monkeypatch.setattr(lease_reach, "stdin_is_terminal", lambda: False)

    def serve(function: Callable[[SecureChannel], Awaitable[None]]) -> str:
        served["serve"] = function
        return str(node_key)

    return serve


def test_exec_exits_with_the_remote_status(node_here, wallet: Path) -> None:
    async def node(channel: SecureChannel) -> None:
        await _until_eof(channel)
        await send_frame(channel, STDOUT, b"out\n")
        await send_frame(channel, STDERR, b"err\n")
        await send_frame(channel, EXIT, exit_payload(7))

    node_here(node)
    result = CliRunner().invoke(
        app, ["lease", "exec", LEASE, "--keypair", str(wallet), "--url", DEAD, "--", "sh", "-c", "exit 7"]
    )
    assert result.exit_code == 7, result.output
    assert result.stdout == "out\n" and result.stderr == "err\n"


async def _until_eof(channel: SecureChannel) -> None:
    while (frame := await read_frame(channel)) is not None and frame[0] != STDIN_EOF:
        pass


def test_a_shell_whose_node_is_lost_says_so_and_exits_14(node_here, wallet: Path) -> None:
    async def node(channel: SecureChannel) -> None:
        await send_frame(channel, STDOUT, b"$ ")  # and then the node is gone, without an exit status

    key = node_here(node)
    result = CliRunner().invoke(app, ["lease", "shell", LEASE, "--keypair", str(wallet), "--url", DEAD])
    assert result.exit_code == Exit.CONNECTION_LOST == 14, result.output
    assert result.stdout == "$ "
    said = " ".join(result.stderr.split())
    assert f"the node running your shell ({key}, relay) was lost" in said
    assert "the lease's share moves to another node" in said
    assert f"run `gpunet lease shell {LEASE}` again to reconnect" in said
    assert "reconnect to rank" not in said  # no terminal: no prompt


def test_exec_whose_node_is_lost_exits_14(node_here, wallet: Path) -> None:
    node_here(_silent_until_eof)
    result = CliRunner().invoke(
        app, ["lease", "exec", LEASE, "--rank", "1", "--keypair", str(wallet), "--url", DEAD, "--", "sleep", "600"]
    )
    assert result.exit_code == Exit.CONNECTION_LOST, result.output
    assert "was lost" in result.stderr and "how the command ended is unknown" in " ".join(result.stderr.split())


async def _silent_until_eof(channel: SecureChannel) -> None:
    await _until_eof(channel)  # then gone


def test_why_a_channel_was_not_opened_is_the_exit_code() -> None:
    node = "node 9xQ refused: nothing listens on port 8888 in the job"
    stranger = "the coordinator will not say where lease L's nodes are: the coordinator refused (403): not yours"
    down = "the coordinator will not say where lease L's nodes are: cannot reach the coordinator at http://x: boom"
    unreached = "cannot reach node 9xQ of lease L: relay ws://x/client: HTTP 502"
    assert [_reach_exit(ReachError(m)) for m in (node, stranger, down, unreached)] == [
        Exit.REFUSED,
        Exit.REFUSED,
        Exit.UNREACHABLE,
        Exit.UNREACHABLE,
    ]


def test_a_forward_says_each_failed_connection_goes_on_and_ends_with_the_lease(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, wallet: Path
) -> None:
    """A connection the node refuses is a line and ends alone; the next one gets through; the lease's
    end (as the chain says it) ends the forward with 14."""
    node_key = Keypair().pubkey()
    attempts: list[int] = []
    lease_closed = threading.Event()

    async def assigned(chain, lease, rank):
        if lease_closed.is_set():
            raise ReachError(f"lease {lease} is closed: its job is no longer reached")
        return node_key

    async def where(coordinator, client, lease):
        return {"relay": "ws://relay/client", "nodes": [{"node_key": str(node_key), "direct": None}]}

    async def echo(channel: SecureChannel) -> None:
        while (data := await channel.recv()) is not None:
            await channel.send(data.upper())

    async def open_access(coordinator, chain, client, lease, request, *, rank=0, direct=True):
        attempts.append(request.port)
        if len(attempts) == 1:
            raise ReachError(f"node {node_key} refused: nothing listens on port {request.port} in the job")
        channel, _ = await _channel(tmp_path, echo)
        return Access(channel, node_key, rank, "relay")

    monkeypatch.setattr(lease_reach, "node_of_rank", assigned)
    monkeypatch.setattr(lease_reach, "reach_info", where)
    monkeypatch.setattr(lease_reach, "open_access", open_access)
    monkeypatch.setattr(lease_reach, "WATCH_SECONDS", 0.1)
    port = _free_port()
    done: list = []
    argv = ["lease", "forward", LEASE, f"8888:{port}", "--keypair", str(wallet), "--url", DEAD]
    runner = threading.Thread(target=lambda: done.append(CliRunner().invoke(app, argv)))
    runner.start()
    try:
        first = _connect(port)
        assert first.recv(100) == b""  # refused there: this one connection ends
        first.close()
        second = _connect(port)
        second.sendall(b"hello")
        assert second.recv(100) == b"HELLO"
        second.close()
    finally:
        lease_closed.set()
        runner.join(10)
    [result] = done
    assert result.exit_code == Exit.CONNECTION_LOST, result.output
    assert f"forwarding 127.0.0.1:{port} -> lease {LEASE} rank 0 port 8888 (node {node_key}, relay only)" in (
        " ".join(result.stdout.split())
    )
    said = " ".join(result.stderr.split())
    assert "nothing listens on port 8888 in the job" in said and f"reaching node {node_key} (relay)" in said
    assert "stopped forwarding: lease" in said and "is closed" in said
    assert attempts == [8888, 8888]


def _connect(port: int) -> socket.socket:
    deadline = time.monotonic() + 10
    while True:
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=5)
        except ConnectionRefusedError:  # not listening yet
            assert time.monotonic() < deadline
            time.sleep(0.05)
