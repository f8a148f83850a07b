"""Benchmark (not a test): lease opened on chain -> job running on every node of an 8-node cluster.

Eight `gpunet worker run` processes with one simulated GPU each, the coordinator and
gpunet-localnet on this machine. Each round opens an 8-GPU lease (one GPU per node), attaches
its job, and times open_lease confirmed -> every node reports "running". Then the client closes
the lease and
  free nodes (default): the next round waits until the nodes are free again;
  --back-to-back:        the next round opens its lease at once, onto the nodes the closed lease
                         still holds while its teardown (stop, last settlement, finalize) goes on.
Target: p50 < 1 s, p99 < 3 s (and p50 < 0.5 s for both kinds of round). By default the node makes
100 ms blocks confirmed at once; --slot-ms 400 --confirm-slots 2 is a real cluster's pace, where
the open and the assign each wait for their confirmation.

    .venv/bin/python bench/coordinator/time_to_running.py [--rounds 20] [--back-to-back]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import JOB, deployment, trials_summary, until

from gpunet.protocol import JobSpec


async def main(rounds: int, nodes: int, back_to_back: bool, slot_ms: int, confirm_slots: int) -> None:
    spec = JobSpec(command=[sys.executable, JOB], env={"STEPS": "1000000", "STEP_SECONDS": "0.5"})
    times: list[float] = []
    async with deployment(slot_ms=slot_ms, confirm_slots=confirm_slots) as dep:
        await dep.add_nodes(nodes, gpus=1)
        for r in range(rounds):
            lease, opened = await dep.open(nodes, 600, spec, gpus_per_node=1)

            async def all_running(lease: str = lease) -> bool:
                states = await dep.states(lease)
                return len(states) == nodes and all(s == "running" for s in states.values())

            await until(all_running, 60, "every node running", every=0.02)
            times.append(time.monotonic() - opened)
            print(f"round {r + 1}: {times[-1]:.3f} s", file=sys.stderr)
            await dep.close(lease)
            if not back_to_back:
                await until(lambda: _free(dep, nodes), 60, "the nodes free again")
    kind = "back to back, onto the closed lease's nodes" if back_to_back else "onto free nodes"
    chain = f"{slot_ms} ms slots, confirmed after {confirm_slots}"
    print(f"lease opened -> job running on all {nodes} nodes ({kind}; {chain}): {trials_summary(times)}")
    p50 = sorted(times)[len(times) // 2]
    print(
        "target: p50 < 1 s, p99 < 3 s -> "
        + ("met" if p50 < 1 and max(times) < 3 else "NOT met")
        + f"; p50 < 0.5 s -> {'met' if p50 < 0.5 else 'NOT met'}"
    )


async def _free(dep, nodes: int) -> bool:
    import httpx

    async with httpx.AsyncClient(timeout=5) as http:
        items = (await http.get(f"{dep.coordinator.api_url}/nodes", params={"limit": 500})).json()["items"]
    return sum(1 for n in items if n["gpus_leased"] == 0) >= nodes


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--back-to-back", action="store_true", help="open each lease onto the last one's nodes")
    parser.add_argument("--slot-ms", type=int, default=100)
    parser.add_argument("--confirm-slots", type=int, default=0)
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.nodes, args.back_to_back, args.slot_ms, args.confirm_slots))
