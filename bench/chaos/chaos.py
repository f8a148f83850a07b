"""Benchmark (not a test): many leases, workers killed at random, and every token accounted for.

`--leases` one-GPU leases run a finite checkpointing job (the demo's training run); 30% of the
workers holding a share are SIGKILLed at random moments while the jobs run. Printed: how many
checkpointing jobs completed, the time from each kill to the job running again elsewhere, and
the conservation check of every lease after the coordinator closed it (deposits == payouts +
fees + refunds, and each settlement == floor(GPU-seconds x price / 3600), to the base unit).
Target (issue 7): every checkpointing job completes, 0 base units mis-settled.

    .venv/bin/python bench/chaos/chaos.py [--leases 6] [--kill 0.3]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "coordinator"))

from harness import JOB, PRICE, deployment, trials_summary, until

from gpunet.accounts import fetch
from gpunet.history import transactions_of
from gpunet.protocol import JobSpec


async def main(leases: int, kill_fraction: float, seed: int) -> None:
    rng = random.Random(seed)
    spec = JobSpec(command=[sys.executable, JOB], env={"STEPS": "150", "STEP_SECONDS": "0.1"})  # ~15 s of work
    kills = max(1, round(leases * kill_fraction))
    async with deployment() as dep:
        await dep.add_nodes(leases + kills, gpus=1)
        opened = [(await dep.open(1, 45, spec, gpus_per_node=None))[0] for _ in range(leases)]
        placements = [
            (await until(lambda lease=lease: _placed(dep, lease), 60, "placement"))["nodes"][0] for lease in opened
        ]
        await until(lambda: _all_running(dep, opened), 60, "every job running")
        victims = rng.sample(range(leases), kills)
        recoveries: list[float] = []
        for i in victims:
            await asyncio.sleep(rng.uniform(0.5, 3))
            dep.node(placements[i]).worker.kill()
            killed = time.monotonic()
            await until(lambda i=i: _running_elsewhere(dep, opened[i], placements[i]), 60, "recovery")
            recoveries.append(time.monotonic() - killed)
            print(f"killed the worker of lease {i}: running again after {recoveries[-1]:.2f} s", file=sys.stderr)
        completed = 0
        for lease in opened:
            try:
                await until(lambda lease=lease: _succeeded(dep, lease), 90, "job completion")
                completed += 1
            except TimeoutError:
                pass
        await until(lambda: _all_closed(dep, opened), 180, "every lease closed by the coordinator")
        misses, mis_settled = 0, 0
        for lease in opened:
            account = await fetch(dep.chain, lease, "Lease")
            misses += account.deposited != account.paid + account.fees + account.refunded
            for tx in await transactions_of(dep.chain, lease):
                for e in tx.events:
                    if e.name == "UsageSettled":
                        mis_settled += abs(e.data.payout + e.data.fee - e.data.gpu_seconds * PRICE // 3600)
    print(f"{leases} leases, {kills} workers killed ({kill_fraction:.0%} of the shares)")
    print(f"checkpointing jobs completed: {completed}/{leases}")
    print(f"time to recover (kill -> running elsewhere): {trials_summary(recoveries)}")
    print(f"conservation: {leases - misses}/{leases} leases balance; base units mis-settled: {mis_settled}")
    print(
        "target: every job completes, 0 mis-settled -> "
        + ("met" if completed == leases and not misses and not mis_settled else "NOT met")
    )


async def _placed(dep, lease):
    p = await dep.placement(lease)
    return p if p and p["state"] == "placed" else None


async def _all_running(dep, leases) -> bool:
    for lease in leases:
        if "running" not in (await dep.states(lease)).values():
            return False
    return True


async def _running_elsewhere(dep, lease, first: str) -> bool:
    return any(state in ("running", "succeeded") and node != first for node, state in (await dep.states(lease)).items())


async def _succeeded(dep, lease) -> bool:
    return "succeeded" in (await dep.states(lease)).values()


async def _all_closed(dep, leases) -> bool:
    for lease in leases:
        if type((await fetch(dep.chain, lease, "Lease")).status).__name__ != "Closed":
            return False
    return True


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--leases", type=int, default=6)
    parser.add_argument("--kill", type=float, default=0.3)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    asyncio.run(main(args.leases, args.kill, args.seed))
