"""Reaching into a running job's sandbox for its client: a command run inside it (a shell, with or
without a terminal) with the job's environment, directory, uid and GPUs, and TCP connections to ports
inside the job's network namespace (the client's tunnel, issue 31, carries them)."""

from __future__ import annotations

import asyncio
import ctypes
import errno
import fcntl
import ipaddress
import json
import os
import secrets
import signal
import socket
import stat
import struct
import sys
import termios
import threading
import tty as terminal
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from worker.runner import JobRunner, die_with_agent, host_job_limits
from worker.sandbox import ENGINE_ENV, JOB_ENV_PREFIX, SETPRIV, drop_to

__all__ = [
    "DEFAULT_COMMAND",
    "SESSION_ENV",
    "JobProcess",
    "JobUnreachable",
    "command_argv",
    "connect",
    "sandbox_pid",
    "spawn",
]

# A plain `sh`: every image and host has it, and not as a login shell, whose profile (Debian's
# /etc/profile) would replace the job's PATH with the system's. A client who wants bash asks for it.
DEFAULT_COMMAND = ("/bin/sh",)
# Marks every process of one session (its value is random): how the agent finds the session's
# processes inside the job to signal or kill them (`podman exec` forwards no signal, and its
# process is not the agent's child). GPUNET_* names are the worker's: no job sets them.
SESSION_ENV = "GPUNET_SESSION"
LAUNCHER = (Path(__file__).parent / "session_launcher.py").read_text()  # run as `python -c` in the sandbox
JOBENV_PREFIX = JOB_ENV_PREFIX  # how the job's environment passes nsenter and setpriv (session_launcher.py)
NSENTER = "/usr/bin/nsenter"
# nsenter's option for each namespace a host job's sandbox may have of its own (the user namespace
# first: a non-root agent's bubblewrap makes one, and it owns the others)
_NAMESPACES = {
    "user": "--user", "mnt": "--mount", "pid": "--pid", "net": "--net",
    "ipc": "--ipc", "uts": "--uts", "cgroup": "--cgroup",
}  # fmt: skip
_CLONE_NEWNET = 0x40000000
# <asm-generic/ioctls.h>, which Python's termios lacks: unlock a pty's slave; open the slave of a pty
# master, wherever its devpts is mounted (Linux 4.13)
_TIOCSPTLCK, _TIOCGPTPEER = 0x40045431, 0x5441
# how long a session's first process may take to appear inside the job (podman is slow on a busy machine)
_STARTS_WITHIN = 30.0


class JobUnreachable(Exception):
    """The job is not running, or its sandbox cannot be entered; the message says why."""


@dataclass(frozen=True)
class _Process:
    """One line of /proc/PID/stat, as the agent's pid namespace numbers it."""

    pid: int
    ppid: int
    pgrp: int
    session: int
    tpgid: int  # the foreground process group of its controlling terminal (-1 without one)

    @classmethod
    def read(cls, pid: int) -> _Process | None:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return None
        fields = stat[stat.rindex(")") + 2 :].split()  # after the command's name, which may hold anything
        return cls(pid, int(fields[1]), int(fields[2]), int(fields[3]), int(fields[5]))


def _processes() -> list[_Process]:
    found = (_Process.read(int(p.name)) for p in Path("/proc").iterdir() if p.name.isdigit())
    return [p for p in found if p is not None]


def _exe(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return None


def _namespace(pid: int | str, kind: str) -> tuple[int, int] | None:
    """Which namespace of this kind the process is in (None when it is gone)."""
    try:
        st = os.stat(f"/proc/{pid}/ns/{kind}")
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _own_namespaces(pid: int) -> list[str]:
    """The kinds of namespace the process has apart from the agent's: those to enter (setns into a
    user namespace one already is in fails)."""
    if _namespace(pid, "pid") is None:
        raise JobUnreachable("the job has just ended")
    return [kind for kind in _NAMESPACES if _namespace(pid, kind) != _namespace("self", kind)]


def _not_running(runner: JobRunner) -> JobUnreachable:
    return JobUnreachable(f"the job is not running (it is {runner.state}): nothing to reach")


def _host_sandbox_pid(runner: JobRunner) -> int:
    """bubblewrap's init in a host job's sandbox. Not the job's own process: the job may have moved
    it into namespaces it made itself (an unprivileged job may make a user namespace, and in it a
    mount namespace with a root of its choosing), and nsenter, root until setpriv, would run
    setpriv from that root. The init stays in the sandbox bubblewrap made; it is the init of the
    bubblewrap the runner started (found from the runner's process, never by an environment
    variable another job could copy), and only once it has started the job: before, bubblewrap is
    still building the sandbox (its root may still be the machine's)."""
    outer = runner.process_pid
    if outer is None or not _runs_in(outer, runner.dirs.workdir):
        raise _not_running(runner)
    bwrap = _exe(outer)
    table = _processes()
    for init in (p.pid for p in table if p.ppid == outer and _exe(p.pid) == bwrap):
        if any(p.ppid == init and _exe(p.pid) not in (None, bwrap) for p in table):
            return init
    raise JobUnreachable("the job's sandbox is being set up or has just ended: try again in a moment")


def _runs_in(bwrap: int, workdir: Path) -> bool:
    """Whether the process is the bubblewrap of the job in `workdir` (its command line says so):
    not another process that got its pid once it ended, before the runner saw it end."""
    try:
        argv = Path(f"/proc/{bwrap}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    at = argv.index(b"--chdir") + 1 if b"--chdir" in argv else len(argv)
    return at < len(argv) and argv[at] == bytes(workdir)


async def _container_pid(runner: JobRunner) -> int:
    """The container's first process (`podman inspect`: the engine's, not the agent's child)."""
    assert runner.sandbox.engine is not None
    inspect = await asyncio.create_subprocess_exec(
        *runner.sandbox.engine, "inspect", "--format", "{{.State.Pid}}", runner._container,
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env=_engine_env(),
    )  # fmt: skip
    out, err = await inspect.communicate()
    pid = out.decode().strip()
    if inspect.returncode != 0 or not pid.isdigit() or int(pid) == 0:
        why = err.decode(errors="replace").strip().splitlines()[-1:] or ["it is not running"]
        raise JobUnreachable(f"the job's container {runner._container} cannot be entered: {why[0]}")
    return int(pid)


async def sandbox_pid(runner: JobRunner) -> int:
    """The host pid of the process whose namespaces are the job's sandbox: a host job's bubblewrap
    init (see _host_sandbox_pid), a container's first process. JobUnreachable when the job does not run."""
    if runner.state != "running":
        raise _not_running(runner)
    if runner.image is not None:
        return await _container_pid(runner)
    return _host_sandbox_pid(runner)


def _engine_env() -> dict[str, str]:
    """What the engine runs with: the agent's PATH and the engine's configuration, none of the job's
    variables (a secret's value is in the container already; one named LD_PRELOAD would be the
    engine's, run as root)."""
    return {k: os.environ[k] for k in ("PATH", "LANG", *ENGINE_ENV) if k in os.environ}


def command_argv(
    runner: JobRunner,
    command: Sequence[str],
    *,
    tty: bool,
    session: str = "",
    term: str = "xterm-256color",
) -> tuple[list[str], dict[str, str]]:
    """The argv, and the whole environment to start it with, of `command` (empty: DEFAULT_COMMAND) run
    inside the job's sandbox with its environment, working directory, uid and GPUs. A container's:
    `podman exec` (the job's environment is the container's). A host job's: nsenter into its
    sandbox's namespaces, setpriv to the job's uid without capabilities or new privileges, then
    session_launcher.py; the job's environment (its secrets' values too) goes in the environment,
    never in argv, which anyone on the machine reads. `session`: SESSION_ENV's value in the command's
    environment; `term`: TERM, with a tty. JobUnreachable when the job does not run."""
    if runner.state != "running":
        raise _not_running(runner)
    command = list(command) or list(DEFAULT_COMMAND)
    marks = {SESSION_ENV: session} if session else {}
    if runner.image is not None:
        assert runner.sandbox.engine is not None
        extra = {**marks, **({"TERM": term} if tty else {})}
        argv = [*runner.sandbox.engine, "exec", "--interactive", *(["--tty"] if tty else []), "--workdir", "/work"]
        argv += [arg for name, value in extra.items() for arg in ("--env", f"{name}={value}")]
        return [*argv, runner._container, *command], _engine_env()
    init = _host_sandbox_pid(runner)
    kinds = _own_namespaces(init)
    enter = [NSENTER, f"--target={init}", *(_NAMESPACES[kind] for kind in kinds)]
    if "user" in kinds:
        enter.append("--preserve-credentials")  # the agent's uid, as bubblewrap maps it for the job
    enter += ["--root", "--"]  # the sandbox's root, not the machine's
    if runner.uid is not None:
        drop = [SETPRIV, *drop_to(runner.uid)]
    elif os.geteuid() == 0 or "user" in kinds:  # capabilities to lose (in the job's user namespace, all)
        drop = [SETPRIV, "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"]
    else:
        drop = [SETPRIV, "--no-new-privs", "--"]
    launch = {"argv": command, "cwd": str(runner.dirs.workdir), "tty": tty}
    argv = [*enter, *drop, sys.executable, "-I", "-S", "-c", LAUNCHER, json.dumps(launch)]
    env = runner._env() | marks | ({"TERM": term} if tty else {})
    return argv, {JOBENV_PREFIX + name: value for name, value in env.items()}


def _terminal(runner: JobRunner) -> tuple[int, int]:
    """A pty (master, slave) for the session. A host job's from its sandbox's own devpts (bubblewrap's
    /dev/pts), owned by the job's uid, so that inside the terminal has a name (`tty`, tmux and screen
    need it) and is the job's; else, and where that cannot be, one of the agent's."""
    if runner.image is None:
        try:
            return _sandbox_terminal(_host_sandbox_pid(runner), runner.uid)
        except (OSError, JobUnreachable):
            pass
    return os.openpty()


def _sandbox_terminal(init: int, uid: int | None) -> tuple[int, int]:
    # the multiplexer itself (pts/ptmx, never a link: /proc/PID/root resolves an absolute one from
    # the agent's root), and only if it is a devpts instance other than the agent's
    master = os.open(f"/proc/{init}/root/dev/pts/ptmx", os.O_RDWR | os.O_NOCTTY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        st = os.fstat(master)
        if not stat.S_ISCHR(st.st_mode) or st.st_rdev != os.makedev(5, 2) or st.st_dev == os.stat("/dev/pts").st_dev:
            raise OSError(errno.ENODEV, "not the sandbox's own devpts")
        fcntl.ioctl(master, _TIOCSPTLCK, struct.pack("i", 0))
        slave = fcntl.ioctl(master, _TIOCGPTPEER, os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
        if uid is not None:
            os.fchown(slave, uid, -1)
        return master, slave
    except BaseException:
        os.close(master)
        raise


def _window(fd: int, rows: int, cols: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def _preparation(runner: JobRunner, tty: bool) -> Callable[[], None]:
    """What the agent's child does before it execs nsenter or the engine: it dies with the agent;
    a host job's session gets the job's limits (they pass nsenter and setpriv to the command); with
    a tty, the engine makes it its controlling terminal, so that a resize reaches it as SIGWINCH
    (nsenter does not: the command inside does, session_launcher.py)."""

    def prepare() -> None:
        die_with_agent()
        if runner.image is None:
            pids = runner.sandbox.pids_limit if runner.uid is not None else None
            host_job_limits(pids, runner.sandbox.file_bytes)
        elif tty:
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    return prepare


async def _start(
    argv: list[str], env: dict[str, str], prepare: Callable[[], None], stdio: int
) -> asyncio.subprocess.Process:
    """The agent's child, in a session of its own: its stdin, stdout and stderr all `stdio` (the
    terminal's slave, or pipes)."""
    return await asyncio.create_subprocess_exec(
        *argv, stdin=stdio, stdout=stdio, stderr=stdio, env=env, start_new_session=True, preexec_fn=prepare
    )


async def spawn(
    runner: JobRunner,
    command: Sequence[str],
    *,
    tty: bool,
    rows: int = 24,
    cols: int = 80,
    term: str = "xterm-256color",
) -> JobProcess:
    """Starts `command` (empty: DEFAULT_COMMAND) inside the job's sandbox (see command_argv) and
    returns once it runs there. With `tty`, on a terminal of `rows` x `cols` (a pty: the session's
    first process leads its session, the terminal its controlling one); else with pipes.
    JobUnreachable when the job does not run or its sandbox cannot be entered."""
    pid_namespace = _namespace(await sandbox_pid(runner), "pid")
    if pid_namespace is None:
        raise JobUnreachable("the job has just ended")
    session = secrets.token_hex(16)
    argv, env = command_argv(runner, command, tty=tty, session=session, term=term)
    prepare = _preparation(runner, tty)
    master: int | None = None
    try:
        if tty:
            master, slave = _terminal(runner)
            try:
                _window(master, rows, cols)
                if runner.image is not None:
                    # the agent's side only relays to the engine's terminal in the container (podman
                    # makes it raw too, once started: before, a Ctrl-C here would be SIGINT for podman)
                    terminal.setraw(slave)
                os.set_blocking(master, False)
                process = await _start(argv, env, prepare, slave)
            finally:
                os.close(slave)  # the child's copies only: the master reads EOF once they are all closed
        else:
            process = await _start(argv, env, prepare, asyncio.subprocess.PIPE)
    except OSError as e:
        if master is not None:
            os.close(master)
        raise JobUnreachable(f"cannot start {argv[0]!r}: {e.strerror or e}") from None
    job_process = JobProcess(process, master=master, pid_namespace=pid_namespace, session=session)
    await job_process._started()
    return job_process


class JobProcess:
    """A command running inside a job's sandbox (see spawn). Its output in chunks, its input, its
    terminal's size, signals, its exit code. One task reads and one writes at a time."""

    def __init__(
        self, process: asyncio.subprocess.Process, *, master: int | None, pid_namespace: tuple[int, int], session: str
    ) -> None:
        self._process, self._master, self.tty = process, master, master is not None
        self._pid_namespace, self._marker = pid_namespace, f"{SESSION_ENV}={session}\0".encode()
        self._reads: dict[str, asyncio.Task[bytes]] = {}
        self._ended: set[str] = set()
        self._waiting: set[asyncio.Future[None]] = set()
        # the terminal's master is closed at its end (EOF), by close(), or when this is forgotten
        # (a caller that only kills): never twice, nor while it could still be written to
        self._release = weakref.finalize(self, os.close, master) if master is not None else None

    @property
    def pid(self) -> int:
        """The agent's child: nsenter, or the engine's `exec` (not a process inside the job)."""
        return self._process.pid

    async def read(self) -> tuple[str, bytes] | None:
        """The next chunk of output: ("stdout" or "stderr", bytes); with a tty all is "stdout" (the
        terminal merges them). None at the end of all of it. It reads only when asked: a client that
        reads slowly slows the command down, never fills the agent's memory."""
        if self.tty:
            data = await self._read_terminal() if self._master is not None else b""
            if not data:
                self._forget_terminal()
            return ("stdout", data) if data else None
        streams = {"stdout": self._process.stdout, "stderr": self._process.stderr}
        for name, stream in streams.items():
            if name not in self._reads and name not in self._ended and stream is not None:
                self._reads[name] = asyncio.ensure_future(stream.read(65536))
        while self._reads:
            done, _ = await asyncio.wait(self._reads.values(), return_when=asyncio.FIRST_COMPLETED)
            name = next(name for name, task in self._reads.items() if task in done)
            data = self._reads.pop(name).result()
            if data:
                return name, data
            self._ended.add(name)
        return None

    async def _read_terminal(self) -> bytes:
        while self._master is not None:
            try:
                return os.read(self._master, 65536)
            except BlockingIOError:
                await self._ready(writing=False)
            except OSError as e:  # EIO: every process that had the terminal has closed it
                if e.errno == errno.EIO:
                    return b""
                raise
        return b""

    async def _ready(self, *, writing: bool) -> None:
        """Until the terminal can be read (or written) without blocking, or is closed."""
        fd = self._master
        assert fd is not None
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()
        self._waiting.add(ready)
        add, remove = (loop.add_writer, loop.remove_writer) if writing else (loop.add_reader, loop.remove_reader)
        add(fd, lambda: None if ready.done() else ready.set_result(None))
        try:
            await ready
        finally:
            self._waiting.discard(ready)
            if self._master == fd:  # not closed meanwhile: its number is nobody else's yet
                remove(fd)

    def _forget_terminal(self) -> None:
        """Closes the terminal's master (once), first waking what waits on it."""
        fd, self._master = self._master, None
        if fd is not None:
            loop = asyncio.get_running_loop()
            loop.remove_reader(fd)
            loop.remove_writer(fd)
        for waiting in self._waiting:
            if not waiting.done():
                waiting.set_result(None)
        if self._release is not None:
            self._release()

    async def write(self, data: bytes) -> None:
        """Input for the command (with a tty, what the client types: b"\\x03" is a Ctrl-C). What
        arrives after the command closed its input is dropped, as a terminal would."""
        if self.tty:
            view = memoryview(data)
            while view and self._master is not None:
                try:
                    view = view[os.write(self._master, view) :]
                except BlockingIOError:
                    await self._ready(writing=True)
                except OSError:  # EIO: nothing has the terminal open any more
                    return
            return
        stdin = self._process.stdin
        if stdin is None or stdin.is_closing():
            return
        try:
            stdin.write(data)
            await stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            pass

    def close_stdin(self) -> None:
        """The end of the input: the pipe closed; with a tty, the terminal's end-of-file (Ctrl-D,
        which a shell reading its prompt takes as `exit`)."""
        if self._master is not None:
            try:
                os.write(self._master, b"\x04")
            except OSError:
                pass
        elif self._process.stdin is not None:
            self._process.stdin.close()

    def resize(self, rows: int, cols: int) -> None:
        """The terminal's new size: the command's foreground job gets SIGWINCH (in a container
        through the engine, which resizes the container's terminal). Without a tty, nothing."""
        if self._master is not None:
            _window(self._master, rows, cols)

    def signal(self, signum: int) -> None:
        """Sends `signum` inside the job: with a tty to the terminal's foreground process group (what
        Ctrl-C, written as b"\\x03", reaches too), else to the command's process group (it leads
        one). Only to processes in the job's own pid namespace, whatever their /proc says."""
        signum = signal.Signals(signum)  # ValueError for a number that is no signal here
        members = self._members()
        ids = {p.pid for p in members}
        leaders = [p for p in members if p.ppid not in ids]  # the session's first process
        if not leaders:
            return
        group = leaders[0].tpgid if self.tty and leaders[0].tpgid > 0 else leaders[0].pgrp
        for p in self._inside():
            if p.pgrp == group:
                _send(p.pid, signum)

    def kill(self) -> None:
        """SIGKILL to the whole session: the agent's side (nsenter or the engine's `exec`) and every
        process of the session inside the job (the engine's `exec` would leave them running)."""
        for p in self._members(whole_session=True):
            _send(p.pid, signal.SIGKILL)
        if self._process.returncode is None:
            try:
                os.killpg(self._process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    async def wait(self) -> int:
        """The exit code, the shell's way: 0-255, 128 + N for a command killed by signal N (the
        engine reports a container's so, and cannot tell it from an exit code of 128 + N). Without a
        tty, once its output has ended too (asyncio's: a process it left running that holds its
        stdout delays it; kill() does not)."""
        code = await self._process.wait()
        return 128 - code if code < 0 else code

    async def close(self) -> None:
        """Ends the session (kill, if it runs) and frees what it holds here."""
        if self._process.returncode is None:
            self.kill()
        await self._process.wait()
        for task in self._reads.values():
            task.cancel()
        self._forget_terminal()

    async def _started(self) -> None:
        """Waits until the session's first process runs inside the job, or the agent's side ended
        (a command quick to end, or one that could not start: its exit code says): signal() and
        kill() find the session there from then on."""
        deadline = asyncio.get_running_loop().time() + _STARTS_WITHIN
        while self._process.returncode is None and not self._members():
            if asyncio.get_running_loop().time() > deadline:
                await self.close()
                raise JobUnreachable(f"the session did not start inside the job within {_STARTS_WITHIN:.0f} s")
            await asyncio.sleep(0.01)

    def _inside(self) -> list[_Process]:
        return [p for p in _processes() if _namespace(p.pid, "pid") == self._pid_namespace]

    def _members(self, *, whole_session: bool = False) -> list[_Process]:
        """The session's processes inside the job: those with its marker in their environment (they
        inherited it), and with `whole_session` also those of a session one of them leads."""
        inside = self._inside()
        members = [p for p in inside if self._marked(p.pid)]
        if whole_session:
            led = {p.pid for p in members if p.session == p.pid}
            members += [p for p in inside if p.session in led and p not in members]
        return members

    def _marked(self, pid: int) -> bool:
        try:
            return self._marker in Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            return False


def _send(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def _address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    if host == "localhost":
        return ipaddress.IPv4Address("127.0.0.1")
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        # a name would be resolved by the agent's resolver, not the job's
        raise JobUnreachable(
            f"{host!r} is not an IP address: give the address inside the job (127.0.0.1, ::1)"
        ) from None


def _socket_in(namespace: int, family: socket.AddressFamily) -> socket.socket:
    """A TCP socket made inside the network namespace the file descriptor names (a socket stays in
    the namespace it was made in, whichever thread uses it). setns changes the calling thread's
    namespace only: run in a thread of its own, which returns to the agent's namespace and ends."""
    libc = ctypes.CDLL(None, use_errno=True)
    with open("/proc/self/ns/net") as own:
        if libc.setns(namespace, _CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
        try:
            return socket.socket(family, socket.SOCK_STREAM)
        finally:
            libc.setns(own.fileno(), _CLONE_NEWNET)


async def _in_own_thread(call: Callable[[], socket.socket]) -> socket.socket:
    """`call` in a new thread (never the loop's executor: a pooled thread left in a job's namespace
    would run the agent's later work there)."""
    loop = asyncio.get_running_loop()
    result: asyncio.Future[socket.socket] = loop.create_future()

    def deliver(sock: socket.socket | None, error: BaseException | None) -> None:
        if result.cancelled():
            if sock is not None:
                sock.close()
        elif error is not None:
            result.set_exception(error)
        else:
            result.set_result(sock)  # type: ignore[arg-type]

    def run() -> None:
        try:
            sock = call()
        except BaseException as e:  # handed to the awaiting task, whatever it is
            loop.call_soon_threadsafe(deliver, None, e)
        else:
            loop.call_soon_threadsafe(deliver, sock, None)

    threading.Thread(target=run, name="gpunet-job-netns", daemon=True).start()
    return await result


async def connect(
    runner: JobRunner, port: int, host: str = "127.0.0.1"
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A TCP connection to `host`:`port` inside the job's network namespace (its own loopback, even
    for a job without a network; a job on the machine's network is reached on the machine's).
    JobUnreachable when the job does not run, or nothing listens there."""
    address = _address(host)
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    pid = await sandbox_pid(runner)
    if _namespace(pid, "net") == _namespace("self", "net"):
        sock = socket.socket(family, socket.SOCK_STREAM)
    else:
        try:
            namespace = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
        except OSError:
            raise JobUnreachable("the job has just ended") from None
        try:
            sock = await _in_own_thread(lambda: _socket_in(namespace, family))
        except OSError as e:
            raise JobUnreachable(
                f"cannot enter the job's network namespace ({e.strerror}): "
                + ("a worker not running as root cannot" if os.geteuid() != 0 else "the agent cannot")
                + " reach into a job with a network of its own"
            ) from None
        finally:
            os.close(namespace)
    sock.setblocking(False)
    try:
        await asyncio.get_running_loop().sock_connect(sock, (str(address), port))
    except ConnectionRefusedError:
        sock.close()
        raise JobUnreachable(f"nothing listens on port {port} inside the job ({address})") from None
    except OSError as e:
        sock.close()
        raise JobUnreachable(f"cannot connect to port {port} inside the job ({address}): {e.strerror}") from None
    return await asyncio.open_connection(sock=sock)
