"""Fixtures that run the gpunet-localnet binary on free ports.

The binary is built once per session (`cargo build --workspace --all-targets`, as
scripts/setup does), or taken from $GPUNET_LOCALNET_BIN when set.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.request
import warnings
from pathlib import Path

import pytest

from gpunet.localnet import LocalnetProcess, cargo_target_dir

# solana-py's websocket client is built on websockets.legacy, which warns once on
# import; pyproject turns warnings into errors. Import it here with only that one
# DeprecationWarning ignored (see docs/architecture.md, the Python chain stack).
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="websockets.legacy is deprecated", category=DeprecationWarning)
    import solana.rpc.websocket_api  # noqa: F401 - imported for its one warning, here and not in a test

REPO = Path(__file__).resolve().parents[1]
# The slot time used by the tests: short, so blockhash expiry and confirmations are quick.
SLOT_MS = 100


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
    target = cargo_target_dir()
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


def rpc(url: str, body: object | bytes, timeout: float = 10.0) -> object:
    """A raw JSON-RPC POST; returns the decoded JSON response (or None for an empty body)."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        text = resp.read()
    return json.loads(text) if text else None


@pytest.fixture
def start_node(localnet_bin, tmp_path):
    """Factory: start_node(ledger=..., genesis=..., slot_ms=...) -> a running node; all stopped at teardown."""
    nodes: list[LocalnetProcess] = []

    def start(**kwargs) -> LocalnetProcess:
        kwargs = {"slot_ms": SLOT_MS, "binary": localnet_bin, **kwargs}
        node = LocalnetProcess(tmp_path / f"node{len(nodes) + 1}.log", **kwargs)
        nodes.append(node)
        return node.start()

    yield start
    for n in nodes:
        n.stop()


@pytest.fixture
def node(start_node) -> LocalnetProcess:
    return start_node()
