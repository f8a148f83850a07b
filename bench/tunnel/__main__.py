"""Benchmark (not a test): the data plane (issue 31) on the real processes, a client reaching its
lease's job through the coordinator's relay, against the same bytes sent to the job's port directly.

The deployment (bench/tunnel/world.py): gpunet-localnet, `gpunet coordinator run` (the relay in its
process, on its gateway's WebSocket server, every check it makes real: the signed tunnel, the lease's
client, a node holding its share now, from its embedded PostgreSQL as indexed from the chain), one
`gpunet worker run` (its data plane: a link to the relay, a direct listener) and a one-GPU lease whose
job serves bench/tunnel/target.py. The client is this process, through gpunet.reach.open_access (TLS
1.3 end to end, the node's key pinned from the chain, the wallet's signed access request): the relay
carries only ciphertext. Four figures:

1. Throughput of one stream through the relay, each way, against a plain asyncio TCP connection to
   the job's port on loopback (the same pump at both ends: 64 KiB writes and drains, 64 KiB reads);
   blocking sockets on loopback (the machine's ceiling) and the node's own listener (TLS, no relay)
   beside them. Target: >= 50 % of the direct asyncio TCP connection's.
2. Added latency of a 1 KiB request and its 1 KiB response over an open forward: p50 and p99 through
   the relay minus the same over direct TCP. Target: p99 added < 5 ms.
3. Streams opened through the relay to the node at once (default 1,000), each a forward that makes one
   small exchange and stays open until all have: time to open all, errors, the relay's memory.
4. The relay's CPU seconds per GiB it moves (its process's, less its idle rate).

Prints figures against the targets; asserts none.

    .venv/bin/python -m bench.tunnel           # 256 MiB x 3 each way per path, 2,000 round trips, 1,000 streams
    .venv/bin/python -m bench.tunnel --smoke   # tiny sizes: checks the benchmark runs (~20 s)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench.coordinator.harness import percentile
from bench.tunnel.paths import (
    Conn,
    TcpConn,
    download,
    echo_start,
    forward,
    raw_loopback,
    relay_forward,
    round_trips,
    upload,
)
from bench.tunnel.world import World, world
from gpunet.reach import ReachError
from gpunet.tunnel import WINDOW

MiB, GiB = 1 << 20, 1 << 30
THROUGHPUT_TARGET = 0.5  # of direct loopback TCP's, one stream
ADDED_P99_TARGET_MS = 5.0
REQUEST = 1024  # bytes of a request, and of its response
PATHS = {
    "tcp": "direct asyncio TCP to the job's port",
    "relay": "through the relay (TLS end to end)",
    "node": "the node's own listener (TLS, no relay)",
}

LEFT_OUT = f"""\
left out:
- the network: everything on one machine over loopback (no latency, no bandwidth limit, no loss);
  client, relay (the coordinator's process), worker, job, PostgreSQL and the chain share its 2 cores,
  so a byte through the relay costs four processes' CPU where the direct connection costs two, and a
  round trip between them is mostly each waiting for a core. Over a real network a stream's rate is
  also bounded by its credit window over the round trip: {WINDOW // 1024} KiB / RTT (about
  {WINDOW / MiB / 0.02:.1f} MiB/s at 20 ms, {WINDOW / MiB / 0.05:.1f} at 50 ms), which loopback hides;
- other work on the machine: other engineers' tests ran meanwhile (see "machine" above), so figures
  vary from run to run;
- the client is Python (gpunet.reach and the same pump as `gpunet lease forward`); the streams' client
  looks the relay's URL and the node's key up once (open_access does both per forward: a signed API
  call, a chain read) and does open_access's relay steps for each: one process opens them all;
- nothing stands in for anything (the coordinator's lease checks run against its own database), but
  there is one node, one relay replica, one lease, no other traffic; no TLS session resumption."""


def cpu_seconds(pid: int) -> float:
    """User and system CPU of a process so far (all its threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def machine_busy() -> tuple[float, float]:
    """CPU seconds the whole machine has been busy and in all (every core), from /proc/stat."""
    ticks = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = ticks[3] + ticks[4]  # idle, iowait
    hz = os.sysconf("SC_CLK_TCK")
    return (sum(ticks) - idle) / hz, sum(ticks) / hz


class Phase:
    """How busy the machine and the benchmark's own processes were over a phase."""

    def __init__(self, name: str, w: World | None = None) -> None:
        self.name, self.w = name, w
        self.busy0, self.all0 = machine_busy()
        self.ours0 = self._ours()

    def _ours(self) -> float:
        pids = [] if self.w is None else [self.w.coordinator_pid, self.w.worker_pid]
        return time.process_time() + sum(cpu_seconds(p) for p in pids)

    def end(self) -> str:
        busy, total = machine_busy()
        cores = os.cpu_count() or 1
        share = (busy - self.busy0) / max(1e-9, total - self.all0)
        ours = self._ours() - self.ours0
        wall = (total - self.all0) / cores
        mine = f", client + relay + worker {ours / max(1e-9, wall) * 100:.0f} % of a core" if self.w else ""
        return f"{self.name} {share * 100:.0f} % busy{mine}, load {os.getloadavg()[0]:.1f}"


@dataclass
class Transfer:
    seconds: list[float] = field(default_factory=list)
    relay_cpu: float = 0.0
    worker_cpu: float = 0.0
    client_cpu: float = 0.0
    moved: int = 0


@dataclass
class Streams:
    wanted: int
    opened: list[float] = field(default_factory=list)  # seconds from the start to each stream admitted
    exchanged: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    rss_before: float = 0.0
    rss_peak: float = 0.0
    rss_open: float = 0.0
    worker_rss_before: float = 0.0
    worker_rss_peak: float = 0.0
    relay_cpu: float = 0.0
    worker_cpu: float = 0.0
    client_cpu: float = 0.0


@dataclass
class Results:
    size: int
    idle_cpu_rate: float = 0.0  # the relay's process's CPU seconds per second with nothing relayed
    transfers: dict[tuple[str, str], Transfer] = field(default_factory=dict)
    raw: list[float] = field(default_factory=list)
    latency: dict[str, list[float]] = field(default_factory=dict)
    streams: Streams = field(default_factory=lambda: Streams(0))
    phases: list[str] = field(default_factory=list)
    setup_s: float = 0.0


async def open_paths(w: World) -> dict[str, Conn]:
    async def relayed() -> Conn | None:
        try:
            return await forward(w.api, w.dep.chain, w.client, w.lease, w.port, direct=False)
        except ReachError as e:
            if "no data-plane link" in str(e):
                return None  # the worker's link is still coming up
            raise

    relay = await _until(relayed, 30, "a forward through the relay")
    node = await forward(w.api, w.dep.chain, w.client, w.lease, w.port, direct=True)
    return {"tcp": await TcpConn.open(w.port), "relay": relay, "node": node}


async def _until(check: Callable[[], Awaitable[Conn | None]], timeout: float, what: str) -> Conn:
    deadline = time.monotonic() + timeout
    while (value := await check()) is None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        await asyncio.sleep(0.2)
    return value


async def throughput(w: World, conns: dict[str, Conn], results: Results, rounds: int) -> None:
    """Each round: every path each way, then blocking sockets (the paths take turns: load falls on all)."""
    n = results.size
    for r in range(rounds):
        for name, conn in conns.items():
            for direction, move in (("upload", upload), ("download", download)):
                t = results.transfers.setdefault((name, direction), Transfer())
                relay0, worker0, client0 = (
                    cpu_seconds(w.coordinator_pid),
                    cpu_seconds(w.worker_pid),
                    time.process_time(),
                )
                seconds = await move(conn, n)
                t.relay_cpu += cpu_seconds(w.coordinator_pid) - relay0
                t.worker_cpu += cpu_seconds(w.worker_pid) - worker0
                t.client_cpu += time.process_time() - client0
                t.seconds.append(seconds)
                t.moved += n
                print(f"round {r + 1}: {name} {direction} {n / MiB / seconds:,.1f} MiB/s", file=sys.stderr)
        results.raw.append(await asyncio.to_thread(raw_loopback, n))


async def latency(conns: dict[str, Conn], count: int, blocks: int = 4) -> dict[str, list[float]]:
    """Round trips of a 1 KiB request and its 1 KiB response, the paths taking turns in blocks."""
    message = os.urandom(REQUEST)
    readers = {name: await echo_start(conn, REQUEST) for name, conn in conns.items()}
    for name, conn in conns.items():
        await round_trips(conn, readers[name], message, 20)  # warm-up, not counted
    out: dict[str, list[float]] = {name: [] for name in conns}
    for _ in range(blocks):
        for name, conn in conns.items():
            out[name] += await round_trips(conn, readers[name], message, max(1, count // blocks))
    return out


async def many_streams(w: World, count: int) -> Streams:
    """`count` forwards opened through the relay at once, each one small exchange; all held open
    until the last has made its exchange, then closed."""
    out = Streams(count)
    out.rss_before = out.rss_peak = rss_mib(w.coordinator_pid)
    out.worker_rss_before = out.worker_rss_peak = rss_mib(w.worker_pid)
    sampling = True

    async def sample() -> None:
        while sampling:
            out.rss_peak = max(out.rss_peak, rss_mib(w.coordinator_pid))
            out.worker_rss_peak = max(out.worker_rss_peak, rss_mib(w.worker_pid))
            await asyncio.sleep(0.05)

    sampler = asyncio.create_task(sample())
    relay0, worker0, client0 = cpu_seconds(w.coordinator_pid), cpu_seconds(w.worker_pid), time.process_time()
    message = os.urandom(64)
    all_in, finished = asyncio.Event(), 0
    start = time.perf_counter()

    async def one() -> Conn | None:
        nonlocal finished
        channel = None
        try:
            channel = await relay_forward(w.relay, w.client, w.lease, w.node_key, w.port)
            out.opened.append(time.perf_counter() - start)
            await round_trips(channel, await echo_start(channel, len(message)), message, 1)
            out.exchanged += 1
        except Exception as e:
            out.errors[f"{type(e).__name__}: {str(e)[:100]}"] += 1
            if channel is not None:
                await channel.close()
            channel = None
        finished += 1
        if finished == count:
            all_in.set()
        await all_in.wait()
        return channel

    channels = await asyncio.gather(*(one() for _ in range(count)))
    await asyncio.sleep(0.3)
    out.rss_open = rss_mib(w.coordinator_pid)
    await asyncio.gather(*(c.close() for c in channels if c is not None), return_exceptions=True)
    out.relay_cpu = cpu_seconds(w.coordinator_pid) - relay0
    out.worker_cpu = cpu_seconds(w.worker_pid) - worker0
    out.client_cpu = time.process_time() - client0
    sampling = False
    await sampler
    return out


async def run(args: argparse.Namespace) -> Results:
    results = Results(args.size)
    before = Phase("before the start")
    await asyncio.sleep(2)
    results.phases.append(before.end())
    t0 = time.perf_counter()
    async with world(args.profile) as w:
        results.setup_s = time.perf_counter() - t0
        conns = await open_paths(w)
        idle0 = cpu_seconds(w.coordinator_pid)
        await asyncio.sleep(args.idle)
        results.idle_cpu_rate = (cpu_seconds(w.coordinator_pid) - idle0) / args.idle

        phase = Phase("throughput", w)
        await throughput(w, conns, results, args.rounds)
        results.phases.append(phase.end())
        phase = Phase("latency", w)
        results.latency = await latency(conns, args.round_trips)
        results.phases.append(phase.end())
        for conn in conns.values():
            await conn.close()
        phase = Phase("streams", w)
        results.streams = await many_streams(w, args.streams)
        results.phases.append(phase.end())
    return results


# --- the table


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.2f} ms"


def rows(results: Results) -> list[tuple[str, str, str, str]]:
    out: list[tuple[str, str, str, str]] = []
    n = results.size

    def rates(name: str, direction: str) -> list[float]:
        return [n / MiB / s for s in results.transfers[(name, direction)].seconds]

    def spread(values: list[float]) -> str:
        return f"median {statistics.median(values):,.1f} MiB/s (min {min(values):,.1f}, max {max(values):,.1f})"

    raw = [n / MiB / s for s in results.raw]
    out.append(("throughput, blocking sockets on loopback (1 MiB sendall)", spread(raw), "", "reference"))
    for direction in ("upload", "download"):
        for name, what in PATHS.items():
            out.append((f"throughput {direction}, {what}", spread(rates(name, direction)), "", ""))
        relay, tcp = statistics.median(rates("relay", direction)), statistics.median(rates("tcp", direction))
        out.append(
            (
                f"  relay / direct asyncio TCP, {direction} (one stream)",
                f"{relay / tcp:.0%} (of blocking sockets: {relay / statistics.median(raw):.0%})",
                f">= {THROUGHPUT_TARGET:.0%}",
                "met" if relay / tcp >= THROUGHPUT_TARGET else "NOT met",
            )
        )

    for name, values in results.latency.items():
        out.append(
            (
                f"1 KiB request + 1 KiB response, {PATHS[name]}",
                f"p50 {ms(statistics.median(values))}, p99 {ms(percentile(values, 99))} (n={len(values):,})",
                "",
                "",
            )
        )
    tcp_rtt, relay_rtt = results.latency["tcp"], results.latency["relay"]
    added50 = statistics.median(relay_rtt) - statistics.median(tcp_rtt)
    added99 = percentile(relay_rtt, 99) - percentile(tcp_rtt, 99)
    out.append(
        (
            "  added through the relay (relay - direct TCP)",
            f"p50 {ms(added50)}, p99 {ms(added99)}",
            f"p99 < {ADDED_P99_TARGET_MS:g} ms",
            "met" if added99 * 1000 < ADDED_P99_TARGET_MS else "NOT met",
        )
    )

    s = results.streams
    opened = sorted(s.opened)
    opens = (
        f"{len(opened):,} open in {opened[-1]:,.2f} s (each: p50 {opened[len(opened) // 2]:,.2f} s from the start)"
        if opened
        else "none opened"
    )
    out.append(
        (
            f"{s.wanted:,} streams opened at once through the relay to one node",
            f"{opens}; {s.exchanged:,} exchanged; {sum(s.errors.values()):,} errors",
            "0 errors",
            "met" if not s.errors and s.exchanged == s.wanted else "NOT met",
        )
    )
    for error, k in s.errors.most_common(5):
        out.append((f"  error x{k:,}", error, "", ""))
    per_stream = (s.rss_peak - s.rss_before) * 1024 / max(1, s.wanted)
    out.append(
        (
            "  relay's process memory (RSS)",
            f"{s.rss_before:,.0f} MiB before, {s.rss_peak:,.0f} MiB at the peak (+{per_stream:,.0f} KiB a stream),"
            f" {s.rss_open:,.0f} MiB with all open",
            "",
            "",
        )
    )
    out.append(
        (
            "  worker's process memory (RSS)",
            f"{s.worker_rss_before:,.0f} MiB before, {s.worker_rss_peak:,.0f} MiB peak",
            "",
            "",
        )
    )
    out.append(
        (
            "  CPU to open, exchange and close them",
            f"relay {s.relay_cpu:,.2f} s, worker {s.worker_cpu:,.2f} s, client {s.client_cpu:,.2f} s"
            f" ({s.relay_cpu / max(1, s.wanted) * 1000:,.1f} / {s.worker_cpu / max(1, s.wanted) * 1000:,.1f} /"
            f" {s.client_cpu / max(1, s.wanted) * 1000:,.1f} ms a stream)",
            "",
            "",
        )
    )

    relayed = [results.transfers[("relay", d)] for d in ("upload", "download")]
    moved = sum(t.moved for t in relayed) / GiB
    busy = sum(sum(t.seconds) for t in relayed)
    relay_cpu = sum(t.relay_cpu for t in relayed)
    net = relay_cpu - results.idle_cpu_rate * busy
    out.append(
        (
            "relay CPU per GiB moved (its process, less its idle rate)",
            f"{net / moved:,.2f} s/GiB ({relay_cpu:,.2f} s over {moved:,.2f} GiB in {busy:,.1f} s;"
            f" idle {results.idle_cpu_rate * 100:.1f} % of a core)",
            "none",
            "-",
        )
    )
    for direction, t in zip(("upload", "download"), relayed, strict=True):
        gib = t.moved / GiB
        relay_net = t.relay_cpu - results.idle_cpu_rate * sum(t.seconds)
        out.append(
            (
                f"  {direction}: relay / worker / client CPU per GiB",
                f"{relay_net / gib:,.2f} / {t.worker_cpu / gib:,.2f} / {t.client_cpu / gib:,.2f} s/GiB",
                "",
                "",
            )
        )
    return out


def report(results: Results) -> None:
    table = rows(results)
    width = max(len(r[0]) for r in table)
    measured = max(len(r[1]) for r in table)
    print(f"\n{'figure':<{width}}  {'measured':<{measured}}  {'target':<14}  verdict")
    for figure, value, target, verdict in table:
        print(f"{figure:<{width}}  {value:<{measured}}  {target:<14}  {verdict}")
    print(
        "\nthe throughput ratio is against direct asyncio TCP: the same Python pump at both ends, so it shows"
        "\nwhat the relay's path adds (TLS, WebSockets, two more hops), not what Python costs against C;"
        "\nblocking sockets show the machine's own ceiling."
    )
    print(
        f"\nmachine: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}; set-up {results.setup_s:,.1f} s;"
        f" the machine's CPU busy: {'; '.join(results.phases)}"
    )
    print(LEFT_OUT)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="4 MiB transfers once, 40 round trips, 20 streams")
    parser.add_argument("--size-mib", type=int, help="bytes of each transfer, in MiB (default 256; smoke 4)")
    parser.add_argument("--rounds", type=int, help="transfers each way per path (default 3; smoke 1)")
    parser.add_argument("--round-trips", type=int, help="1 KiB round trips per path (default 2,000; smoke 40)")
    parser.add_argument("--streams", type=int, help="streams opened at once (default 1,000; smoke 20)")
    parser.add_argument("--idle", type=float, help="seconds the relay's idle CPU is measured (default 5; smoke 1)")
    parser.add_argument(
        "--profile",
        type=Path,
        help="run the coordinator and the worker under cProfile, their stats into this directory",
    )
    args = parser.parse_args()
    defaults = (
        {"size_mib": 4, "rounds": 1, "round_trips": 40, "streams": 20, "idle": 1.0}
        if args.smoke
        else {"size_mib": 256, "rounds": 3, "round_trips": 2_000, "streams": 1_000, "idle": 5.0}
    )
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if min(args.size_mib, args.rounds, args.round_trips, args.streams) < 1 or args.idle <= 0:
        parser.error("every size must be positive")
    args.size = args.size_mib * MiB
    print(
        f"transfers of {args.size_mib:,} MiB x {args.rounds} each way per path, {args.round_trips:,} round trips"
        f" per path, {args.streams:,} streams at once",
        flush=True,
    )
    report(asyncio.run(run(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
