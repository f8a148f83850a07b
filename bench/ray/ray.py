"""Benchmark (not a test): a lease's Ray cluster, from the lease opened to every node in, and from
its head lost to whole again.

`gpunet worker run` processes with one simulated GPU each (a loopback address and 40 cluster ports
apiece, one CPU for Ray), the coordinator and gpunet-localnet on this machine, and real Ray (the
`ray` extra). Each round opens an N-GPU lease (one GPU per node), attaches a Ray job (`ray: true`),
and times open_lease confirmed -> the head's dashboard (the address the coordinator's API gives)
lists N alive nodes; the client then closes the lease so the next round finds the nodes free. Then,
for a few rounds, the head's worker is SIGKILLed and the time to the new head's dashboard listing N
alive nodes is measured (a spare takes the share: the cluster re-forms on it). Target (issue 21):
lease opened -> cluster ready with all N nodes, p50 < 30 s (io.net: "under 90 seconds").

    .venv/bin/python bench/ray/ray.py [--rounds 10] [--sizes 2,4] [--head-rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "coordinator"))

from harness import Deployment, deployment, trials_summary, until

from gpunet.jobs import job_view, seal_missing_secrets
from gpunet.protocol import RAY_AUTH_TOKEN, JobSpec
from gpunet.raycluster import alive_nodes, ray_token

SPEC = JobSpec(ray=True, secrets=[RAY_AUTH_TOKEN])


async def _cluster(dep: Deployment, lease, nodes: int, head: str | None = None) -> str | None:
    """The head's node key once its dashboard lists `nodes` alive nodes (another head than `head`),
    sealing the lease's Ray token to its nodes meanwhile (as the client's `lease status --follow`)."""
    view = await job_view(dep.coordinator.api_url, dep.client, lease, tail=1)
    await seal_missing_secrets(dep.coordinator.api_url, dep.chain, dep.client, lease, {}, view)
    ray = view["ray"]
    if not ray or ray["head"] == head:
        return None
    try:
        alive = await asyncio.to_thread(alive_nodes, ray["dashboard"], ray_token(dep.client, lease))
    except OSError:
        return None
    return ray["head"] if len(alive) >= nodes else None


async def _free(dep: Deployment) -> bool:
    import httpx

    async with httpx.AsyncClient(timeout=5) as http:
        items = (await http.get(f"{dep.coordinator.api_url}/nodes", params={"limit": 500})).json()["items"]
    live = {str(n.key.pubkey()) for n in dep.nodes if n.worker.alive()}
    return all(n["gpus_leased"] == 0 for n in items if n["node_key"] in live)


async def measure(nodes: int, rounds: int, head_rounds: int) -> None:
    ready: list[float] = []
    whole: list[float] = []
    async with deployment() as dep:
        # a spare for each head lost, and enough others that the lost ones stay a minority (the coordinator
        # pauses slashing and moves when more than half the fleet is silent at once: a correlated outage)
        await dep.add_nodes(nodes + 2 * head_rounds, gpus=1)
        for r in range(rounds):
            lease, opened = await dep.open(nodes, 900, SPEC, gpus_per_node=1)
            await until(lambda lease=lease: _cluster(dep, lease, nodes), 180, "the Ray cluster", every=0.1)
            ready.append(time.monotonic() - opened)
            print(f"N={nodes} round {r + 1}: cluster ready after {ready[-1]:.2f} s", file=sys.stderr)
            await dep.close(lease)
            await until(lambda: _free(dep), 120, "the nodes free again")
        for r in range(head_rounds):
            lease, _ = await dep.open(nodes, 900, SPEC, gpus_per_node=1)
            head = await until(lambda lease=lease: _cluster(dep, lease, nodes), 180, "the Ray cluster", every=0.1)
            dep.node(head).worker.kill()
            killed = time.monotonic()
            await until(
                lambda lease=lease, head=head: _cluster(dep, lease, nodes, head), 300, "the re-formed cluster", 0.1
            )
            whole.append(time.monotonic() - killed)
            print(f"N={nodes} head lost {r + 1}: whole again after {whole[-1]:.2f} s", file=sys.stderr)
            await dep.close(lease)
            await until(lambda: _free(dep), 120, "the nodes free again")
    print(f"N={nodes}: lease opened -> Ray cluster ready with all {nodes} nodes: {trials_summary(ready)}")
    if whole:
        print(f"N={nodes}: head lost -> cluster whole again on a new head: {trials_summary(whole)}")
    print(f"N={nodes}: target p50 < 30 s -> {'met' if statistics.median(ready) < 30 else 'NOT met'}")


async def main(rounds: int, sizes: list[int], head_rounds: int) -> None:
    for nodes in sizes:
        await measure(nodes, rounds, head_rounds)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--sizes", default="2,4")
    parser.add_argument("--head-rounds", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(main(args.rounds, [int(n) for n in args.sizes.split(",")], args.head_rounds))
