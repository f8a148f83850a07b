"""The egress policy's filter with the real tools (rootful podman, nftables): a container job reaches
the internet but not the LAN, the cloud metadata endpoint or the machine itself, "another machine"
being tests/worker/outside.py's."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from solders.pubkey import Pubkey

from gpunet.exits import Exit
from gpunet.keys import create_keypair_file
from gpunet.protocol import Dispatch, JobSpec
from tests.worker.outside import ALLOWED, HOST_PRIVATE, HOST_PUBLIC, INTERNET, LAN, METADATA, other_machine
from tests.worker.sandboxes import IMAGE, agent_started
from tests.worker.test_sandbox import GPUNET, Recorder, _run, _state
from worker.egress import TABLE, install_egress_network
from worker.runner import JobDirs, JobRunner
from worker.sandbox import Sandbox, SandboxUnavailable

# What the job tries: a TCP connection to each address (a short timeout: a rejection is immediate),
# and a DNS question to its resolver for its own name (podman's aardvark-dns on the network's gateway).
# One JSON line: "ok" or the error's errno name by address, and the DNS answer's count.
PROBE = r"""
import errno, json, socket, struct, sys
out = {}
for host, port in json.loads(sys.argv[1]):
    try:
        socket.create_connection((host, port), timeout=3).close()
        out[host] = "ok"
    except OSError as e:
        out[host] = errno.errorcode.get(e.errno, type(e).__name__)
resolver = [line.split()[1] for line in open("/etc/resolv.conf") if line.startswith("nameserver")][0]
name = socket.gethostname() + ".dns.podman"
question = struct.pack(">6H", 7, 0x100, 1, 0, 0, 0) + b"".join(bytes([len(p)]) + p.encode() for p in name.split("."))
with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
    s.settimeout(3)
    try:
        s.sendto(question + b"\0\0\1\0\1", (resolver, 53))
        out["dns_answers"] = struct.unpack(">H", s.recv(512)[6:8])[0]
    except OSError as e:
        out["dns_answers"] = errno.errorcode.get(e.errno, type(e).__name__)
out["resolver"] = resolver
print(json.dumps(out), flush=True)
"""

SERVER = """
import socket
server = socket.create_server(("0.0.0.0", 0))
print(server.getsockname()[1], flush=True)
while True:
    server.accept()[0].close()
"""


@dataclass(frozen=True)
class Outside:
    port: int  # where the other machine listens, on each of its addresses


@pytest.fixture
def outside(podman) -> Iterator[Outside]:
    """The other machine, and its listener on every address."""
    with other_machine(SERVER) as port:
        yield Outside(port)


async def _probe(sandbox: Sandbox, tmp_path: Path, targets: list[tuple[str, int]]) -> dict:
    spec = JobSpec(image=IMAGE, command=["python3", "-c", PROBE, json.dumps(targets)])
    out, _ = await _run(sandbox, _state(tmp_path), spec)
    return out


async def test_an_egress_job_reaches_the_internet_not_the_lan_the_metadata_endpoint_or_the_machine(
    tmp_path, podman, outside, listener
) -> None:
    _, host_port = listener
    gateway = json.loads(
        subprocess.run(["podman", "network", "inspect", podman.egress_network], capture_output=True, check=True).stdout
    )[0]["subnets"][0]["gateway"]
    with socket.create_connection((HOST_PUBLIC, host_port), timeout=3):  # the machine's listener is there
        pass
    out = await _probe(
        podman,
        tmp_path,
        [
            (INTERNET, outside.port),
            (METADATA, outside.port),
            (LAN, outside.port),
            (ALLOWED, outside.port),  # allowed only where the supplier says so (below)
            (HOST_PUBLIC, host_port),
            (HOST_PRIVATE, host_port),
            (gateway, host_port),
        ],
    )
    assert out[INTERNET] == "ok", out  # the honest control
    for blocked in (METADATA, LAN, ALLOWED, HOST_PUBLIC, HOST_PRIVATE, gateway):
        assert out[blocked] == "EHOSTUNREACH", (blocked, out)  # rejected at once, not timed out
    # DNS still works: the resolver is the network's gateway, and it answers
    assert out["resolver"] == gateway and out["dns_answers"] == 1, out


async def test_the_cidrs_the_supplier_allows_are_reachable_and_nothing_else(
    tmp_path, podman, outside, listener
) -> None:
    _, host_port = listener
    allowing = Sandbox.configure(
        engine="podman", runtime="runc", default_image=IMAGE, egress_allow=["10.213.1.0/24", f"{HOST_PUBLIC}/32"]
    )
    assert allowing.egress_network != podman.egress_network  # its own network: the other worker's stays as it was
    out = await _probe(
        allowing,
        tmp_path,
        [(address, outside.port) for address in (ALLOWED, LAN, METADATA, INTERNET)] + [(HOST_PUBLIC, host_port)],
    )
    assert out[ALLOWED] == out[INTERNET] == "ok", out
    # the rest of the LAN, the metadata endpoint, and the machine itself even where allowed
    assert out[LAN] == out[METADATA] == out[HOST_PUBLIC] == "EHOSTUNREACH", out


async def test_a_job_under_policy_none_reaches_nothing(tmp_path, podman, outside) -> None:
    out = await _probe(dataclasses.replace(podman, network="none"), tmp_path, [(INTERNET, outside.port)])
    assert out[INTERNET] == "ENETUNREACH", out


async def test_a_filter_removed_since_the_worker_started_is_installed_again_before_a_job(
    tmp_path, podman, outside, monkeypatch
) -> None:
    subprocess.run(["nft", "delete", "table", "inet", TABLE], check=True)  # as `nft flush ruleset` would
    out = await _probe(podman, tmp_path, [(METADATA, outside.port), (INTERNET, outside.port)])
    assert out[METADATA] == "EHOSTUNREACH" and out[INTERNET] == "ok", out
    # where it cannot be installed again, the job does not start
    monkeypatch.setenv("PATH", _fake(tmp_path, "nft", "exit 1"))
    dispatch = Dispatch(lease=str(Pubkey.new_unique()), gpus=1, job=JobSpec(image=IMAGE, command=["true"]))
    rec = Recorder()
    final = await JobRunner(
        dispatch, ["GPU-sim-a"], JobDirs.of(tmp_path, dispatch), simulated=True, send=rec.send, sandbox=podman
    ).run()
    assert final.state == "failed" and "the job's network cannot be filtered" in final.detail, final
    assert "running" not in rec.states()


def test_installing_the_filter_again_changes_nothing(podman) -> None:
    def table() -> str:
        listed = subprocess.run(["nft", "list", "table", "inet", TABLE], capture_output=True, text=True, check=True)
        return listed.stdout

    before = table()
    again = Sandbox.configure(engine="podman", runtime="runc", default_image=IMAGE)
    assert again.egress_network == podman.egress_network == "gpunet-egress"
    assert table() == before


def test_a_network_removed_since_leaves_the_table_at_the_next_install(podman) -> None:
    """podman gives a removed network's bridge name to the next network it creates: what the table
    held for it must not carry over (allowances, or a filter on a network that is not gpunet's)."""
    assert podman.engine is not None

    def table() -> str:
        listed = subprocess.run(["nft", "list", "table", "inet", TABLE], capture_output=True, text=True, check=True)
        return " ".join(listed.stdout.split())

    gone = install_egress_network(podman.engine, ["10.213.9.0/24"])
    assert f'"{gone.bridge}" . 10.213.9.0/24' in table()  # the control: there while the network is
    subprocess.run(["podman", "network", "rm", gone.name], capture_output=True, check=True)
    ours = install_egress_network(podman.engine)
    assert "10.213.9.0/24" not in table() and f'"{gone.bridge}"' not in table().replace(f'"{ours.bridge}"', "")


def _fake(tmp_path: Path, name: str, script: str) -> str:
    """A directory first on PATH holding `name`, a script: the tools' boundary."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / name).write_text(f"#!/bin/sh\n{script}\n")
    (bin_dir / name).chmod(0o755)
    return f"{bin_dir}:{os.environ['PATH']}"


def test_without_the_filter_the_worker_does_not_start_unless_the_supplier_opts_out(
    tmp_path, podman, monkeypatch
) -> None:
    path = _fake(tmp_path, "nft", 'echo "Error: Could not process rule: Operation not permitted" >&2; exit 1')
    monkeypatch.setenv("PATH", path)
    with pytest.raises(SandboxUnavailable, match=r"Operation not permitted.*--egress-unfiltered"):
        Sandbox.configure(engine="podman", runtime="runc")
    assert Sandbox.configure(engine="podman", runtime="runc", egress_unfiltered=True).egress_network == "bridge"
    assert Sandbox.configure(engine="podman", runtime="runc", network="none").network == "none"  # no filter needed
    # the worker itself: exit 12, what to do, and its state directory untouched
    create_keypair_file(tmp_path / "node.json")
    env = {**os.environ, "GPUNET_WORKER_CONTAINER_ENGINE": "podman", "GPUNET_WORKER_CONTAINER_RUNTIME": "runc"}
    argv = [GPUNET, "worker", "run", "-k", str(tmp_path / "node.json"), "--simulate-gpus", "H100:1:80"]
    argv += ["--state-dir", str(tmp_path / "state")]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    assert done.returncode == Exit.NO_SANDBOX, done.stderr
    for advice in ("apt-get install nftables", "--network none", "--egress-unfiltered"):
        assert advice in " ".join(done.stderr.split()), done.stderr
    assert not (tmp_path / "state").exists()
    # the control: with the opt-out it starts, and waits for its gateway
    with agent_started([*argv, "--egress-unfiltered"], env, tmp_path / "agent.log"):
        pass


def test_a_rootless_or_docker_worker_is_refused_the_egress_policy(tmp_path, podman, monkeypatch) -> None:
    with monkeypatch.context() as rootless:
        rootless.setattr(os, "geteuid", lambda: 1000)
        with pytest.raises(SandboxUnavailable, match=r"does not run as root.*--egress-unfiltered"):
            Sandbox.configure(engine="podman", runtime="runc")
    monkeypatch.setenv("PATH", _fake(tmp_path, "docker", "exit 0"))  # a docker that answers `docker info`
    with pytest.raises(SandboxUnavailable, match="podman's networks only"):
        Sandbox.configure(engine="docker")
    assert Sandbox.configure(engine="docker", egress_unfiltered=True).egress_network == "bridge"  # the control
