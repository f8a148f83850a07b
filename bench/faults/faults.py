"""Benchmark (not a test): the fault matrix, run against the processes a user runs, several times.

Each run: gpunet-localnet, `gpunet coordinator run` (embedded PostgreSQL), four workers with two
simulated GPUs each; a client's 4-GPU lease on two of them runs the demo's checkpointing job, then
one fault is applied mid-lease:

- coordinator-stall: the coordinator SIGSTOPped for 3 x lost_after, then SIGCONT
- correlated-pause: every worker SIGSTOPped for 2 x lost_after, then SIGCONT
- rpc-pause: gpunet-localnet SIGSTOPped for 15 s, then SIGCONT
- database-restart: the coordinator's embedded PostgreSQL crashed (`pg_ctl stop -m immediate`:
  every server process quits, nothing flushed) and started again 15 s later
- one-node-lost (the control): one leased worker SIGKILLed

and the lease runs to its end, is closed and finalized by the coordinator. Printed per scenario:
slashes of innocent nodes (target 0), delivered GPU-seconds unpaid (target 0: every node that held
its share to the end is paid its held time x GPUs, less the part-second of each usage period the
worker rounds down), leases where more nodes ran the job than it has shares at once (target 0,
from the coordinator's view of live worker processes, sampled every 0.5 s), and for the control,
its slashes (exactly one).

    .venv/bin/python bench/faults/faults.py [--runs 2] [--scenarios coordinator-stall,one-node-lost]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "coordinator"))

from harness import JOB, deployment, until

from coordinator.db.embedded import EmbeddedPostgres
from gpunet.accounts import fetch
from gpunet.history import transactions_of
from gpunet.pda import node_pda, provider_pda
from gpunet.protocol import JobSpec

LOST_AFTER = 3.0  # the harness's coordinator setting
LEASE_SECONDS = 45
SCENARIOS = ("coordinator-stall", "correlated-pause", "rpc-pause", "database-restart", "one-node-lost")


@dataclass
class Outcome:
    innocent_slashes: int = 0
    unpaid_gpu_seconds: int = 0
    ran_twice: int = 0
    control_slashes: int | None = None
    notes: list[str] = field(default_factory=list)


async def run(scenario: str) -> Outcome:
    outcome = Outcome()
    spec = JobSpec(command=[sys.executable, JOB], env={"STEPS": "100000", "STEP_SECONDS": "0.1"})
    async with deployment() as dep:
        await dep.add_nodes(4, gpus=2)
        lease, _ = await dep.open(4, LEASE_SECONDS, spec, gpus_per_node=2)
        placed = (await until(lambda: _placed(dep, lease), 60, "placement"))["nodes"]
        await until(lambda: _running_on(dep, lease, placed), 60, "the job running on both nodes")
        overlap = asyncio.create_task(_count_overlaps(dep, lease, 2, outcome))
        await asyncio.sleep(5)
        killed: set[str] = set()
        if scenario == "coordinator-stall":
            await _pause(dep.coordinator.proc.pid, 3 * LOST_AFTER)
        elif scenario == "correlated-pause":
            pids = [n.worker.proc.pid for n in dep.nodes]
            for pid in pids:
                os.kill(pid, signal.SIGSTOP)
            await asyncio.sleep(2 * LOST_AFTER)
            for pid in pids:
                os.kill(pid, signal.SIGCONT)
        elif scenario == "rpc-pause":
            assert dep.localnet is not None and dep.localnet.pid is not None
            await _pause(dep.localnet.pid, 15)
        elif scenario == "database-restart":
            postgres = EmbeddedPostgres(dep.workdir / "coordinator")
            socket_dir = postgres.crash()
            await asyncio.sleep(15)
            postgres.restart(socket_dir)
        elif scenario == "one-node-lost":
            dep.node(placed[0]).worker.kill()
            killed.add(placed[0])
        await until(lambda: _finalized(dep, lease), LEASE_SECONDS + 120, "the lease finalized")
        overlap.cancel()
        slashed = {
            str(n.key.pubkey()): (await fetch(dep.chain, provider_pda(n.wallet.pubkey()), "Provider")).slashed
            for n in dep.nodes
        }
        outcome.innocent_slashes = sum(1 for key, amount in slashed.items() if amount and key not in killed)
        if scenario == "one-node-lost":
            outcome.control_slashes = sum(1 for key, amount in slashed.items() if amount and key in killed)
        outcome.unpaid_gpu_seconds = await _unpaid(dep, lease, [k for k in placed if k not in killed])
    return outcome


async def _pause(pid: int, seconds: float) -> None:
    os.kill(pid, signal.SIGSTOP)
    await asyncio.sleep(seconds)
    os.kill(pid, signal.SIGCONT)


async def _placed(dep, lease):
    p = await dep.placement(lease)
    return p if p and p["state"] == "placed" else None


async def _running_on(dep, lease, nodes: list[str]) -> bool:
    states = await dep.states(lease)
    return all(states.get(n) == "running" for n in nodes)


async def _count_overlaps(dep, lease, shares: int, outcome: Outcome) -> None:
    seen_twice = False
    while True:
        try:
            # a SIGKILLed worker's last state stays "running" in the ledger: only live processes count
            running = [
                n for n, state in (await dep.states(lease)).items() if state == "running" and dep.node(n).worker.alive()
            ]
        except Exception:  # the coordinator may be paused: nothing to sample
            running = []
        if len(running) > shares and not seen_twice:
            seen_twice = True
            outcome.ran_twice += 1
        await asyncio.sleep(0.5)


async def _finalized(dep, lease) -> bool:
    return type((await fetch(dep.chain, lease, "Lease")).status).__name__ == "Closed"


async def _unpaid(dep, lease, stayed: list[str]) -> int:
    """GPU-seconds the nodes that held their share from assignment to the end were not paid."""
    account = await fetch(dep.chain, lease, "Lease")
    end = min(account.started_at + account.terms.duration_seconds, account.billable_until)
    settled: dict[str, int] = {}
    for tx in await transactions_of(dep.chain, lease):
        for e in tx.events:
            if e.name == "UsageSettled":
                settled[str(e.data.node)] = settled.get(str(e.data.node), 0) + e.data.gpu_seconds
    unpaid = 0
    for key in stayed:
        node = str(node_pda(dep.node(key).key.pubkey()))
        held = 2 * (end - account.started_at)
        periods = (end - account.started_at) // 3 + 1  # each may lose a part-second to rounding down
        unpaid += max(0, held - 2 * periods - settled.get(node, 0))
    return unpaid


async def main(runs: int, scenarios: list[str]) -> None:
    results: dict[str, list[Outcome]] = {s: [] for s in scenarios}
    for scenario in scenarios:
        for i in range(runs):
            started = time.monotonic()
            outcome = await run(scenario)
            results[scenario].append(outcome)
            print(
                f"{scenario} run {i + 1}: innocent slashes {outcome.innocent_slashes}, unpaid "
                f"{outcome.unpaid_gpu_seconds} GPU-s, ran twice {outcome.ran_twice}"
                + (f", control slashes {outcome.control_slashes}" if outcome.control_slashes is not None else "")
                + f" ({time.monotonic() - started:.0f} s)",
                file=sys.stderr,
            )
    print(
        f"{'scenario':<20} {'runs':>4} {'innocent slashes':>17} {'unpaid GPU-s':>13} {'ran twice':>10} "
        f"{'control slashes':>16}"
    )
    for scenario, outcomes in results.items():
        control = [o.control_slashes for o in outcomes if o.control_slashes is not None]
        print(
            f"{scenario:<20} {len(outcomes):>4} {sum(o.innocent_slashes for o in outcomes):>17} "
            f"{sum(o.unpaid_gpu_seconds for o in outcomes):>13} {sum(o.ran_twice for o in outcomes):>10} "
            f"{(','.join(map(str, control)) or '-'):>16}"
        )
    print("targets: 0 innocent slashes, 0 unpaid GPU-seconds, 0 jobs run twice; the control slashed exactly once")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    args = parser.parse_args()
    chosen = args.scenarios.split(",")
    unknown = [s for s in chosen if s not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario(s) {', '.join(unknown)}; choose from {', '.join(SCENARIOS)}")
    asyncio.run(main(args.runs, chosen))
