"""Reaching into a running job (worker/job_access.py) with the real tools, no mocks: host jobs in
bubblewrap (a root worker's: they run as a uid of their own), container jobs through rootful podman
(skipped, saying why, where it cannot run). Each check beside its honest control."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import socket
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from solders.pubkey import Pubkey

from gpunet.localnet import free_ports
from gpunet.protocol import Dispatch, JobSpec
from tests.worker.sandboxes import IMAGE, host_jobs
from worker.job_access import JobProcess, JobUnreachable, command_argv, connect, sandbox_pid, spawn
from worker.runner import JobDirs, JobRunner
from worker.sandbox import Sandbox, host_job_uid

SECONDS = 15  # for anything to come back from inside a job

# a shell script's view from inside: who, where, what environment, which processes (their command lines)
LOOK = (
    "echo uid=$(id -u); echo cwd=$(pwd); env | sed 's/^/env /'; "
    "for p in /proc/[0-9]*; do echo ps $(tr '\\0' ' ' < $p/cmdline); done; "
    "grep -E '^(CapEff|NoNewPrivs)' /proc/self/status; ls . {other} 2>&1 | sed 's/^/ls /'; echo done >&2"
)


def _dispatch(command: list[str], *, image: str | None = None, env: dict[str, str] | None = None) -> Dispatch:
    return Dispatch(lease=str(Pubkey.new_unique()), gpus=1, job=JobSpec(command=command, image=image, env=env or {}))


@contextlib.asynccontextmanager
async def running(
    sandbox: Sandbox, state: Path, dispatch: Dispatch, files: dict[str, str] | None = None
) -> AsyncIterator[JobRunner]:
    """The job running (its sandbox can be entered), `files` in its working directory; cancelled at the end."""
    runner = JobRunner(
        dispatch, ["GPU-sim-a"], JobDirs.of(state, dispatch), simulated=True, send=lambda _: None, sandbox=sandbox
    )
    runner.dirs.workdir.mkdir(parents=True, exist_ok=True)
    for name, text in (files or {}).items():
        (runner.dirs.workdir / name).write_text(text)
    task = asyncio.create_task(runner.run())
    try:
        async with asyncio.timeout(60):
            while True:
                assert not task.done(), task.result()
                try:
                    await sandbox_pid(runner)
                    break
                except JobUnreachable:
                    await asyncio.sleep(0.05)
        yield runner
    finally:
        runner.cancel("test over")
        await asyncio.wait_for(task, 60)


async def output(process: JobProcess) -> dict[str, str]:
    """All of the command's output, by stream, and its exit code under "exit"."""
    out: dict[str, str] = {"stdout": "", "stderr": ""}
    async with asyncio.timeout(SECONDS):
        while (chunk := await process.read()) is not None:
            out[chunk[0]] += chunk[1].decode()
        out["exit"] = str(await process.wait())
    await process.close()
    return out


async def until(process: JobProcess, pattern: str, seen: list[str]) -> re.Match[str]:
    """Reads the terminal until `pattern` appears in what came since the last call (kept in `seen`)."""
    async with asyncio.timeout(SECONDS):
        while not (found := re.search(pattern, seen[0])):
            chunk = await process.read()
            assert chunk is not None, f"the session ended before {pattern!r}: {seen[0]!r}"
            seen[0] = (seen[0] + chunk[1].decode(errors="replace")).replace("\r\n", "\n")
    seen[0] = seen[0][found.end() :]
    return found


def _sandbox(kind: str, request: pytest.FixtureRequest, state: Path, network: str = "egress") -> Sandbox:
    if kind == "container":
        podman: Sandbox = request.getfixturevalue("podman")
        return podman
    return host_jobs(state, network=network)


def _python(kind: str) -> str:
    return "python3" if kind == "container" else sys.executable  # the image's, or the worker's own


async def test_a_command_in_a_host_job_sees_the_job_and_nothing_of_another_lease(tmp_path) -> None:
    assert os.geteuid() == 0, "a root worker's test: its host jobs run as a uid of their own"
    state = tmp_path / "state"
    sandbox = host_jobs(state)
    # a host job's opened secrets are in its env, as any variable: here API_TOKEN
    job_a = _dispatch(["sleep", "61"], env={"API_TOKEN": "tok-5ecret", "LD_LIBRARY_PATH": "/opt/job-libs"})
    job_b = _dispatch(["sleep", "62"])
    async with (
        running(sandbox, state, job_a, {"a-only": "x"}) as a,
        running(sandbox, state, job_b, {"b-only": "x"}) as b,
    ):
        process = await spawn(a, ["/bin/sh", "-c", "read go; " + LOOK.format(other=b.dirs.workdir)], tty=False)
        # nsenter and setpriv run as root: none of the job's variables is theirs (LD_LIBRARY_PATH
        # and LD_PRELOAD are the C library's), though the command gets them all
        agent_side = Path(f"/proc/{process.pid}/environ").read_bytes().split(b"\0")
        assert not [v for v in agent_side if v.startswith((b"LD_", b"API_TOKEN="))], agent_side
        # and a secret's value is never in a command line (anyone on the machine reads those)
        assert b"tok-5ecret" not in Path(f"/proc/{process.pid}/cmdline").read_bytes()
        await process.write(b"go\n")
        out = await output(process)
    lines = out["stdout"].splitlines()
    assert (out["exit"], out["stderr"]) == ("0", "done\n"), out
    # the job's uid (not root, no capability), directory and environment, GPUs included
    assert f"uid={host_job_uid(job_a.lease)}" in lines and f"cwd={a.dirs.workdir}" in lines, lines
    assert "CapEff:\t0000000000000000" in lines and "NoNewPrivs:\t1" in lines, lines
    for variable in (f"GPUNET_LEASE={job_a.lease}", "API_TOKEN=tok-5ecret", "LD_LIBRARY_PATH=/opt/job-libs"):
        assert f"env {variable}" in lines, lines
    assert "env CUDA_VISIBLE_DEVICES=GPU-sim-a" in lines and f"env GPUNET_WORKDIR={a.dirs.workdir}" in lines
    # its pid namespace: the job's own process and the command's, nothing of the machine's (this
    # test's own process) nor of lease B's job
    commands = [line[3:] for line in lines if line.startswith("ps ")]
    assert "sleep 61" in commands and "sleep 62" not in commands, commands
    assert _own_command() not in commands and len(commands) < 10, commands
    # its files, and none of lease B's (the worker's state directory is out of its sight)
    assert "ls a-only" in lines and any(line.startswith("ls ") and "No such file" in line for line in lines), lines
    assert "ls b-only" not in lines


async def test_a_host_job_that_moved_into_namespaces_of_its_own_does_not_choose_where_sessions_land(tmp_path) -> None:
    """An unprivileged job may make a user namespace, and in it a mount namespace with its own view of
    the files: a session enters the sandbox bubblewrap made, not the job's process (nsenter would run
    setpriv, as root, from wherever the job pointed it)."""
    state = tmp_path / "state"
    moved = "mount -t tmpfs none $GPUNET_WORKDIR && touch $GPUNET_WORKDIR/fake && echo moved && exec sleep 60"
    job = _dispatch(["unshare", "--user", "--map-root-user", "--mount", "/bin/sh", "-c", moved])
    lines: list[str] = []
    runner = JobRunner(
        job, ["GPU-sim-a"], JobDirs.of(state, job), simulated=True,
        send=lambda m: lines.append(getattr(m, "line", "")), sandbox=host_jobs(state),
    )  # fmt: skip
    runner.dirs.workdir.mkdir(parents=True)
    (runner.dirs.workdir / "real").write_text("x")
    task = asyncio.create_task(runner.run())
    try:
        async with asyncio.timeout(SECONDS):
            while "moved" not in lines:
                if task.done():
                    pytest.skip(f"this kernel lets no unprivileged job make a user namespace: {lines}")
                await asyncio.sleep(0.05)
        out = await output(await spawn(runner, ["ls"], tty=False))
        assert out["stdout"].split() == ["real"], out  # the sandbox's working directory, not the job's own
    finally:
        runner.cancel()
        await task


@pytest.mark.parametrize("kind", ["host", "container"])
async def test_a_terminal_session_sizes_resizes_interrupts_and_exits(tmp_path, request, kind) -> None:
    state = tmp_path / "state"
    async with running(_sandbox(kind, request, state), state, _dispatch(["sleep", "60"])) as runner:
        process = await spawn(runner, [], tty=True, rows=33, cols=101)  # the default command: a shell
        seen = [""]
        await process.write(b"stty size; tty\n")
        await until(process, r"33 101\n", seen)
        terminal = await until(process, r"(/dev/\S+|not a tty)\n", seen)
        assert terminal[1].startswith("/dev/pts/"), terminal[1]  # a terminal the job's processes can name
        process.resize(40, 120)
        async with asyncio.timeout(SECONDS):  # a container's through the engine, which takes a moment
            while True:
                await process.write(b"stty size\n")
                if (await until(process, r"(\d+ \d+)\n", seen))[1] == "40 120":
                    break
                await asyncio.sleep(0.2)
        # Ctrl-C: the line discipline interrupts the foreground job, the shell survives and answers
        await process.write(b"sleep 100\n")
        await asyncio.sleep(0.5)
        await process.write(b"\x03")
        await process.write(b"echo alive-$((6 * 7))\n")
        await until(process, r"alive-42", seen)
        await process.write(b"exit 7\n")
        async with asyncio.timeout(SECONDS):
            assert await process.wait() == 7
        await process.close()


@pytest.mark.parametrize("kind", ["host", "container"])
async def test_a_session_is_signalled_and_killed_inside_the_job(tmp_path, request, kind) -> None:
    """SIGTERM reaches the command inside the job (podman's `exec` forwards no signal), and kill()
    leaves nothing of the session running there (podman's `exec` killed would)."""
    state = tmp_path / "state"
    async with running(_sandbox(kind, request, state), state, _dispatch(["sleep", "60"])) as runner:
        trapped = "trap 'echo got TERM; exit 5' TERM; echo ready; while :; do sleep 0.1; done"
        process = await spawn(runner, ["/bin/sh", "-c", trapped], tty=False)
        assert await asyncio.wait_for(process.read(), SECONDS) == ("stdout", b"ready\n")
        process.signal(signal.SIGTERM)
        out = await output(process)
        assert (out["stdout"], out["exit"]) == ("got TERM\n", "5"), out
        # the honest control of kill(): a command that outlives its own end of the session
        process = await spawn(runner, ["/bin/sh", "-c", "sleep 1001 & sleep 1002"], tty=False)
        await asyncio.sleep(0.3)
        assert sorted(_running_commands("sleep 100")) == ["sleep 1001", "sleep 1002"]
        process.kill()
        assert await asyncio.wait_for(process.wait(), SECONDS) == 128 + signal.SIGKILL
        await asyncio.sleep(0.3)
        assert _running_commands("sleep 100") == []
        assert await asyncio.wait_for(process.read(), SECONDS) is None  # its output ends with it
        await process.close()


def _own_command() -> str:
    """This test process's command line, as the LOOK script prints one."""
    return " ".join(Path("/proc/self/cmdline").read_bytes().decode().split("\0")).strip()


def _running_commands(prefix: str) -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
            if proc.name.isdigit() and command.startswith(prefix):
                found.append(command)
    return found


async def test_a_command_in_a_container_job_sees_the_job(tmp_path, podman) -> None:
    state = tmp_path / "state"
    spec = JobSpec(command=["sleep", "61"], image=IMAGE, env={"MODE": "train"}, secrets=["API_TOKEN"])
    job = Dispatch(lease=str(Pubkey.new_unique()), gpus=1, job=spec)
    # the secret opened into the job's env, as the agent does: `podman run` took it by name
    job = job.model_copy(update={"job": spec.model_copy(update={"env": spec.env | {"API_TOKEN": "tok-5ecret"}})})
    async with running(podman, state, job, {"a-only": "x"}) as runner:
        process = await spawn(runner, ["/bin/sh", "-c", "read go; " + LOOK.format(other="/etc/hostname")], tty=False)
        for agent_side in ("cmdline", "environ"):  # the container has the secret: the engine's exec does not
            assert b"tok-5ecret" not in Path(f"/proc/{process.pid}/{agent_side}").read_bytes()
        await process.write(b"go\n")
        out = await output(process)
    lines = out["stdout"].splitlines()
    assert (out["exit"], out["stderr"]) == ("0", "done\n"), out
    assert "cwd=/work" in lines and "ls a-only" in lines and "CapEff:\t0000000000000000" in lines, lines
    for variable in (f"GPUNET_LEASE={runner.dispatch.lease}", "MODE=train", "API_TOKEN=tok-5ecret"):
        assert f"env {variable}" in lines, lines
    commands = [line[3:] for line in lines if line.startswith("ps ")]
    assert "sleep 61" in commands and _own_command() not in commands, commands


@contextlib.contextmanager
def machine_server(port: int) -> Iterator[None]:
    """What answers on the machine's own 127.0.0.1:`port` (not the job's)."""
    server = socket.create_server(("127.0.0.1", port))
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                conn, _ = server.accept()
                conn.sendall(b"the machine's own\n")
                conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        server.close()


@pytest.mark.parametrize("kind", ["host", "container"])
async def test_a_port_inside_the_job_is_reached_in_its_own_network_namespace(tmp_path, request, kind) -> None:
    """A host job without a network (it has its own loopback), a container job on the egress network:
    connect() reaches the job's server on its 127.0.0.1, not the machine's on the same port."""
    state = tmp_path / "state"
    sandbox = _sandbox(kind, request, state, network="none")
    if kind == "container":
        assert sandbox.network == "egress" and sandbox.egress_network != "bridge"
    port, unused = free_ports(2)
    serve = [_python(kind), "-m", "http.server", str(port), "--bind", "127.0.0.1"]
    files = {"served-from-the-job": "x"}
    with machine_server(port):
        async with running(
            sandbox, state, _dispatch(serve, image=IMAGE if kind == "container" else None), files
        ) as runner:
            async with asyncio.timeout(SECONDS):
                while True:  # until the server listens
                    try:
                        reader, writer = await connect(runner, port)
                        break
                    except JobUnreachable:
                        await asyncio.sleep(0.1)
                writer.write(b"GET / HTTP/1.0\r\n\r\n")
                answer = await reader.read()
                writer.close()
                assert b"200 OK" in answer and b"served-from-the-job" in answer, answer
                reader, writer = await asyncio.open_connection("127.0.0.1", port)  # the control: the machine's
                assert await reader.read() == b"the machine's own\n"
                writer.close()
            with pytest.raises(JobUnreachable, match=f"nothing listens on port {unused} inside the job"):
                await connect(runner, unused)


async def test_input_reaches_the_command_and_its_end_ends_it(tmp_path) -> None:
    state = tmp_path / "state"
    async with running(host_jobs(state), state, _dispatch(["sleep", "60"])) as runner:
        process = await spawn(runner, ["cat"], tty=False)
        await process.write(b"line one\n")
        process.close_stdin()
        assert await output(process) == {"stdout": "line one\n", "stderr": "", "exit": "0"}
        # the same through a terminal: its end-of-file ends the shell
        process = await spawn(runner, [], tty=True)
        process.close_stdin()
        assert (await output(process))["exit"] == "0"
        out = await output(await spawn(runner, ["no-such-program"], tty=False))
        assert out["exit"] == "127" and "cannot run 'no-such-program' in the job" in out["stderr"], out


async def test_a_job_that_has_ended_cannot_be_reached(tmp_path) -> None:
    state = tmp_path / "state"
    async with running(host_jobs(state), state, _dispatch(["sleep", "60"])) as runner:
        assert (await output(await spawn(runner, ["true"], tty=False)))["exit"] == "0"  # the control
    for reach in (lambda: spawn(runner, [], tty=True), lambda: connect(runner, 8000)):
        with pytest.raises(JobUnreachable, match=r"the job is not running \(it is cancelled\)"):
            await reach()
    with pytest.raises(JobUnreachable, match="not running"):
        command_argv(runner, [], tty=False)
