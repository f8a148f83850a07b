"""Starting and stopping a gpunet-localnet node process (the demo, the benches and the tests; `gpunet
localnet` runs one in the foreground), and the key such a node makes the program's upgrade authority."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from solders.keypair import Keypair
from solders.pubkey import Pubkey

from gpunet.errors import GpunetError

__all__ = [
    "PROGRAM_SO_ENV",
    "LocalnetError",
    "LocalnetProcess",
    "cache_dir",
    "cargo_target_dir",
    "free_ports",
    "localnet_binary",
    "localnet_deployer",
    "program_build",
]

# Name the SBF build of the program for the node to run instead of the native one, and its stack
# frame layout (read by the node itself: localnet/src/gpunet_program.rs); children inherit them.
PROGRAM_SO_ENV = "GPUNET_PROGRAM_SO"
STACK_FRAME_GAPS_ENV = "GPUNET_SBF_STACK_FRAME_GAPS"


def localnet_deployer() -> Keypair:
    """The key a node started from here makes the gpunet program's upgrade authority, so the only key
    that may `initialize` it (as the deployer's key is on a real cluster). Its seed is public: it
    exists for local nodes only; the demo, the benchmarks and the tests initialise gpunet with it."""
    return Keypair.from_seed(hashlib.sha256(b"gpunet-localnet-deployer").digest())


class LocalnetError(GpunetError):
    """The node binary is missing or the node did not come up; the message says what to do."""


class _PortTaken(GpunetError):
    """The node could not bind one of its ports."""


def cache_dir() -> Path:
    """gpunet's cache ($XDG_CACHE_HOME/gpunet, else ~/.cache/gpunet), read as the scripts read it
    (`${XDG_CACHE_HOME:-$HOME/.cache}`: an empty one is unset), so the CLI finds what scripts/setup
    built there (the cargo target dir, scripts/env.sh) and promtool (scripts/promtool-setup)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpunet"


def cargo_target_dir() -> Path:
    """$CARGO_TARGET_DIR, else the one scripts/setup builds into (scripts/env.sh)."""
    return Path(os.environ.get("CARGO_TARGET_DIR") or cache_dir() / "target")


def localnet_binary() -> Path:
    """$GPUNET_LOCALNET_BIN, else the build in the cargo target dir scripts/setup uses."""
    if env := os.environ.get("GPUNET_LOCALNET_BIN"):
        return Path(env)
    binary = cargo_target_dir() / "debug" / "gpunet-localnet"
    if not binary.is_file():
        raise LocalnetError(f"{binary} not found: run scripts/setup (or set GPUNET_LOCALNET_BIN)")
    return binary


def program_build() -> str:
    """How a node started from here runs the gpunet program, in words."""
    so = os.environ.get(PROGRAM_SO_ENV)
    if not so:
        return "native build"
    gaps = os.environ.get(STACK_FRAME_GAPS_ENV) == "1"
    return f"SBF build {so}, {'stack frames with gaps' if gaps else 'contiguous stack frames'}"


def free_ports(count: int) -> list[int]:
    """`count` distinct loopback ports that are free now. The sockets are held open together: one
    at a time, the kernel may hand out a port it just handed out again."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]


class LocalnetProcess:
    """A gpunet-localnet child process on free loopback ports; a context manager."""

    def __init__(
        self,
        log: Path,
        slot_ms: int = 400,
        binary: Path | None = None,
        confirm_slots: int = 0,
        ledger: Path | None = None,
        genesis: Path | None = None,
        upgrade_authority: Pubkey | None = None,
    ) -> None:
        self.binary = binary or localnet_binary()
        self.rpc_port, self.ws_port = free_ports(2)
        self.slot_ms = slot_ms
        self.confirm_slots = confirm_slots  # slots before "confirmed" (0: at once; 2 is mainnet-like)
        self.log = log
        self.ledger = ledger
        self.genesis = genesis
        self.upgrade_authority = upgrade_authority or localnet_deployer().pubkey()
        self._proc: subprocess.Popen[bytes] | None = None
        self._started_once = False

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.rpc_port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.ws_port}"

    def call(self, method: str, params: list | None = None, timeout: float = 10.0) -> dict:
        """One raw JSON-RPC call; the decoded response object."""
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params or []}).encode()
        request = urllib.request.Request(self.url, body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())

    def _healthy(self) -> bool:
        try:
            return self.call("getHealth", timeout=2).get("result") == "ok"
        except (OSError, urllib.error.URLError, ValueError):
            return False

    def start(self, timeout: float = 30.0) -> LocalnetProcess:
        # The ports were free when picked, but another process may take one before the node binds
        # it (an outgoing connection's ephemeral port, say): a first start then tries new ports. A
        # restart keeps its ports, since callers hold the node's URL.
        for attempt in range(3):
            try:
                self._start(timeout)
            except _PortTaken as e:
                if self._started_once or attempt == 2:
                    raise LocalnetError(str(e)) from None
                self.rpc_port, self.ws_port = free_ports(2)
                continue
            self._started_once = True
            return self
        raise AssertionError("unreachable")

    def _start(self, timeout: float) -> None:
        args = [
            str(self.binary),
            "--rpc-port",
            str(self.rpc_port),
            "--ws-port",
            str(self.ws_port),
            "--slot-ms",
            str(self.slot_ms),
            "--upgrade-authority",
            str(self.upgrade_authority),
        ]
        if self.confirm_slots:  # the node's default is 0
            args += ["--confirm-slots", str(self.confirm_slots)]
        if self.ledger:
            args += ["--ledger", str(self.ledger)]
        if self.genesis:
            args += ["--genesis", str(self.genesis)]
        with self.log.open("ab") as log:
            logged = log.tell()
            self._proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                message = f"gpunet-localnet exited with {self._proc.returncode}; see {self.log}"
                with self.log.open("rb") as log:
                    log.seek(logged)
                    if b"Address already in use" in log.read():
                        raise _PortTaken(message)
                raise LocalnetError(message)
            if self._healthy():
                return
            time.sleep(0.05)
        self.stop()
        raise LocalnetError(f"gpunet-localnet did not answer getHealth within {timeout:.0f} s; see {self.log}")

    def stop(self, sig: int = signal.SIGTERM) -> int:
        """Stops the node with `sig` (it flushes its ledger on SIGTERM/SIGINT); its exit code."""
        if self._proc is None:
            return 0
        if self._proc.poll() is None:
            self._proc.send_signal(sig)
            try:
                self._proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        code = self._proc.returncode
        self._proc = None
        return code

    def __enter__(self) -> LocalnetProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
