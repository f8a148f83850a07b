"""Benchmark (not a test): node lost -> job running again on another node, with a checkpoint of
real size (256 MiB of random weights by default) restored from the coordinator's checkpoint store.

Real processes (bench/coordinator/harness: gpunet-localnet, `gpunet coordinator run` with embedded
PostgreSQL, `gpunet worker run --api` with one simulated GPU each): a 1-GPU lease runs the demo's
job with CHECKPOINT_MIB of weights; once the store holds its checkpoint, its worker is SIGKILLed.
The client follows the lease as `gpunet lease status --follow` does (here every 0.25 s), sealing
the lease's checkpoint key to the node the lease moves to; that node's job waits for the key,
restores the checkpoint (every chunk's id and GCM tag checked) and starts: "running" is timed.

Two spans, as bench/coordinator/failover.py: from the loss being detectable (the victim's last
heartbeat + lost_after_seconds) and from the kill. The restore's own time (from the new worker's
log) is split into decryption (AES-GCM open), hashing (chunk ids) and transfer (HTTP and the
store), and its share of the failover is shown.

    .venv/bin/python bench/checkpoint/failover.py [--mib 256] [--trials 2] [--lost-after 3] [--smoke]

--smoke: one trial with a 16 MiB checkpoint (two chunks), every figure printed in seconds (for the
test suite: tests/test_bench_checkpoint.py); one trial's figures are no distribution.

Target: under 15 s from detection with 256 MiB, the transfer being most of it.

Figures (2 shared CPU cores, 5 workers, 3 trials, lost_after 3 s):

    node loss detected -> job running again elsewhere: p50 3.5 s, max 3.8 s (target < 15 s: met)
    worker killed -> job running again elsewhere:      p50 5.9 s, max 6.7 s
    restore of the 256 MiB checkpoint: 2.5 s on average, 73% of the failover from detection;
    of it: decryption 19%, hashing 8%, transfer 31%, writing the files 41%
    (the rest of the failover: the slash and reassign_lease on chain, the dispatch, the client's
    re-seal of the key, which `lease status --follow` does every second and this bench every 0.25 s)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from functools import partial
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "coordinator"))

from harness import JOB, deployment, trials_summary, until

from gpunet.jobs import job_view, seal_missing_checkpoint_key
from gpunet.protocol import JobSpec


async def main(mib: int, trials: int, lost_after: float) -> None:
    spec = JobSpec(
        command=[sys.executable, JOB], env={"STEPS": "1000000", "STEP_SECONDS": "0.2", "CHECKPOINT_MIB": str(mib)}
    )
    from_detection: list[float] = []
    from_kill: list[float] = []
    restores: list[tuple[float, float, float, float]] = []
    async with deployment(lost_after_seconds=lost_after, reconnect_grace_seconds=2 * lost_after) as dep:
        # a killed node stays dead: fewer than half the fleet silent, or the coordinator sees a
        # correlated outage and moves nothing
        await dep.add_nodes(2 * trials + 1, gpus=1, store=True)
        api = dep.coordinator.api_url
        for t in range(trials):
            lease, _ = await dep.open(1, 600, spec, gpus_per_node=None)
            [first] = (await until(partial(_placed, dep, lease), 60, "placement"))["nodes"]
            await until(partial(seal_missing_checkpoint_key, api, dep.chain, dep.client, lease), 30, "the key sealed")
            await until(partial(_stored, api, dep, lease, mib << 20), 300, "the checkpoint in the store")
            dep.node(first).worker.kill()
            killed = time.time()

            async def follow(lease=lease, first=first) -> str | None:
                view = await job_view(api, dep.client, lease, tail=1)
                await seal_missing_checkpoint_key(api, dep.chain, dep.client, lease, view)
                running = [n["node_key"] for n in view["nodes"] if n["state"] == "running" and n["node_key"] != first]
                return running[0] if running else None

            moved = await until(follow, 120 + lost_after, "running on another node", every=0.25)
            running = time.time()
            detectable = await _last_heartbeat(dep, first) + lost_after
            from_kill.append(running - killed)
            from_detection.append(running - detectable)
            restore = _restore_of(dep.node(moved).worker.log, str(lease))
            restores.append(restore)
            total, opened, hashed, moved_s = restore
            print(
                f"trial {t + 1}: {from_detection[-1]:.2f} s from detection, {from_kill[-1]:.2f} s from the kill; "
                f"restore {total:.2f} s (decryption {opened:.2f}, hashing {hashed:.2f}, transfer {moved_s:.2f})",
                file=sys.stderr,
            )
            await dep.close(lease)
    print(f"{mib} MiB checkpoint (8 MiB chunks), lost_after_seconds = {lost_after:g}, heartbeats every 0.5 s")
    print(f"node loss detected -> job running again elsewhere: {trials_summary(from_detection)}")
    print(f"worker killed -> job running again elsewhere:      {trials_summary(from_kill)}")
    total = sum(r[0] for r in restores)
    failover = sum(from_detection)
    print(
        f"restore: {total / len(restores):.2f} s on average, {100 * total / failover:.0f}% of the failover from "
        f"detection; of the restore: decryption {100 * sum(r[1] for r in restores) / total:.0f}%, hashing "
        f"{100 * sum(r[2] for r in restores) / total:.0f}%, transfer {100 * sum(r[3] for r in restores) / total:.0f}%, "
        f"other (writing the files) {100 * (1 - sum(r[1] + r[2] + r[3] for r in restores) / total):.0f}%"
    )
    print("target (from detection, 256 MiB): < 15 s -> " + ("met" if max(from_detection) < 15 else "NOT met"))


async def _placed(dep, lease):
    p = await dep.placement(lease)
    return p if p and p["state"] == "placed" else None


async def _stored(api: str, dep, lease, size: int) -> bool:
    checkpoint = (await job_view(api, dep.client, lease, tail=1))["checkpoint"]
    return bool(checkpoint and checkpoint["bytes"] >= size)


async def _last_heartbeat(dep, node_key: str) -> float:
    """The coordinator's wall-clock time of the node's last heartbeat (same machine, same clock)."""
    async with httpx.AsyncClient(timeout=5) as http:
        items = (await http.get(f"{dep.coordinator.api_url}/workers")).json()["items"]
    return next(w["last_heartbeat"] for w in items if w["node_key"] == node_key)


def _restore_of(log: Path, lease: str) -> tuple[float, float, float, float]:
    """(total, decryption, hashing, transfer) seconds of the lease's restore, from the worker's log
    (JSON lines: a worker whose output is not a terminal logs JSON, gpunet.logs)."""
    for line in reversed(log.read_text(errors="replace").splitlines()):
        try:
            event = json.loads(line)
        except ValueError:
            continue  # a line of the job's output or a traceback
        if isinstance(event, dict) and event.get("event") == "checkpoint.restored" and event.get("lease") == lease:
            return (
                float(event["seconds"]),
                float(event["open_seconds"]),
                float(event["hash_seconds"]),
                float(event["transfer_seconds"]),
            )
    raise RuntimeError(f"no checkpoint.restored JSON line for lease {lease} in {log} (GPUNET_LOG_FORMAT=human?)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=256, help="MiB of weights in the checkpoint")
    parser.add_argument("--trials", type=int, default=2)
    parser.add_argument("--lost-after", type=float, default=3.0, help="the coordinator's lost_after_seconds")
    parser.add_argument("--smoke", action="store_true", help="one trial, 16 MiB: runs in seconds (CI)")
    args = parser.parse_args()
    if args.smoke:
        args.mib, args.trials = 16, 1
    if args.trials < 1 or args.lost_after <= 0 or args.mib < 1:
        parser.error("--trials and --mib must be >= 1 and --lost-after > 0")
    asyncio.run(main(args.mib, args.trials, args.lost_after))
