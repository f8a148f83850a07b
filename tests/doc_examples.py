"""The guides' runnable shell sessions, and a runner for them (tests/test_doc_examples.py).

A session is a fenced ```bash block right after a marker line `<!-- runnable: NAME -->`. The
runner writes each block to a file of its page's name with the block's lines at their line numbers
in the page (the other lines blank), and sources them in order from one `bash` with `set -euo
pipefail` and an `-x` trace whose prefix is the page and line: `docs/client/first-lease.md:23:`.
An ERR trap names the command that failed, its page, line and exit status. The session runs in its
own process group (everything it starts in the background with it), stopped with SIGTERM, then
SIGKILL, at the end; and, where the machine allows it, in a network namespace of its own, so that
the default ports the pages use (8899, 8900, 8080, 8910) are free whatever else runs here."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Block", "Outcome", "blocks", "gpunet_commands", "isolation", "run_session"]

MARKER = re.compile(r"<!--\s*runnable\b(?P<rest>.*?)-->")
GOOD_MARKER = re.compile(r"<!-- runnable: (?P<name>[a-z0-9-]+) -->")
FENCE = "```bash"
# the ports the pages' commands use, by default (the node's RPC and PubSub, the coordinator's API
# and worker gateway): free in a network namespace of the session's own, checked otherwise
DEFAULT_PORTS = (8899, 8900, 8080, 8910)
SESSION_DIR = "doc-session"


class MarkerError(ValueError):
    """A marker that is not `<!-- runnable: NAME -->` right before a ```bash fence."""


@dataclass(frozen=True)
class Block:
    page: str  # the page's path in the repository, e.g. docs/audit.md
    name: str  # the marker's NAME
    first_line: int  # the page's line (1-based) of the block's first line
    text: str


def blocks(page: str, text: str) -> list[Block]:
    """The page's runnable blocks, in order. A malformed marker, or one not followed (after blank
    lines) by a ```bash fence that is closed, raises MarkerError: a typo never runs nothing."""
    lines = text.splitlines()
    found = []
    for i, line in enumerate(lines):
        if not MARKER.search(line):
            continue
        good = GOOD_MARKER.fullmatch(line.strip())
        if good is None:
            raise MarkerError(f"{page}:{i + 1}: {line.strip()!r} is not `<!-- runnable: NAME -->` on a line of its own")
        j = i + 1
        while j < len(lines) and not lines[j].strip():
            j += 1
        if j == len(lines) or lines[j].strip() != FENCE:
            raise MarkerError(f"{page}:{i + 1}: the marker is not followed by a {FENCE} fence")
        end = next((k for k in range(j + 1, len(lines)) if lines[k].strip() == "```"), None)
        if end is None:
            raise MarkerError(f"{page}:{j + 1}: the {FENCE} fence is never closed")
        found.append(Block(page, good["name"], j + 2, "\n".join(lines[j + 1 : end]) + "\n"))
    return found


def gpunet_commands(block: Block) -> list[str]:
    """The block's lines that run gpunet (outside comments): at a line's start, in $(...), after |,
    ;, && or ||, or as an until or while loop's condition."""
    return [
        line.strip()
        for line in block.text.splitlines()
        if re.search(r"(^|\$\(|[|;&]\s*|\b(until|while|if)\s+)gpunet ", line.split("#", 1)[0].strip())
    ]


def _driver(session: list[Block], directory: Path) -> Path:
    """Writes each block as `directory/PAGE` (its lines where the page has them) and the driver
    script that sources them in order; returns the driver."""
    for block in session:
        path = directory / block.page
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n" * (block.first_line - 1) + block.text)
    prefix = f"{directory}/"
    sources = "\n".join(f"source '{prefix}{b.page}'" for b in session)
    driver = directory / "session.sh"
    driver.write_text(
        "set -euo pipefail\n"
        f"trap 'echo \"doc example failed (exit $?) at ${{BASH_SOURCE[0]#{prefix}}}:$LINENO: $BASH_COMMAND\" >&2' ERR\n"
        f"PS4='+ ${{BASH_SOURCE[0]#{prefix}}}:$LINENO: '\n"
        "set -x\n"
        f"{sources}\n"
    )
    return driver


# Brings the loopback interface of a fresh network namespace up (SIOCSIFFLAGS, IFF_UP | IFF_RUNNING:
# what `ip link set lo up` does, without needing iproute2), then becomes the command that follows.
_LO_UP = (
    "import fcntl, os, socket, struct, sys\n"
    "with socket.socket() as s:\n"
    "    fcntl.ioctl(s, 0x8914, struct.pack('16sH14x', b'lo', 0x1 | 0x40))\n"
    "os.execvp(sys.argv[1], sys.argv[1:])\n"
)


def _netns_prefix() -> list[str]:
    user = [] if os.geteuid() == 0 else ["--user", "--map-current-user"]
    return ["unshare", *user, "--net", "--", sys.executable, "-c", _LO_UP]


def isolation() -> tuple[list[str], str]:
    """The command prefix that runs the session in a network namespace of its own, and how it runs
    (said in a failure); where none can be made: no prefix, and the default ports must be free."""
    prefix = _netns_prefix()
    try:
        probe = subprocess.run([*prefix, "true"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        probe_error = str(e)
    else:
        if probe.returncode == 0:
            return prefix, "in a network namespace of its own"
        probe_error = probe.stderr.strip()
    taken = []
    for port in DEFAULT_PORTS:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                taken.append(port)
    if taken:
        raise RuntimeError(
            f"no network namespace for the session ({probe_error}) and the pages' default ports {taken} are "
            "taken here: stop what listens on them (a `gpunet localnet`, a coordinator)"
        )
    return [], f"on this machine's ports {DEFAULT_PORTS} (no network namespace: {probe_error})"


@dataclass(frozen=True)
class Outcome:
    returncode: int | None  # None: it ran past the timeout and was stopped
    output: str  # the session's stdout and stderr, trace included
    how: str  # where it ran (isolation())

    def failed_at(self) -> str | None:
        """The ERR trap's line: the command that failed, with its page and line."""
        lines = [line for line in self.output.splitlines() if line.startswith("doc example failed")]
        return lines[-1] if lines else None


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _stop_group(pgid: int, grace: float) -> None:
    """SIGTERM to the session's process group (the coordinator stops its PostgreSQL on it), then
    SIGKILL to what is left after `grace` seconds."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while _group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def _stop_postgres(workdir: Path) -> None:
    """The coordinator's embedded PostgreSQL (under the session's .state/) leaves the process group
    (pg_ctl starts it in a session of its own): stopped by its pid, if a killed coordinator left it."""
    for pidfile in workdir.glob(".state/**/postmaster.pid"):
        try:
            pid = int(pidfile.read_text().split()[0])
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue
        if str(pidfile.parent).encode() not in cmdline:
            continue  # not that server (a pid reused)
        for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
            deadline = time.monotonic() + wait
            while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
                time.sleep(0.2)


def run_session(session: list[Block], scratch: Path, env: dict[str, str], timeout: float) -> Outcome:
    """Runs the blocks, in order, as one bash session in `scratch`/work (its working directory),
    with `env`; everything it started is stopped before this returns."""
    control = scratch / SESSION_DIR
    workdir = scratch / "work"
    control.mkdir(parents=True, exist_ok=True)
    workdir.mkdir(parents=True, exist_ok=True)
    driver = _driver(session, control)
    prefix, how = isolation()
    log = control / "session.log"
    returncode: int | None = None
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [*prefix, "bash", str(driver)],
            cwd=workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: the background commands are in it too
        )
        try:
            returncode = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            returncode = None
        finally:
            _stop_group(proc.pid, grace=30)
            proc.wait()
            _stop_postgres(workdir)
    return Outcome(returncode, log.read_text(errors="replace"), how)
