"""Benchmark (not a test): scheduler placement decisions per second and decision latency.

Builds a synthetic fleet (the catalog's GPU models in realistic proportions, 9 regions,
prices around each model's going rate, latency and reliability history, a few nodes
offline, unhealthy, jailed or slashed), fills it to a steady utilisation, then replays
a stream of lease requests: mostly one-node leases of a given model and/or region, some
"any GPU with >= N GB", some multi-node clusters (equal 8-GPU shares or a free split).
Every placement is reserved; the oldest leases are released to hold utilisation steady.

Prints, per fleet size: decisions/s (1 / mean place() time), p50/p99/max place() time,
the share of requests placed, and the whole cycle (place + reserve + release) per second,
against the targets (>= 20,000 placements/s and p99 < 2 ms at 10,000 nodes, one core).

    .venv/bin/python bench/scheduler/placements.py                  # 1,000 / 10,000 / 100,000 nodes
    .venv/bin/python bench/scheduler/placements.py --nodes 10000 --requests 50000
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import sys
import time
from collections import deque
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from coordinator.scheduler import (
    LeaseRequest,
    NodeView,
    NotPlaced,
    Placement,
    Scheduler,
)
from gpunet.amounts import IO
from gpunet.catalog import GPU_MODELS, REGIONS
from gpunet.instructions import ANY, LeaseTerms

TARGET_RATE = 20_000
TARGET_P99_MS = 2.0
TARGET_NODES = 10_000
UTILISATION = 0.6  # of all GPUs, held by live leases

# model name -> (share of the fleet, going rate in IO per GPU-hour, GPUs per machine choices)
FLEET_MIX = {
    "H100": (0.18, 2.0, (8, 8, 8, 4)),
    "H200": (0.05, 3.0, (8,)),
    "B200": (0.03, 4.5, (8,)),
    "A100": (0.14, 1.2, (8, 8, 4, 2)),
    "L40S": (0.08, 0.9, (4, 8)),
    "A10G": (0.05, 0.6, (1, 4)),
    "L4": (0.04, 0.4, (1, 2, 4)),
    "T4": (0.05, 0.2, (1, 2, 4)),
    "RTX4090": (0.20, 0.35, (1, 1, 2, 4, 8)),
    "RTX3090": (0.10, 0.2, (1, 2, 4)),
    "RTX5090": (0.08, 0.5, (1, 2, 4)),
}
MODELS = {m.name: m for m in GPU_MODELS}


def build_fleet(size: int, rng: random.Random) -> list[NodeView]:
    names = list(FLEET_MIX)
    weights = [FLEET_MIX[n][0] for n in names]
    fleet = []
    for i in range(size):
        name = rng.choices(names, weights)[0]
        _, rate, counts = FLEET_MIX[name]
        model = MODELS[name]
        vram = 40 if name == "A100" and rng.random() < 0.3 else model.vram_gb
        bonded = 10 * IO
        fleet.append(
            NodeView(
                node=f"node-{i:06d}",
                node_key=f"key-{i:06d}",
                provider_authority=f"wallet-{i // 4:06d}",
                gpu_model=model.code,
                gpu_count=rng.choice(counts),
                vram_gb=vram,
                region=rng.choice(list(REGIONS)),
                price_per_gpu_hour=int(rate * rng.uniform(0.7, 1.3) * IO),
                bonded_stake=bonded,
                provider_bonded=bonded,
                provider_staked=bonded if rng.random() > 0.01 else bonded // 2,  # 1 % slashed below their bond
                jailed=rng.random() < 0.01,
                online=rng.random() > 0.05,
                healthy=rng.random() > 0.01,
                latency_ms=rng.uniform(2, 250) if rng.random() > 0.1 else None,
                completed_shares=rng.randrange(0, 200),
                failed_shares=rng.randrange(0, 10),
            )
        )
    return fleet


def request_stream(count: int, rng: random.Random, prefix: str = "lease") -> list[LeaseRequest]:
    names = list(FLEET_MIX)
    weights = [FLEET_MIX[n][0] for n in names]
    out = []
    for i in range(count):
        name = rng.choices(names, weights)[0]
        _, rate, counts = FLEET_MIX[name]
        region = rng.choice(list(REGIONS)) if rng.random() < 0.5 else ANY
        max_price = int(rate * rng.uniform(1.0, 1.5) * IO)
        roll = rng.random()
        per_node, max_nodes = None, 8
        if roll < 0.70:  # one node of a model
            model, vram, gpus = MODELS[name].code, 0, rng.choice([g for g in (1, 2, 4, 8) if g <= max(counts)])
        elif roll < 0.85:  # any GPU with enough memory, anywhere
            model, vram, gpus, region = ANY, rng.choice([16, 24, 48, 80]), rng.choice([1, 2, 4]), ANY
            max_price = int(rng.uniform(1.0, 3.0) * IO)
        elif roll < 0.95:  # a cluster of whole 8-GPU machines
            model, vram, per_node = MODELS[rng.choice(["H100", "A100", "H200"])].code, 0, 8
            gpus = 8 * rng.choice([2, 4, 8])
            max_price = int(3.5 * IO)
        else:  # a large lease, split however it fits
            model, vram, gpus = MODELS[rng.choice(["RTX4090", "A100", "L40S"])].code, 0, rng.choice([12, 24, 40])
            max_price = int(2.0 * IO)
        terms = LeaseTerms(model, vram, gpus, region, max_price, 3_600)
        out.append(LeaseRequest(f"{prefix}-{i:07d}", terms, max_nodes=max_nodes, gpus_per_node=per_node))
    return out


def run(size: int, requests: int, seed: int) -> dict[str, float]:
    rng = random.Random(seed)
    scheduler = Scheduler()
    t0 = time.perf_counter()
    for view in build_fleet(size, rng):
        scheduler.upsert_node(view)
    build_s = time.perf_counter() - t0
    total_gpus = sum(v.gpu_count for v in scheduler.nodes.values())
    live: deque[str] = deque()
    held = 0

    def admit(placement: Placement) -> None:
        nonlocal held
        scheduler.reserve(placement)
        live.append(placement.lease)
        held += placement.request.gpu_count
        while held > UTILISATION * total_gpus:
            held -= scheduler.release(live.popleft()).request.gpu_count

    warm_rng = random.Random(seed + 1)
    for batch in range(1_000):  # reach steady utilisation before measuring
        if held >= 0.95 * UTILISATION * total_gpus:
            break
        for req in request_stream(2_000, warm_rng, f"warm{batch}"):
            decision = scheduler.place(req)
            if isinstance(decision, Placement):
                admit(decision)
    stream = request_stream(requests, random.Random(seed + 2))
    gc.collect()
    gc.freeze()  # the long-lived fleet is not re-scanned by every collection (the coordinator does the same)
    times: list[int] = []
    cpu_times: list[int] = []  # this thread's CPU time: the same decisions without the preemption of a shared machine
    explain_times: list[int] = []
    waiting: list[NotPlaced] = []
    placed = 0
    clock, cpu_clock = time.perf_counter_ns, time.thread_time_ns
    cycle_start = clock()
    for req in stream:
        cpu_start, start = cpu_clock(), clock()
        decision = scheduler.place(req)
        times.append(clock() - start)
        cpu_times.append(cpu_clock() - cpu_start)
        if isinstance(decision, Placement):
            placed += 1
            admit(decision)
        else:
            waiting.append(decision)
    cycle_s = (clock() - cycle_start) / 1e9
    for decision in waiting[:200]:  # the reason is worked out when read, as the API reads it for a waiting lease
        start = clock()
        assert decision.reason
        explain_times.append(clock() - start)
    # The placement loop's next step over the same waiting leases, the fleet unchanged since its last
    # (the first pass after the stream's changes works each reason out again; the second is timed).
    still = [w.request for w in waiting[:200] if isinstance(d := scheduler.place(w.request), NotPlaced) and d.reason]
    retry_times: list[int] = []
    for req in still:
        start = clock()
        again = scheduler.place(req)
        assert isinstance(again, NotPlaced) and again.reason
        retry_times.append(clock() - start)
    gc.unfreeze()
    scheduler.check_consistency()
    times.sort()
    cpu_times.sort()
    explain_times.sort()
    retry_times.sort()
    mean_s = sum(times) / len(times) / 1e9
    return {
        "nodes": size,
        "build_s": build_s,
        "rate": 1 / mean_s,
        "cpu_rate": len(cpu_times) * 1e9 / sum(cpu_times),
        "p50_ms": times[len(times) // 2] / 1e6,
        "p99_ms": times[int(len(times) * 0.99)] / 1e6,
        "max_ms": times[-1] / 1e6,
        "cpu_p99_ms": cpu_times[int(len(times) * 0.99)] / 1e6,
        "cpu_max_ms": cpu_times[-1] / 1e6,
        "placed": placed / len(stream),
        "cycle_rate": len(stream) / cycle_s,
        "utilisation": held / total_gpus,
        "explain_p99_ms": explain_times[int(len(explain_times) * 0.99)] / 1e6 if explain_times else 0.0,
        "retry_p99_ms": retry_times[int(len(retry_times) * 0.99)] / 1e6 if retry_times else 0.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--requests", type=int, default=20_000, help="measured requests per fleet size")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core, as the target says
    print(
        f"scheduler placements, {args.requests:,} requests per fleet, one core "
        f"(target at {TARGET_NODES:,} nodes: >= {TARGET_RATE:,}/s, p99 < {TARGET_P99_MS} ms)"
    )
    header = (
        f"{'nodes':>8} {'decisions/s':>12} {'cpu /s':>8} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'cpu p99':>8} "
        f"{'cpu max':>8} {'placed':>7} {'cycles/s':>9} {'util':>5} {'why p99':>8} {'again p99':>9}  target"
    )
    print(header)
    print("-" * len(header))
    for size in args.nodes:
        r = run(size, args.requests, args.seed)
        verdict = ""
        if size == TARGET_NODES:
            ok = r["rate"] >= TARGET_RATE and r["p99_ms"] < TARGET_P99_MS
            verdict = "met" if ok else "MISSED"
        print(
            f"{size:>8,} {r['rate']:>12,.0f} {r['cpu_rate']:>8,.0f} {r['p50_ms']:>8.3f} {r['p99_ms']:>8.3f} "
            f"{r['max_ms']:>8.2f} "
            f"{r['cpu_p99_ms']:>8.3f} {r['cpu_max_ms']:>8.2f} {r['placed']:>7.1%} {r['cycle_rate']:>9,.0f} "
            f"{r['utilisation']:>5.0%} {r['explain_p99_ms']:>8.2f} {r['retry_p99_ms']:>9.4f}  {verdict}"
        )
    print(
        "decisions/s = 1 / mean place() time (wall clock); cpu /s, cpu p99/max = the same place() calls in\n"
        "this thread's CPU time (no preemption by other processes); cycles/s = place + reserve + releases, "
        "end to end;\n"
        "why p99 = ms to work out a NotPlaced reason (done when the reason is read, not in place());\n"
        "again p99 = ms to retry a waiting lease and read its reason with the fleet unchanged since the\n"
        "last retry, as the placement loop does every step (target < 1 ms at 100,000 nodes)."
    )


if __name__ == "__main__":
    main()
