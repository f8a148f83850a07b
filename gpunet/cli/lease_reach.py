"""`gpunet lease shell|exec|forward`: into a lease's job through the data plane (gpunet.reach,
gpunet.tunnel). Each opens a TLS channel pinned to the key the chain assigns the rank to, straight
to the node where it takes clients directly, else through the coordinator's relay, and asks for a
terminal (`shell`), one command without a terminal (`exec`) or a TCP connection to a port inside
the job (`forward`, one channel per local connection).

The pieces that touch the local terminal and move bytes are small functions of their own
(`raw_terminal`, `window_size`, `Input`, `run_session`, `pump_tcp`, `parse_forward`), so that they
are tested without a coordinator and, but for raw mode itself, without a terminal.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import struct
import sys
import termios
import time
import tty
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, BinaryIO

import typer
from pydantic import ValidationError
from rich.markup import escape
from solana.rpc.async_api import AsyncClient
from solders.pubkey import Pubkey

from gpunet.cli.common import (
    DEFAULT_COORDINATOR,
    DEFAULT_KEYPAIR,
    BadInput,
    CoordinatorOpt,
    KeypairOpt,
    Session,
    UrlOpt,
    pubkey_arg,
)
from gpunet.cli.lease import LeaseArg
from gpunet.errors import GpunetError
from gpunet.exits import Exit
from gpunet.jobs import CoordinatorError
from gpunet.reach import Access, ReachError, node_of_rank, open_access, reach_info
from gpunet.tunnel import (
    EXIT,
    MAX_DATA,
    RESIZE,
    SIGNAL,
    STDERR,
    STDIN,
    STDIN_EOF,
    STDOUT,
    AccessRequest,
    SecureChannel,
    TunnelError,
    read_frame,
    resize_payload,
    send_frame,
)

__all__ = [
    "ChannelLost",
    "Input",
    "Interrupted",
    "exit_status",
    "forward",
    "parse_forward",
    "pump_tcp",
    "raw_terminal",
    "run_session",
    "shell",
    "terminal_type",
    "window_size",
]

RECONNECT_SECONDS = 300.0  # how long a reconnecting shell waits for its rank's node (a share moves in minutes)
RETRY_SECONDS = 2.0
WATCH_SECONDS = 10.0  # how often a forward reads the lease's assignment (its end, a share that moved)
READ_CHUNK = 16 * 1024  # one TLS record: a keystroke or a pipe's chunk goes out as it comes
MAX_REQUEST_BYTES = 60 * 1024  # the node reads an access request of at most 64 KiB (gpunet.tunnel)
DEFAULT_TERM = "xterm-256color"

RankOpt = Annotated[
    int, typer.Option("--rank", min=0, help="The lease's node of this rank (a multi-node lease has one per rank).")
]
RelayOnlyOpt = Annotated[
    bool,
    typer.Option(
        "--relay-only",
        help="Go through the coordinator's relay only, never the node's direct address (behind a firewall that "
        "lets only the coordinator through). Either way the channel is end to end: the relay sees ciphertext.",
    ),
]


class ChannelLost(GpunetError):
    """The channel into the job ended before the command's exit status came; the reason says how."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Interrupted(GpunetError):
    """A signal here ended the session (Ctrl-C twice, SIGTERM, SIGHUP, a closed stdout); `code` is
    the exit code (128 + the signal's number)."""

    def __init__(self, code: int, why: str) -> None:
        super().__init__(why)
        self.code = code


# --- the local terminal


def exit_status(code: int) -> int:
    """The remote command's status as this process's exit code: 0 to 255 as it is, killed by a
    signal (a negative status, as the node reports it) 128 + the signal, anything larger 255."""
    if code < 0:
        return 128 + min(-code, 127)
    return min(code, 255)


def terminal_type(environ: Mapping[str, str]) -> str:
    """$TERM for the remote terminal, when it is one the request carries (letters, digits, ._+-)."""
    term = environ.get("TERM", "")
    return term if term and len(term) <= 64 and re.fullmatch(r"[A-Za-z0-9._+-]+", term) else DEFAULT_TERM


def window_size(*fds: int) -> tuple[int, int]:
    """(rows, columns) of the first of `fds` that is a terminal; 24 x 80 when none is."""
    for fd in fds:
        try:
            size = os.get_terminal_size(fd)
        except OSError:
            continue
        if size.lines > 0 and size.columns > 0:
            return min(size.lines, 1000), min(size.columns, 1000)
    return 24, 80


@contextlib.contextmanager
def raw_terminal(fd: int) -> Iterator[None]:
    """The terminal on `fd` in raw mode (no echo, no line editing, no signals from keys: Ctrl-C is the
    byte 3, and reaches the remote process through its terminal), restored however the block ends."""
    saved = termios.tcgetattr(fd)
    try:
        tty.setraw(fd, termios.TCSANOW)
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


class Input:
    """Reads a local file descriptor without blocking the event loop: a terminal, pipe or socket as it
    becomes readable, anything the loop cannot poll (a regular file, /dev/null) in a thread, which a
    read of such a file never keeps for long."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._pollable: bool | None = None

    async def read(self) -> bytes | None:
        """The next bytes, or None at the end (or when the descriptor fails, as a hung-up terminal does)."""
        loop = asyncio.get_running_loop()
        try:
            if self._pollable is None or self._pollable:
                ready: asyncio.Future[None] = loop.create_future()

                def readable() -> None:
                    if not ready.done():
                        ready.set_result(None)

                try:
                    loop.add_reader(self.fd, readable)
                except (PermissionError, ValueError, OSError):  # epoll refuses regular files and /dev/null
                    self._pollable = False
                else:
                    self._pollable = True
                    try:
                        await ready
                    finally:
                        loop.remove_reader(self.fd)
                    data = os.read(self.fd, READ_CHUNK)
                    return data or None
            data = await loop.run_in_executor(None, os.read, self.fd, READ_CHUNK)
        except OSError:
            return None
        return data or None


def stream_writer(stream: BinaryIO, code_if_closed: int = 128 + signal.SIGPIPE) -> Callable[[bytes], None]:
    """Writes to a local stream as bytes come (flushed each time); a reader that went away (`| head`)
    ends the session as SIGPIPE would."""

    def write(data: bytes) -> None:
        try:
            stream.write(data)
            stream.flush()
        except (BrokenPipeError, ValueError):
            raise Interrupted(code_if_closed, "the local output closed") from None

    return write


# --- a shell or a command: frames both ways until the exit status


class _Frames:
    """Sends frames one at a time: stdin, resizes and signals come from separate tasks, and a frame's
    TLS records must not interleave with another's."""

    def __init__(self, channel: SecureChannel) -> None:
        self.channel = channel
        self._lock = asyncio.Lock()

    async def send(self, kind: int, payload: bytes = b"") -> None:
        async with self._lock:
            await send_frame(self.channel, kind, payload)


async def _copy_input(stdin: Input, frames: _Frames) -> None:
    while (data := await stdin.read()) is not None:
        await frames.send(STDIN, data)
    await frames.send(STDIN_EOF)


async def _copy_resizes(resizes: asyncio.Queue[tuple[int, int]], frames: _Frames) -> None:
    while True:
        rows, cols = await resizes.get()
        while not resizes.empty():  # a window dragged sends many: only the last counts
            rows, cols = resizes.get_nowait()
        await frames.send(RESIZE, resize_payload(rows, cols))


async def _copy_signals(signals: asyncio.Queue[int], frames: _Frames) -> None:
    """The first SIGINT goes to the remote command (SIGNAL); a second one, or SIGTERM or SIGHUP, ends
    the session here (closing the channel ends the command there)."""
    forwarded = False
    while True:
        number = await signals.get()
        if number == signal.SIGINT and not forwarded:
            forwarded = True
            await frames.send(SIGNAL, bytes([number]))
            continue
        raise Interrupted(128 + number, f"interrupted ({signal.Signals(number).name})")


async def _read_output(channel: SecureChannel, out: Callable[[bytes], None], err: Callable[[bytes], None]) -> int:
    while True:
        try:
            frame = await read_frame(channel)
        except TunnelError as e:
            raise ChannelLost(str(e)) from None
        if frame is None:
            raise ChannelLost("the connection closed before the command's exit status came")
        kind, payload = frame
        if kind == STDOUT:
            out(payload)
        elif kind == STDERR:
            err(payload)
        elif kind == EXIT:
            if len(payload) != 4:
                raise ChannelLost(f"the node sent an exit status of {len(payload)} bytes (4 expected)")
            return int(struct.unpack("!i", payload)[0])
        # a kind this client does not know: a newer node's, skipped


async def run_session(
    channel: SecureChannel,
    stdin: Input | None,
    out: Callable[[bytes], None],
    err: Callable[[bytes], None],
    *,
    resizes: asyncio.Queue[tuple[int, int]] | None = None,
    signals: asyncio.Queue[int] | None = None,
) -> int:
    """Runs an admitted shell or exec channel: stdin to STDIN frames (STDIN_EOF at its end), `resizes`
    to RESIZE frames, `signals` as _copy_signals says, STDOUT to `out` and STDERR to `err`, until the
    node's EXIT: its status. ChannelLost when the channel ends first, Interrupted when a signal here
    ends it."""
    frames = _Frames(channel)
    output = asyncio.create_task(_read_output(channel, out, err))
    sides = [
        asyncio.create_task(side)
        for side in (
            _copy_input(stdin, frames) if stdin is not None else frames.send(STDIN_EOF),
            _copy_resizes(resizes, frames) if resizes is not None else None,
            _copy_signals(signals, frames) if signals is not None else None,
        )
        if side is not None
    ]
    pending: set[asyncio.Task[Any]] = {output, *sides}
    try:
        while True:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            if output in done:
                return output.result()
            for task in done:
                if isinstance(error := task.exception(), Interrupted):
                    raise error
                # a send that failed: the channel broke, and reading says how
    finally:
        for task in (output, *sides):
            task.cancel()
        await asyncio.gather(output, *sides, return_exceptions=True)


# --- a forwarded connection: raw bytes both ways


async def pump_tcp(channel: SecureChannel, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copies a local connection and an admitted tcp channel into each other until the job's end of
    it closes, or the local one does both ways; ChannelLost when the channel breaks. The local side's
    end of sending alone (a half-close) goes on as one (`close_write`): the answer still comes."""

    async def up() -> bool:
        """True once the local side finished sending (passed on as a half-close), False when it broke."""
        while True:
            try:
                data = await reader.read(MAX_DATA)
            except (ConnectionError, OSError):
                return False
            if not data:
                break
            await channel.send(data)  # fails only with the channel, which receiving then reports
        await channel.close_write()  # the node half-closes the job's connection in turn
        return True

    async def down() -> None:
        try:
            while (data := await channel.recv()) is not None:
                writer.write(data)
                await writer.drain()
        except TunnelError as e:
            raise ChannelLost(str(e)) from None
        except (ConnectionError, OSError):
            pass  # the local connection went: nothing left to deliver to

    sending, receiving = asyncio.create_task(up()), asyncio.create_task(down())
    try:
        done, _ = await asyncio.wait({sending, receiving}, return_when=asyncio.FIRST_COMPLETED)
        if receiving in done or sending.exception() is not None or sending.result():
            await receiving  # the job's answer still comes (or the broken channel says how it broke)
    finally:
        for task in (sending, receiving):
            task.cancel()
        await asyncio.gather(sending, receiving, return_exceptions=True)
        await channel.close()
        writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await writer.wait_closed()


def parse_forward(spec: str) -> tuple[int, int]:
    """REMOTE_PORT[:LOCAL_PORT] -> (remote, local): the job's port 1 to 65535, the local one 0 to
    65535 (0: any free one), the same as the remote one when not given."""
    match = re.fullmatch(r"(\d{1,5})(?::(\d{1,5}))?", spec.strip())
    if match is None:
        raise BadInput(
            f"{spec!r} is not REMOTE_PORT[:LOCAL_PORT] (the job's port, then optionally the local one: 8888, "
            "8888:9999, or 8888:0 for any free local port)"
        )
    remote = int(match[1])
    local = remote if match[2] is None else int(match[2])
    if not 1 <= remote <= 65535:
        raise BadInput(f"the job's port {remote} is out of range (1 to 65535)")
    if not 0 <= local <= 65535:
        raise BadInput(f"the local port {local} is out of range (0 to 65535; 0 for any free one)")
    return remote, local


def listen(port: int) -> socket.socket:
    """A listening socket on 127.0.0.1:`port` (this machine only: a forward never opens a lease's job
    to the network); BadInput when the port is taken or not this user's to bind."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        sock.listen(128)
    except OSError as e:
        sock.close()
        if e.errno == 98:  # EADDRINUSE
            raise BadInput(
                f"local port {port} is in use: give another (REMOTE_PORT:LOCAL_PORT), or 0 for any free one"
            ) from None
        raise BadInput(f"cannot listen on 127.0.0.1:{port}: {e.strerror or e}") from None
    sock.setblocking(False)
    return sock


# --- reaching the node


def _reach_exit(error: ReachError) -> Exit:
    """Refused by the node (the job, the port, the wallet) or the coordinator (not the lease's client):
    1; not reached at all: 5."""
    why = str(error)
    return Exit.REFUSED if " refused: " in why or "the coordinator refused (" in why else Exit.UNREACHABLE


@dataclass
class _Target:
    """What every command of this module reaches, and how."""

    s: Session
    coordinator: str
    lease: Pubkey
    rank: int
    relay_only: bool

    def command(self, name: str) -> str:
        return f"gpunet lease {name} {self.lease}" + (f" --rank {self.rank}" if self.rank else "")

    async def node(self, chain: AsyncClient) -> Pubkey:
        """The node the chain assigns the rank to now; BadInput when the lease is not active or has
        no such rank (nothing of it can be reached)."""
        try:
            return await node_of_rank(chain, self.lease, self.rank)
        except ReachError as e:
            raise BadInput(str(e)) from None

    async def open(self, chain: AsyncClient, request: AccessRequest) -> Access:
        """An admitted channel; the failure, as the command's exit: refused 1, unreached 5, a lease
        that is not active or a rank it lacks 2, not the lease's client 1 (the coordinator says so)."""
        await self.node(chain)
        try:
            return await open_access(
                self.coordinator, chain, self.s.wallet, self.lease, request, rank=self.rank, direct=not self.relay_only
            )
        except ReachError as e:
            raise self.s.fail(_reach_exit(e), str(e)) from None

    async def reopen(self, chain: AsyncClient, request: AccessRequest, was: Pubkey) -> Access:
        """A channel to the rank's node as the chain assigns it, tried until RECONNECT_SECONDS pass
        while the share moves (a lease no longer active, or Ctrl-C, ends the wait)."""
        deadline = time.monotonic() + RECONNECT_SECONDS
        problem = "not tried yet"
        with self.s.err.status(f"waiting for rank {self.rank} of lease {self.lease} (node {was} was lost)…") as status:
            while True:
                try:
                    node = await self.node(chain)
                except BadInput as e:
                    raise self.s.fail(Exit.CONNECTION_LOST, f"no shell to reconnect to: {e}") from None
                status.update(
                    f"reaching rank {self.rank} of lease {self.lease} on node {node}"
                    + (" (the share moved there)" if node != was else " (the chain still assigns the lost node)")
                    + f": {escape(problem)}"
                )
                try:
                    return await open_access(
                        self.coordinator, chain, self.s.wallet, self.lease, request, rank=self.rank,
                        direct=not self.relay_only,
                    )  # fmt: skip
                except (ReachError, CoordinatorError, TunnelError) as e:
                    problem = str(e)
                if time.monotonic() > deadline:
                    raise self.s.fail(
                        Exit.CONNECTION_LOST,
                        f"rank {self.rank} of lease {self.lease} was not reached within {RECONNECT_SECONDS:g} s: "
                        f"{problem}; see `gpunet lease status {self.lease}`, then `{self.command('shell')}`",
                    )
                await asyncio.sleep(RETRY_SECONDS)

    async def still_active(self, chain: AsyncClient) -> str | None:
        """None while the lease is active with the rank; else why not (the chain's word)."""
        try:
            await node_of_rank(chain, self.lease, self.rank)
        except ReachError as e:
            return str(e)
        except Exception:  # the chain unread: nothing to say of it
            return None
        return None


@contextlib.contextmanager
def _local_signals(
    signals: asyncio.Queue[int], resizes: asyncio.Queue[tuple[int, int]] | None, size_fds: tuple[int, ...]
) -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP into `signals`; SIGWINCH's new size into `resizes`: while the block runs."""
    loop = asyncio.get_running_loop()
    numbers = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP]
    for number in numbers:
        loop.add_signal_handler(number, signals.put_nowait, number)
    if resizes is not None:
        loop.add_signal_handler(signal.SIGWINCH, lambda: resizes.put_nowait(window_size(*size_fds)))
    try:
        yield
    finally:
        for number in [*numbers, signal.SIGWINCH]:
            loop.remove_signal_handler(number)


def stdin_is_terminal() -> bool:
    return os.isatty(0)


def _fd(stream: Any) -> int | None:
    try:
        return int(stream.fileno())
    except (AttributeError, ValueError, OSError):
        return None


async def _session(access: Access, *, terminal: bool) -> int:
    """Runs an admitted session with this process's stdin, stdout and stderr; in raw mode when
    `terminal` (stdin a terminal), resizing with the window."""
    stdin_fd = _fd(sys.stdin)
    signals: asyncio.Queue[int] = asyncio.Queue()
    resizes: asyncio.Queue[tuple[int, int]] | None = asyncio.Queue() if terminal else None
    out = stream_writer(sys.stdout.buffer)
    err = stream_writer(sys.stderr.buffer)
    size_fds = tuple(fd for fd in (_fd(sys.stdout), stdin_fd) if fd is not None)
    with _local_signals(signals, resizes, size_fds):
        stdin = Input(stdin_fd) if stdin_fd is not None else None
        if terminal and stdin_fd is not None:
            with raw_terminal(stdin_fd):
                if resizes is not None:
                    resizes.put_nowait(window_size(*size_fds))  # it may have changed while connecting
                return await run_session(access.channel, stdin, out, err, resizes=resizes, signals=signals)
        return await run_session(access.channel, stdin, out, err, resizes=resizes, signals=signals)


def _request(kind: str, lease: Pubkey, command: list[str], **more: Any) -> AccessRequest:
    try:
        request = AccessRequest(kind=kind, lease=str(lease), command=command, **more)  # type: ignore[arg-type]
    except ValidationError as e:
        first = e.errors()[0]
        raise BadInput(f"{'.'.join(map(str, first['loc']))}: {first['msg']}") from None
    if len(json.dumps(request.model_dump(mode="json"))) > MAX_REQUEST_BYTES:
        raise BadInput(f"the command is too long: at most {MAX_REQUEST_BYTES // 1024} KiB in all")
    return request


# --- the commands


def shell(
    lease: LeaseArg,
    argv: Annotated[
        list[str] | None,
        typer.Argument(
            help="A command to run in the terminal instead of the job's shell, after -- (e.g. -- htop).",
            show_default=False,
        ),
    ] = None,
    rank: RankOpt = 0,
    relay_only: RelayOnlyOpt = False,
    coordinator: CoordinatorOpt = DEFAULT_COORDINATOR,
    url: UrlOpt = None,
    keypair: KeypairOpt = DEFAULT_KEYPAIR,
) -> None:
    """An interactive terminal inside the lease's job (the node of --rank).

    It has the job's environment, working directory and GPUs, end to end encrypted
    to the node key the chain assigns the rank to. Your terminal is in raw mode
    while it runs (Ctrl-C, Ctrl-Z and Ctrl-D go to the remote terminal) and the
    remote one follows your window's size. Without a terminal on stdin it still
    runs (no raw mode; stdin's end is the remote terminal's end of input).

    Exits with the remote shell's exit status (as `lease exec`); when the
    connection breaks first (the node lost), says so and, at a terminal, offers to
    reconnect to the rank's node as the chain assigns it once the share moved (a
    new shell: the old one ended with its node); else exits 14. Not opened: 1
    refused (not your lease, no job running there, the node's refusal), 2 a lease
    not active or a rank it lacks, 5 the node or coordinator unreached."""
    s = Session(url, keypair, False)
    terminal = stdin_is_terminal()
    interactive = terminal and sys.stderr.isatty()
    result: dict[str, Any] = {}

    async def attempt(s: Session) -> None:
        address = pubkey_arg(lease, "lease address")
        s.wallet  # noqa: B018 - a missing keypair file is said before anything is reached
        target = _Target(s, coordinator, address, rank, relay_only)
        rows, cols = window_size(1, 0)
        request = _request("shell", address, argv or [], rows=rows, cols=cols, term=terminal_type(os.environ))
        async with s.client() as chain:
            lost = result.pop("lost", None)
            if lost is None:
                access = await target.open(chain, request)
            else:
                access = await target.reopen(chain, request, lost)
                s.err.print(
                    f"[green]connected[/] to node {access.node_key} ({access.via}): a new shell (what ran in the "
                    "old one ended with its node)",
                    highlight=False,
                )
            result["node"], result["via"] = access.node_key, access.via
            try:
                result["code"] = await _session(access, terminal=terminal)
            except ChannelLost as e:
                result["lost"], result["reason"] = access.node_key, e.reason
                result["closed"] = await target.still_active(chain)
            except Interrupted as e:
                result["interrupted"] = e
            finally:
                await access.channel.close()

    while True:
        s.run(attempt)
        if "code" in result:
            raise typer.Exit(exit_status(result["code"]))
        if (interrupted := result.get("interrupted")) is not None:
            s.err.print(str(interrupted))
            raise typer.Exit(interrupted.code)
        again = f"gpunet lease shell {lease}" + (f" --rank {rank}" if rank else "")
        if result.get("closed"):
            raise s.fail(
                Exit.CONNECTION_LOST,
                f"your shell on node {result['lost']} ended: {result['closed']} ({escape(result['reason'])})",
            )
        s.err.print(
            f"[red]error:[/] the node running your shell ({result['lost']}, {result['via']}) was lost: "
            f"{escape(result['reason'])}; the lease's share moves to another node; run `{again}` again to reconnect",
            soft_wrap=True,
            highlight=False,
        )
        if not interactive:
            raise typer.Exit(Exit.CONNECTION_LOST)
        try:
            if not typer.confirm(f"reconnect to rank {rank} of lease {lease} now?", default=True, err=True):
                raise typer.Exit(Exit.CONNECTION_LOST)
        except typer.Abort:
            raise typer.Exit(Exit.CONNECTION_LOST) from None


def exec_(
    lease: LeaseArg,
    argv: Annotated[list[str], typer.Argument(help="The command and its arguments, after --: -- nvidia-smi -L")],
    rank: RankOpt = 0,
    relay_only: RelayOnlyOpt = False,
    coordinator: CoordinatorOpt = DEFAULT_COORDINATOR,
    url: UrlOpt = None,
    keypair: KeypairOpt = DEFAULT_KEYPAIR,
) -> None:
    """Run one command inside the lease's job (the node of --rank), without a terminal.

    Its stdout goes to stdout and its stderr to stderr, this stdin to its stdin
    (`echo hi | gpunet lease exec L -- cat`), and it exits with the command's exit
    status (128 + N when a signal N killed it). Ctrl-C once sends it SIGINT, twice
    gives up here (130), which ends it there. When the connection breaks before it
    ended (the node lost), exits 14: how the command ended is unknown. Not
    started: 1, 2 or 5, as `lease shell`."""
    s = Session(url, keypair, False)
    result: dict[str, Any] = {}

    async def command_(s: Session) -> None:
        address = pubkey_arg(lease, "lease address")
        request = _request("exec", address, argv)
        s.wallet  # noqa: B018 - a missing keypair file is said before anything is reached
        target = _Target(s, coordinator, address, rank, relay_only)
        async with s.client() as chain:
            access = await target.open(chain, request)
            try:
                result["code"] = await _session(access, terminal=False)
            except ChannelLost as e:
                closed = await target.still_active(chain)
                raise s.fail(
                    Exit.CONNECTION_LOST,
                    f"the node running your command ({access.node_key}, {access.via}) was lost: {e.reason}"
                    + (f" ({closed})" if closed else "; the lease's share moves to another node")
                    + ": how the command ended is unknown; run it again once `gpunet lease status` shows the job "
                    "running",
                ) from None
            except Interrupted as e:
                result["interrupted"] = e
            finally:
                await access.channel.close()

    s.run(command_)
    if (interrupted := result.get("interrupted")) is not None:
        s.err.print(str(interrupted))
        raise typer.Exit(interrupted.code)
    raise typer.Exit(exit_status(result["code"]))


def forward(
    lease: LeaseArg,
    ports: Annotated[
        str,
        typer.Argument(
            metavar="REMOTE_PORT[:LOCAL_PORT]",
            help="The job's port, and the local one (default: the same; 0: any free one, printed).",
        ),
    ],
    rank: RankOpt = 0,
    relay_only: RelayOnlyOpt = False,
    coordinator: CoordinatorOpt = DEFAULT_COORDINATOR,
    url: UrlOpt = None,
    keypair: KeypairOpt = DEFAULT_KEYPAIR,
) -> None:
    """Forward a local TCP port (127.0.0.1 only) to a port inside the lease's job (the node of --rank).

    For Jupyter, TensorBoard, the Ray dashboard, an SSH server in the image. Each
    local connection opens its own end-to-end channel to the node the chain
    assigns the rank to at that moment: a connection dropped with its node ends
    alone, and the next one reaches the node the share moved to. Runs until Ctrl-C
    (130) or the lease ends (14); prints a line per connection that fails."""
    s = Session(url, keypair, False)

    async def command_(s: Session) -> None:
        remote, local = parse_forward(ports)
        address = pubkey_arg(lease, "lease address")
        s.wallet  # noqa: B018 - a missing keypair file is said before anything listens
        target = _Target(s, coordinator, address, rank, relay_only)
        listener = listen(local)
        try:
            async with s.client() as chain:
                await _forward(target, chain, listener, remote)
        finally:
            listener.close()

    s.run(command_)


async def _forward(target: _Target, chain: AsyncClient, listener: socket.socket, remote: int) -> None:
    s, address = target.s, target.lease
    node = await target.node(chain)
    info = await reach_info(target.coordinator, s.wallet, address)  # signed: the coordinator checks it is yours
    direct = next((n.get("direct") for n in info.get("nodes", []) if n.get("node_key") == str(node)), None)
    route = "relay only" if target.relay_only or not direct else "direct, else the relay"
    local = listener.getsockname()[1]
    ended: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    last: list[tuple[Pubkey, str]] = [(node, "")]
    request = AccessRequest(kind="tcp", lease=str(address), port=remote)

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = "{}:{}".format(*writer.get_extra_info("peername")[:2])
        try:
            try:
                await node_of_rank(chain, address, target.rank)
            except ReachError as e:
                if not ended.done():
                    ended.set_result(str(e))
                return
            access = await open_access(
                target.coordinator, chain, s.wallet, address, request, rank=target.rank, direct=not target.relay_only
            )
        except Exception as e:  # whatever one connection meets ends it alone, said in a line
            why = str(e) if isinstance(e, GpunetError) and str(e) else f"{type(e).__name__}: {e}"
            s.err.print(f"[yellow]connection from {peer}:[/] {escape(why)}", soft_wrap=True, highlight=False)
            writer.close()
            return
        if (access.node_key, access.via) != last[0]:
            if access.node_key != last[0][0]:
                s.err.print(f"rank {target.rank} is now on node {access.node_key} (the share moved)", highlight=False)
            last[0] = (access.node_key, access.via)
            s.err.print(f"[dim]reaching node {access.node_key} ({access.via})[/]", highlight=False)
        try:
            await pump_tcp(access.channel, reader, writer)
        except Exception as e:  # ChannelLost, or anything else: this connection alone ends
            why = e.reason if isinstance(e, ChannelLost) else f"{type(e).__name__}: {e}"
            s.err.print(
                f"[yellow]connection from {peer}:[/] the tunnel to node {access.node_key} broke: {escape(why)} "
                "(new connections reconnect, to the node the share moves to)",
                soft_wrap=True,
                highlight=False,
            )

    async def watch() -> None:
        """The lease's end ends the forward even with no connection coming; a share that moved is said."""
        while not ended.done():
            await asyncio.sleep(WATCH_SECONDS)
            try:
                now = await node_of_rank(chain, address, target.rank)
            except ReachError as e:
                if not ended.done():
                    ended.set_result(str(e))
                return
            except Exception:  # the chain unread this time: the next look, or a connection, tells
                continue
            if now != last[0][0]:
                s.err.print(f"rank {target.rank} is now on node {now} (the share moved)", highlight=False)
                last[0] = (now, "")

    server = await asyncio.start_server(connection, sock=listener)
    s.out.print(
        f"forwarding 127.0.0.1:{local} -> lease {address} rank {target.rank} port {remote} "
        f"(node {node}, {route}); Ctrl-C to stop",
        soft_wrap=True,
        highlight=False,
    )
    sys.stdout.flush()
    watcher = asyncio.create_task(watch())
    try:
        async with server:
            why = await ended
    finally:
        watcher.cancel()
    raise target.s.fail(Exit.CONNECTION_LOST, f"stopped forwarding: {why}")
