"""The fixtures of the container tests (test_sandbox.py, test_egress.py): rootful podman with runc
and the test image (scripts/sandbox-setup builds it; the tests skip, saying why, where it could not),
and a listener on the machine itself."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator

import pytest

from tests.worker.sandboxes import IMAGE
from worker.sandbox import Sandbox, SandboxUnavailable


def podman_missing(image: str = IMAGE) -> str | None:
    """Why rootful podman with runc cannot run `image` here; None when it can."""
    if os.geteuid() != 0:
        return "the container tests need root (rootful podman)"
    for tool in ("podman", "runc"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed: run scripts/setup (apt-get install podman runc)"
    found = subprocess.run(["podman", "image", "exists", image], capture_output=True, check=False)
    if found.returncode != 0:
        return f"the test image {image} is missing: run scripts/sandbox-setup (it says why it cannot build it)"
    return None


@pytest.fixture
def podman(tmp_path, monkeypatch) -> Sandbox:
    """A sandbox on rootful podman with runc; podman's default ulimits are unusable in some
    containers (CI's), so the tests give it a containers.conf without them."""
    conf = tmp_path / "containers.conf"
    conf.write_text("[containers]\ndefault_ulimits = []\n")
    monkeypatch.setenv("CONTAINERS_CONF", str(conf))
    reason = podman_missing()
    if reason:
        pytest.skip(reason)
    try:
        return Sandbox.configure(engine="podman", runtime="runc", default_image=IMAGE, pids_limit=64, memory="256m")
    except SandboxUnavailable as e:
        pytest.skip(f"the container sandbox cannot run here: {e}")


@pytest.fixture
def counting_listener() -> Iterator[tuple[int, list[object]]]:
    """A listener on every address of this machine (its loopback too), and the connections it had."""
    sock = socket.create_server(("0.0.0.0", 0))
    sock.settimeout(0.2)
    accepted: list[object] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except TimeoutError:
                continue
            accepted.append(conn)
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield sock.getsockname()[1], accepted
    stop.set()
    thread.join()
    sock.close()


@pytest.fixture
def listener(counting_listener) -> tuple[str, int]:
    """The same listener, as a container names it: the host (it reaches the machine through its
    bridge), and the port."""
    port, _ = counting_listener
    return "host", port
