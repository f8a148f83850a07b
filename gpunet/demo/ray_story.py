"""A Ray cluster on a gpunet lease, as `scripts/demo ray` shows it: the same real parts as the main
story (gpunet-localnet, the coordinator, three workers with simulated GPUs, 2, 2 and 4) and real Ray
(the `ray` extra). A client opens a 4-GPU lease as a 2-node cluster and attaches a Ray job: the two
nodes form one Ray cluster; a Ray job submitted through the head's Jobs API (`gpunet lease ray --
ray job submit`) runs a task on each node; the worker node's machine is killed, its share moves to
the third node and that node's Ray node joins the running cluster; the client closes the lease."""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from solders.keypair import Keypair
from solders.pubkey import Pubkey

from gpunet import instructions as ix
from gpunet.accounts import fetch
from gpunet.amounts import IO
from gpunet.demo.processes import CoordinatorProcess, loopback_address
from gpunet.demo.story import MAX_PRICE, Demo, DemoResult, short
from gpunet.jobs import job_view, seal_missing_secrets
from gpunet.keys import create_keypair_file
from gpunet.localnet import LocalnetProcess
from gpunet.pda import lease_pda
from gpunet.protocol import RAY_AUTH_TOKEN, JobSpec
from gpunet.raycluster import alive_nodes, ray_token

__all__ = ["RayDemo"]

EVERY_NODE = """
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
ray.init()
@ray.remote(num_gpus=2)
def where():
    import os
    return ray.util.get_node_ip_address(), os.environ.get("CUDA_VISIBLE_DEVICES")
alive = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
on = [where.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n, soft=False)) for n in alive]
for ip, gpus in sorted(ray.get([task.remote() for task in on])):
    print(f"a task ran on {ip} with GPUs {gpus}")
"""


@dataclass
class RayResult(DemoResult):
    tasks_on: int = 0  # nodes a task of the Ray job ran on
    whole_again: bool = False  # the cluster had both nodes again after the loss

    @property
    def ok(self) -> bool:
        return self.tasks_on == 2 and self.whole_again


class RayDemo(Demo):
    async def _lease(self, node: LocalnetProcess, coordinator: CoordinatorProcess) -> DemoResult:
        self.console.rule("[bold]3. A client leases 4 H100s as a 2-node Ray cluster")
        client = await self.market.client(500 * IO)
        keyfile = self.workdir / "client.json"
        create_keypair_file(keyfile, client.wallet)
        lease = lease_pda(client.wallet.pubkey(), 1)
        result = RayResult(lease)
        terms = ix.LeaseTerms(1, 80, 4, ix.ANY, MAX_PRICE, 300)
        await self.market.send(
            client.wallet, [ix.open_lease(client.wallet.pubkey(), client.tokens, self.mint, 1, terms)]
        )
        opened = time.monotonic()
        self.say(f"lease {lease}: 4 GPUs for 300 s; its job: `gpunet lease job LEASE --ray --gpus-per-node 2`")
        self.say("the cluster admits only holders of the lease's Ray token, which the client seals to each node")
        spec = JobSpec(ray=True, secrets=[RAY_AUTH_TOKEN])
        await self._until(lambda: self._submit(coordinator, client.wallet, lease, spec), 60, "the job")
        names = {str(s.node_key.pubkey()): s.name for s in self.suppliers}
        ray = await self._until(lambda: self._cluster(coordinator, client.wallet, lease), 180, "the Ray cluster")
        view = await job_view(coordinator.api_url, client.wallet, lease, tail=1)
        placed = view["placement"]["nodes"]
        result.placed_on = [names[k] for k in placed]
        self.say(
            f"one Ray cluster of {' and '.join(result.placed_on)} (head: {result.placed_on[0]}, 2 GPUs each) "
            f"{time.monotonic() - opened:.1f} s after the lease opened; Jobs API and dashboard at {ray['dashboard']}"
        )

        self.console.rule("[bold]4. A Ray job through the head's Jobs API")
        self.say(f"$ gpunet lease ray {short(lease)} -- ray job submit -- python -c '<a task on each node>'")
        out = await self._ray(
            coordinator, node, keyfile, lease, "job", "submit", "--", sys.executable, "-c", EVERY_NODE
        )
        for line in out.splitlines():
            if line.startswith("a task ran on"):
                self.say(f"  {line}")
        result.tasks_on = sum(line.startswith("a task ran on") for line in out.splitlines())

        self.console.rule("[bold]5. A Ray worker node is lost; the cluster is whole again")
        victim = next(s for s in self.suppliers if str(s.node_key.pubkey()) == placed[1])
        assert victim.worker is not None
        victim.worker.kill()
        killed = time.monotonic()
        self.say(f"{victim.name}'s machine is gone (SIGKILL); the coordinator moves its share")
        await self._until(lambda: self._moved(coordinator, client.wallet, lease, placed[1]), 120, "the share moved")
        ray = await self._until(lambda: self._cluster(coordinator, client.wallet, lease), 180, "the cluster whole")
        now = (await job_view(coordinator.api_url, client.wallet, lease, tail=1))["placement"]["nodes"]
        result.whole_again = True
        self.say(
            f"{names[now[1]]}'s Ray node joined the running cluster {time.monotonic() - killed:.1f} s after the "
            f"loss; head still {names[now[0]]}"
        )
        await self.market.send(
            client.wallet,
            [
                ix.close_lease(
                    client.wallet.pubkey(), client.wallet.pubkey(), client.tokens, lease, await self._nodes(lease)
                )
            ],
        )
        self.say("the client closed the lease: the Ray nodes stopped with it, the escrow's rest came back")
        return result

    async def _cluster(self, coordinator: CoordinatorProcess, client: Keypair, lease: Pubkey) -> Any:
        """The lease's Ray head (the API's `ray`) once its dashboard lists exactly the lease's nodes
        alive (by their advertised addresses). Meanwhile it seals the lease's Ray token to any node
        of the lease without it, as the client's `gpunet lease status --follow` does."""
        view = await job_view(coordinator.api_url, client, lease, tail=1)
        await seal_missing_secrets(coordinator.api_url, self.chain, client, lease, {}, view)
        ray, placement = view["ray"], view["placement"]
        if not ray or not placement:
            return None
        numbers = {str(s.node_key.pubkey()): i for i, s in enumerate(self.suppliers)}
        want = {loopback_address(numbers[k]) for k in placement["nodes"]}
        try:
            nodes = await asyncio.to_thread(alive_nodes, ray["dashboard"], ray_token(client, lease))
        except OSError:
            return None
        return ray if {n["node_ip"] for n in nodes} == want else None

    async def _moved(self, coordinator: CoordinatorProcess, client: Keypair, lease: Pubkey, lost: str) -> bool:
        placement = (await job_view(coordinator.api_url, client, lease, tail=1))["placement"]
        return bool(placement and placement["state"] == "placed" and lost not in placement["nodes"])

    async def _ray(self, coordinator: CoordinatorProcess, node: LocalnetProcess, keyfile: Path, lease: Pubkey,
                   *argv: str) -> str:  # fmt: skip
        """`gpunet lease ray LEASE -- ray ARGV...`: Ray's CLI against the lease's head; its output."""
        ray = str(Path(sys.executable).with_name("ray"))
        command = await asyncio.create_subprocess_exec(
            str(Path(sys.executable).with_name("gpunet")),
            *("lease", "ray", str(lease), "--coordinator", coordinator.api_url, "--keypair", str(keyfile)),
            *("--url", node.url, "--", ray, *argv),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        out = (await asyncio.wait_for(command.communicate(), 180))[0].decode(errors="replace")
        if command.returncode != 0:
            raise RuntimeError(f"`gpunet lease ray` exited with {command.returncode}: {out[-2000:]}")
        return out

    async def _nodes(self, lease: Pubkey) -> list[Pubkey]:
        account = await fetch(self.chain, lease, "Lease")
        return [a.node for a in list(account.assignments)[: account.node_count]]
