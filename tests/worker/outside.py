"""Another machine, for the tests of what a job (or the agent on its behalf) may reach: a network
namespace behind a veth pair, with the addresses of the internet (TEST-NET-3), of the LAN
(10.213.0.0/16) and of the cloud metadata endpoint; the machine itself gets a public address and a
private one on its end of the pair. A server of the test's runs there, listening on all of them.
The namespace is gone after the test, even a failed one (while it is there, the metadata address
leads to it: on a cloud machine the real endpoint is out of the machine's reach for those seconds)."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

INTERNET, METADATA, LAN, ALLOWED = "203.0.113.10", "169.254.169.254", "10.213.0.1", "10.213.1.1"
HOST_PUBLIC, HOST_PRIVATE = "198.51.100.1", "10.213.255.1"  # the machine's own (its end of the pair)
INPUT_SERVER = (Path(__file__).parent / "input_server.py").read_text()  # a hostile server of job inputs


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


def missing() -> str | None:
    """Why the other machine cannot be made here, or None."""
    if os.geteuid() != 0:
        return "the other machine (a network namespace) needs root"
    if shutil.which("ip") is None:
        return "ip (iproute2) is not installed"
    return None


@contextlib.contextmanager
def other_machine(server: str, *args: str) -> Iterator[int]:
    """The other machine running `server` (a Python script that prints the port it listens on, on
    every address, first); yields that port."""
    ns, veth = f"gpunettest-{os.getpid()}", f"gpunettest{os.getpid() % 100000}"
    process = None
    try:
        _ip("netns", "add", ns)
        _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
        for address in (f"{HOST_PRIVATE}/30", f"{HOST_PUBLIC}/32"):
            _ip("addr", "add", address, "dev", veth)
        _ip("link", "set", veth, "up")
        _ip("-n", ns, "addr", "add", "10.213.255.2/30", "dev", "eth0")
        for address in (INTERNET, METADATA, LAN, ALLOWED):
            _ip("-n", ns, "addr", "add", f"{address}/32", "dev", "lo")
        for link in ("lo", "eth0"):
            _ip("-n", ns, "link", "set", link, "up")
        _ip("-n", ns, "route", "add", "default", "via", HOST_PRIVATE)
        for address in (INTERNET, METADATA, LAN, ALLOWED):  # gone with the link
            _ip("route", "add", f"{address}/32", "via", "10.213.255.2", "dev", veth)
        process = subprocess.Popen(
            ["ip", "netns", "exec", ns, sys.executable, "-c", server, *args], stdout=subprocess.PIPE, text=True
        )
        assert process.stdout is not None
        port = int(process.stdout.readline())
        with socket.create_connection((INTERNET, port), timeout=3):  # the machine itself reaches it
            pass
        yield port
    finally:
        if process is not None:
            process.kill()
            process.wait()
            process.stdout.close()  # type: ignore[union-attr]
        subprocess.run(["ip", "link", "del", veth], capture_output=True)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
