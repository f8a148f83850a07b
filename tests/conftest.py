"""Fixtures that run the gpunet-localnet binary on free ports.

The binary is built once per session (`cargo build --workspace --all-targets`, as
scripts/setup does), or taken from $GPUNET_LOCALNET_BIN when set.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import pytest

# solana-py's websocket client is built on websockets.legacy, which warns once on
# import; pyproject turns warnings into errors. Import it here with only that one
# DeprecationWarning ignored (see DESIGN.md).
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="websockets.legacy is deprecated", category=DeprecationWarning)
    import solana.rpc.websocket_api  # noqa: F401

REPO = Path(__file__).resolve().parents[1]
# The slot time used by the tests: short, so blockhash expiry and confirmations are quick.
SLOT_MS = 100


def _target_dir() -> Path:
    return Path(os.environ.get("CARGO_TARGET_DIR", Path.home() / ".cache" / "gpunet" / "target"))


def _is_node_binary(path: Path) -> bool:
    try:
        out = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=30)
    except OSError:
        return False
    return out.returncode == 0 and out.stdout.startswith("gpunet-localnet")


@pytest.fixture(scope="session")
def localnet_bin(tmp_path_factory) -> Path:
    if env := os.environ.get("GPUNET_LOCALNET_BIN"):
        return Path(env)
    target = _target_dir()
    # The target directory may be shared with other checkouts whose builds replace
    # the binary: copy ours out right after building it, and check it is ours.
    copy = tmp_path_factory.mktemp("bin") / "gpunet-localnet"
    for _ in range(3):
        subprocess.run(
            # The same command as scripts/setup (a no-op after it): building only this
            # package would unify features differently and rebuild half the tree.
            ["cargo", "build", "--workspace", "--all-targets"],
            cwd=REPO,
            check=True,
            env={**os.environ, "CARGO_TARGET_DIR": str(target)},
        )
        shutil.copy2(target / "debug" / "gpunet-localnet", copy)
        if _is_node_binary(copy):
            return copy
    raise RuntimeError(f"{target}/debug/gpunet-localnet is not the gpunet-localnet node")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rpc(url: str, body: object | bytes, timeout: float = 10.0) -> object:
    """A raw JSON-RPC POST; returns the decoded JSON response (or None for an empty body)."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        text = resp.read()
    return json.loads(text) if text else None


@dataclass
class LocalNode:
    binary: Path
    ledger: Path | None = None
    genesis: Path | None = None
    slot_ms: int = SLOT_MS
    rpc_port: int = field(default_factory=free_port)
    ws_port: int = field(default_factory=free_port)
    proc: subprocess.Popen | None = None
    log: Path | None = None
    _log_file: object = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.rpc_port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.ws_port}"

    def call(self, method: str, params: list | None = None) -> dict:
        return rpc(self.url, {"jsonrpc": "2.0", "id": 1, "method": method, "params": params or []})

    def start(self, log: Path) -> LocalNode:
        args = [str(self.binary), "--rpc-port", str(self.rpc_port), "--ws-port", str(self.ws_port),
                "--slot-ms", str(self.slot_ms)]
        if self.ledger:
            args += ["--ledger", str(self.ledger)]
        if self.genesis:
            args += ["--genesis", str(self.genesis)]
        self.log = log
        self._log_file = log.open("ab")
        self.proc = subprocess.Popen(args, stdout=self._log_file, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self._log_file.close()
                raise RuntimeError(f"gpunet-localnet exited with {self.proc.returncode}: {log.read_text()}")
            try:
                if self.call("getHealth").get("result") == "ok":
                    return self
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError("gpunet-localnet did not become healthy")

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        code = self.proc.returncode
        self.proc = None
        self._log_file.close()
        return code


@pytest.fixture
def start_node(localnet_bin, tmp_path):
    """Factory: start_node(ledger=..., genesis=...) -> a running LocalNode; all stopped at teardown."""
    nodes: list[LocalNode] = []

    def start(**kwargs) -> LocalNode:
        node = LocalNode(localnet_bin, **kwargs)
        nodes.append(node)
        return node.start(tmp_path / f"node{len(nodes)}.log")

    yield start
    for n in nodes:
        n.stop()


@pytest.fixture
def node(start_node) -> LocalNode:
    return start_node()
