"""The deployment bench/tunnel measures, made of the processes a user runs (bench/coordinator's
harness): gpunet-localnet, `gpunet coordinator run` (embedded PostgreSQL; the relay is in its
process, on its gateway's WebSocket server), one `gpunet worker run --simulate-gpus` (its data plane
linked to the relay, reading the lease's client on chain, taking clients directly on a port of its
own too), and a one-GPU lease whose job is bench/tunnel/target.py, a host job in bubblewrap on the
machine's network (so the benchmark also reaches its port directly, the baseline)."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from solders.keypair import Keypair
from solders.pubkey import Pubkey

from bench.coordinator.harness import PRICE, Deployment, Node, deployment, until
from gpunet.amounts import IO
from gpunet.demo import processes
from gpunet.demo.processes import WorkerProcess
from gpunet.keys import create_keypair_file
from gpunet.localnet import free_ports
from gpunet.protocol import Expose, JobSpec
from gpunet.reach import node_of_rank, reach_info

TARGET = Path(__file__).resolve().with_name("target.py")


@dataclass
class World:
    dep: Deployment
    node: Node
    lease: Pubkey
    node_key: Pubkey
    port: int  # the job's server, on 127.0.0.1 (the job shares the machine's network)
    relay: str  # the relay's URL for clients (/client on the coordinator's gateway server)
    coordinator_pid: int
    worker_pid: int

    @property
    def api(self) -> str:
        return self.dep.coordinator.api_url

    @property
    def client(self) -> Keypair:
        return self.dep.client


def profiled(directory: Path) -> None:
    """The coordinator and the worker run under cProfile, each writing its stats into `directory` when
    it exits (`gpunet` exec'd by a wrapper, so each keeps its pid): for looking, not for the figures."""
    directory.mkdir(parents=True, exist_ok=True)
    wrapper = directory / "gpunet-profiled"
    wrapper.write_text(
        f'#!/bin/sh\nexec "{sys.executable}" -m cProfile -o "{directory}/$1.prof" "{processes._gpunet()}" "$@"\n'
    )
    wrapper.chmod(0o755)
    processes._gpunet = lambda: str(wrapper)


@contextlib.asynccontextmanager
async def world(profile: Path | None = None) -> AsyncIterator[World]:
    if profile is not None:
        profiled(profile)
    # the coordinator's settings as bench/coordinator's; nothing here moves leases between nodes
    async with deployment() as dep:
        s = await dep.market.supplier(1, PRICE, 500 * IO)
        keyfile = dep.workdir / "node-n0.json"
        create_keypair_file(keyfile, s.node_key)
        worker = WorkerProcess(dep.workdir, "n0", keyfile, "H100:1:80", dep.coordinator.gateway_url)
        assert dep.localnet is not None
        # the job's script is read from here; the lease's client read on chain; clients taken directly too
        worker.argv += ["--host-job-path", str(TARGET.parent), "--url", dep.localnet.url, "--tunnel-port", "0"]
        worker.start()
        node = Node("n0", s.wallet, s.node_key, worker)
        dep.nodes.append(node)
        await until(lambda: dep.online(1), 120, "the worker online")

        port = free_ports(1)[0]
        spec = JobSpec(
            command=[sys.executable, str(TARGET)],
            env={"PORT": str(port)},
            expose=[Expose(name="bench", port=port, protocol="tcp")],
        )
        lease, _ = await dep.open(1, 3_600, spec, gpus_per_node=None)

        async def running() -> bool:
            return list((await dep.states(lease)).values()) == ["running"]

        await until(running, 60, "the job running")
        await until(lambda: _listening(port), 30, "the job's server listening")
        node_key = await node_of_rank(dep.chain, lease, 0)
        info = await reach_info(dep.coordinator.api_url, dep.client, lease)
        assert dep.coordinator.proc is not None and worker.proc is not None
        yield World(dep, node, lease, node_key, port, str(info["relay"]), dep.coordinator.proc.pid, worker.proc.pid)
    shutil.rmtree(dep.workdir, ignore_errors=True)  # kept when the benchmark failed: its logs are there


async def _listening(port: int) -> bool:
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return False
    writer.close()
    return True
