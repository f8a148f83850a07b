"""`gpunet lease exec|shell|forward` as a client runs them: the `gpunet` command in its own process,
against gpunet-localnet, the coordinator with its relay and a `gpunet worker run` with simulated
GPUs whose job serves HTTP (`python -m http.server`) in its own network namespace. One command
with its streams apart, its stdin and its exit code; a terminal on a pty (its size, the job's
environment, Ctrl-C to the remote process, a resize, the exit code, the local terminal restored);
a forward that reads the job's page, through the relay and directly; a Ctrl-C that stops it; the
node killed under a shell, which says so and offers to reconnect. (The unit tests without
services are tests/cli/test_cli_reach.py.)"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
import urllib.request
from pathlib import Path

import pytest

from gpunet.keys import create_keypair_file
from gpunet.protocol import JobSpec

from .conftest import eventually
from .world import World, cluster_env, live_settings, placed_lease, running, start_workers

PORT = 8765
GPUNET = str(Path(sys.executable).with_name("gpunet"))
READY = "echo ready-$((40+2))\r"  # typed; the shell answers ready-42, which its echo of the line is not


def _worker_env(node_url: str):
    def env(i: int) -> dict[str, str]:
        return {
            **cluster_env(i),
            "GPUNET_WORKER_NETWORK": "none",  # the job's own network namespace: only the tunnel reaches it
            "GPUNET_WORKER_RPC_URL": node_url,  # the node reads the lease's client on chain
            "GPUNET_WORKER_TUNNEL_PORT": "0",  # and takes clients directly too
        }

    return env


class Client:
    """`gpunet lease ...` in a process of its own, as the lease's client."""

    def __init__(self, lease: str, node_url: str, api: str, keypair: Path) -> None:
        self.lease = lease
        self.options = ["--url", node_url, "--coordinator", api, "--keypair", str(keypair)]

    def argv(self, command: str, *args: str, after: list[str] | None = None) -> list[str]:
        return [GPUNET, "lease", command, self.lease, *args, *self.options, *(["--", *after] if after else [])]

    async def run(self, command: str, *args: str, after: list[str] | None = None, stdin: bytes = b"") -> tuple:
        process = await asyncio.create_subprocess_exec(
            *self.argv(command, *args, after=after),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(process.communicate(stdin), 60)
        return process.returncode, out.decode(), err.decode()


@pytest.mark.timeout(300)
async def test_a_client_runs_a_command_a_shell_and_a_forward_in_its_job(
    node, chain, pool, database_url, tmp_path, spawned
) -> None:
    world = await World().build(chain, tmp_path, nodes=2)  # a spare for the failover
    # a node silent 3 s is lost, and its share moves at once (as tests/coordinator/test_checkpoint_failover.py)
    settings = live_settings(
        node, database_url, lost_after_seconds=3.0, reconnect_grace_seconds=2, settle_seconds=1, close_grace_seconds=4
    )
    api = f"http://127.0.0.1:{settings.api_port}"
    create_keypair_file(tmp_path / "client.json", world.client)
    spec = JobSpec(command=[sys.executable, "-m", "http.server", str(PORT), "--bind", "127.0.0.1"])
    async with running(settings, pool, world.admin) as coordinator:
        workers = await start_workers(world, coordinator, tmp_path, spawned, env=_worker_env(node.url))
        lease, placed = await placed_lease(world, api, chain, 600, spec, gpus=2)
        client = Client(str(lease), node.url, api, tmp_path / "client.json")

        # one command: its stdout and stderr apart, its exit code, through the relay
        async def command_ran() -> tuple | None:
            got = await client.run("exec", "--relay-only", after=["sh", "-c", "echo out; echo err >&2; exit 7"])
            return got if got[0] == 7 else None  # before the job runs: refused, saying so

        _, out, err = await eventually(command_ran, what="a command in the job")
        assert (out, err) == ("out\n", "err\n")
        # stdin copied to it, its end the command's: `echo hi | gpunet lease exec L -- cat` (directly, then)
        assert await client.run("exec", after=["cat"], stdin=b"hi\n") == (0, "hi\n", "")

        # a forward reads the job's page (the local port: any free one, printed)
        for extra in (["--relay-only"], []):
            forward = await asyncio.create_subprocess_exec(
                *client.argv("forward", f"{PORT}:0", *extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE
            )
            line = (await asyncio.wait_for(forward.stdout.readline(), 30)).decode()
            local = int(re.search(r"forwarding 127\.0\.0\.1:(\d+) -> ", line)[1])
            assert f"lease {lease} rank 0 port {PORT} (node {placed[0]}" in line, line
            for _ in range(2):  # a connection each, and each one its own channel
                page = await asyncio.to_thread(_get, f"http://127.0.0.1:{local}/")
                assert "Directory listing for /" in page
            forward.send_signal(signal.SIGINT)  # Ctrl-C stops it
            assert await asyncio.wait_for(forward.wait(), 10) == 130
            said = (await forward.stderr.read()).decode()
            assert f"reaching node {placed[0]} ({'relay' if extra else 'direct'})" in said, said

        # a terminal on a pty, 33 x 101: the job's environment, its size, a resize, Ctrl-C, its exit code
        async with Terminal(client.argv("shell"), rows=33, cols=101) as term:  # the job's shell (bash -l)
            term.type(READY)
            await term.expect("ready-42")
            term.type('stty size; echo "L=$GPUNET_LEASE T=$TERM"\r')
            await term.expect("33 101")
            await term.expect(f"L={lease} T=screen-256color")  # the local TERM
            term.resize(40, 120)  # SIGWINCH here, a RESIZE frame there: typed at once, a line may pass it
            for _ in range(20):
                term.type("stty size\r")
                with contextlib.suppress(AssertionError):
                    await term.expect("40 120", timeout=0.5)
                    break
            await term.expect("40 120", timeout=0)
            term.type('sleep 600; echo sl""ept\r')
            await asyncio.sleep(1)
            term.type("\x03")  # Ctrl-C: to the remote sleep, not to gpunet here
            term.type("echo $((6*7))-alive\r")
            await term.expect("42-alive")
            assert term.process.poll() is None
            term.type("exit 3\r")
            assert await term.exited() == 3, term.seen
            assert "slept" not in term.seen
            assert term.restored(), "the local terminal was left in raw mode"

        # the node killed under a shell: it says so and offers to reconnect; told yes, it waits for the
        # share to move and opens a new shell on the node the chain assigns now; a forward follows too
        forward = await asyncio.create_subprocess_exec(
            *client.argv("forward", f"{PORT}:0"), stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        try:
            line = (await asyncio.wait_for(forward.stdout.readline(), 30)).decode()
            local = int(re.search(r"forwarding 127\.0\.0\.1:(\d+) -> ", line)[1])
            assert "Directory listing" in await asyncio.to_thread(_get, f"http://127.0.0.1:{local}/")
            async with Terminal(client.argv("shell", "--relay-only"), rows=24, cols=80) as term:
                term.type(READY)
                await term.expect("ready-42")
                workers[placed[0]].send_signal(signal.SIGKILL)
                await term.expect("reconnect to rank 0", timeout=40)
                seen = term.text()
                assert f"the node running your shell ({placed[0]}, relay) was lost" in seen, seen
                assert f"run `gpunet lease shell {lease}` again to reconnect" in seen
                assert term.restored(), "the local terminal was left in raw mode at the prompt"
                term.type("y\r")
                spare = next(k for k in world.node_keys() if k != placed[0])
                await term.expect(f"connected to node {spare} (relay)", timeout=90)  # the failover (seconds)
                term.seen = ""
                term.type('echo "L=$GPUNET_LEASE"\r')
                await term.expect(f"L={lease}")

                # the forward's next connection reaches the job on the new node, through the same port
                page = await eventually(lambda: _get_or_none(f"http://127.0.0.1:{local}/"), what="the moved job's page")
                assert "Directory listing" in page

                # and the new node lost too: told no, the shell exits 14
                workers[spare].send_signal(signal.SIGKILL)
                await term.expect("reconnect to rank 0", timeout=40)
                term.type("n\r")
                assert await term.exited() == 14, term.seen
                assert term.restored()
        finally:
            if forward.returncode is None:
                forward.kill()
            await forward.wait()
        said = (await forward.stderr.read()).decode()
        assert f"reaching node {spare} (direct)" in said, said  # the forward followed the share


async def _get_or_none(url: str) -> str | None:
    try:
        return await asyncio.to_thread(_get, url)
    except OSError:  # urllib's errors: the job on the new node not serving yet
        return None


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=20) as response:
        return response.read().decode()


class Terminal:
    """A command on a pty of its own (its controlling terminal, so that a resize signals it), read as
    a person would see it."""

    def __init__(self, argv: list[str], rows: int, cols: int) -> None:
        self.argv, self.rows, self.cols = argv, rows, cols
        self.seen = ""

    async def __aenter__(self) -> Terminal:
        self.main, self.secondary = pty.openpty()
        fcntl.ioctl(self.secondary, termios.TIOCSWINSZ, struct.pack("HHHH", self.rows, self.cols, 0, 0))
        self.before = termios.tcgetattr(self.secondary)
        # a new session whose controlling terminal is the pty (TIOCSCTTY on stdin), then gpunet
        become = (
            "import fcntl, os, sys, termios; fcntl.ioctl(0, termios.TIOCSCTTY, 0); os.execv(sys.argv[1], sys.argv[1:])"
        )
        self.process = subprocess.Popen(
            [sys.executable, "-c", become, *self.argv],
            stdin=self.secondary,
            stdout=self.secondary,
            stderr=self.secondary,
            start_new_session=True,
            env={**os.environ, "TERM": "screen-256color"},
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        os.close(self.main)
        os.close(self.secondary)

    def type(self, text: str) -> None:
        os.write(self.main, text.encode())

    def resize(self, rows: int, cols: int) -> None:
        fcntl.ioctl(self.main, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def _read(self, timeout: float) -> None:
        if select.select([self.main], [], [], timeout)[0]:
            self.seen += os.read(self.main, 65536).decode(errors="replace")

    def text(self) -> str:
        """What it showed, as words: no colours or cursor moves, every run of spaces and line ends one space."""
        return " ".join(re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", self.seen).split())

    async def expect(self, text: str, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.text():
            assert time.monotonic() < deadline, f"{text!r} not seen in {self.seen!r}"
            await asyncio.to_thread(self._read, 0.2)

    async def exited(self, timeout: float = 20) -> int:
        deadline = time.monotonic() + timeout
        while self.process.poll() is None:
            assert time.monotonic() < deadline, f"still running; seen {self.seen!r}"
            await asyncio.to_thread(self._read, 0.2)
        return self.process.returncode

    def restored(self) -> bool:
        return termios.tcgetattr(self.secondary) == self.before
