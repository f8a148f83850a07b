"""Real GPUs under uncalibrated deadlines, and their calibration from the fleet's own measurements,
on a real chain and database.

A real GPU's deadlines rest on its model's catalog peak times an assumed efficiency until the model
is calibrated: one that answers right but after the deadline is too slow, never slashed nor jailed
(its stake to the base unit), unverified and challenged again at the retry interval, its time
recorded and shown to its supplier (`gpunet node verifications`, the API's evidence); a wrong answer
still fails and is slashed, uncalibrated, and so does a memory check's late answer. Once the model
is calibrated with an expectation the GPU cannot meet, its missed deadline fails and slashes (the
control: a GPU that meets it passes). `gpunet coordinator calibrate MODEL` refuses one node's
measurements, reports without writing and changes what is expected only with --apply, from honest
measurements only (a failed check's are never counted), each node's latest few; the GPUs it was
calibrated from then pass.

Real GPUs here are scripted at the worker link's boundary (the gateway's send side, as in
test_verification_rules.py: a fake at that boundary only): this worker has no GPU backend, and a
real workload (a 4096 x 8192 shape, a fill of 80 % of an H100) is far beyond a CPU. The scripted
prover computes every challenge on the reference path, honestly (or wrong, where a test says so),
and answers when a GPU of its scripted speed would (in the background, as a worker's answers come).
The real path's sizes are scaled down for the CPU (`small_real_workloads`: the shape, the fill, the
catalog's assumed efficiency and step time, the fill and compute allowances); its rules are the
coordinator's, unchanged.
"""

from __future__ import annotations

import asyncio
import base64
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import uvicorn
from solders.pubkey import Pubkey

from coordinator import calibration
from coordinator.api import create_app
from coordinator.db import calibrations
from coordinator.indexer.rpc import ChainRpc
from coordinator.loops import verification as loop
from coordinator.service import Coordinator
from coordinator.settings import Settings
from gpunet import instructions as ix
from gpunet import verification as v
from gpunet import vram
from gpunet.accounts import fetch
from gpunet.catalog import gpu_model
from gpunet.jobs import node_verifications
from gpunet.localnet import free_ports
from gpunet.protocol import (
    GpuInfo,
    Inventory,
    MemoryBlock,
    RowOpening,
    Verify,
    VerifyCommit,
    VerifyMemory,
    VerifyMemoryOpenings,
    VerifyOpen,
    VerifyOpenings,
)
from gpunet.testbed import Market, Supplier

from .conftest import eventually, leading_without_loops
from .links import ScriptedLink

REPO = Path(__file__).resolve().parents[2]
H100 = gpu_model("H100")

# The scaled-down real path: a challenge of 3 products of 64 x 256 (about 0.64 s at the assumed
# efficiency), a fill of 2 lanes of 256 blocks (0.64 s at the assumed step), deadlines 1.05 s each.
VERIFY_SECONDS = 0.5
ASSUMED_EFFICIENCY = 2e-8  # of the H100's 494.7 TF32 TFLOP/s: about 9.9 MFLOP/s
ASSUMED_STEP_SECONDS = 2.5e-3
FAST = dict(rate=1e8, step_seconds=2.5e-4)  # well within the deadlines
SLOW = dict(rate=3.5e6, step_seconds=7e-3)  # about 1.8 s a check: past the deadlines, within 4 times them


@pytest.fixture(autouse=True)
def small_real_workloads(monkeypatch) -> None:
    monkeypatch.setattr(v, "REAL_SHAPE", (64, 256))
    monkeypatch.setattr(v, "real_efficiency", lambda model: ASSUMED_EFFICIENCY)
    monkeypatch.setattr(v, "REAL_ALLOWANCE_SECONDS", 0.25)
    monkeypatch.setattr(vram, "MEMORY_FRACTION", 1.0001 * 2 * 256 * 1024 / (H100.vram_gb * 2**30))
    monkeypatch.setattr(vram, "LANE_ANSWER_DEADLINES", 0.3199)  # lanes of 256 blocks at the assumed step
    monkeypatch.setattr(vram, "REAL_STEP_SECONDS", ASSUMED_STEP_SECONDS)
    monkeypatch.setattr(vram, "REAL_ALLOWANCE_SECONDS", 0.25)


def _inventory(uuid: str) -> Inventory:
    gpu = GpuInfo(index=0, uuid=uuid, name="NVIDIA H100 80GB HBM3", model="H100", vram_mib=81559,
                  compute_capability="9.0", pcie_gen=5, pcie_width=16, power_limit_w=700)  # fmt: skip
    return Inventory(driver_version="550.54.15", cuda_version="12.4", simulated=False, gpus=[gpu])


@dataclass
class _Gpu:
    """How a scripted real GPU answers: at `rate` FLOP/s, filling a lane's block in `step_seconds`;
    `wrong`: its compute check's digests are not its rows' (a skipped or faked result);
    `answer_seconds`: it takes that long to answer a memory check's blocks (it must recompute them)."""

    rate: float
    step_seconds: float
    wrong: bool = False
    answer_seconds: float = 0.0


class _Link(ScriptedLink):
    """The gateway's send side: each node's GPU a scripted real GPU (`_Gpu`), answering in the
    background as a worker does."""

    def __init__(self, coordinator: Coordinator, inventories: dict[Pubkey, Inventory]) -> None:
        self.verification = coordinator.verification
        self.inventories = inventories  # each node's, as registered
        self.gpus: dict[Pubkey, _Gpu] = {}  # the nodes online
        self.nodes = self.gpus
        self.kept: dict[str, Any] = {}  # challenge id -> (workload, digests) or vram.Filled
        self.tasks: set[asyncio.Task[None]] = set()

    async def send(self, node_key: Pubkey, message: Any) -> None:
        task = asyncio.create_task(self._answer(node_key, self.gpus[node_key], message))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _answer(self, node_key: Pubkey, gpu: _Gpu, message: Any) -> None:
        started = time.monotonic()
        if isinstance(message, Verify):
            w = v.Workload(bytes.fromhex(message.seed), message.n, message.depth, message.products,
                           message.expected_seconds, False)  # fmt: skip
            digests = await asyncio.to_thread(v.digests_of, w)
            if gpu.wrong:
                digests = digests ^ np.uint32(1)
            self.kept[message.id] = (w, digests)
            await asyncio.sleep(max(0.0, w.flops / gpu.rate - (time.monotonic() - started)))
            self.verification.committed(node_key, VerifyCommit(simulated=False, id=message.id,
                                                               root=v.commit(digests).hex()))  # fmt: skip
        elif isinstance(message, VerifyMemory):
            mw = vram.MemoryWorkload(bytes.fromhex(message.seed), message.lanes, message.blocks, message.block_bytes,
                                     message.expected_seconds, False)  # fmt: skip
            filled = await asyncio.to_thread(vram.fill, mw)
            self.kept[message.id] = filled
            await asyncio.sleep(max(0.0, mw.blocks * gpu.step_seconds - (time.monotonic() - started)))
            self.verification.committed(node_key, VerifyCommit(simulated=False, id=message.id,
                                                               root=filled.root().hex()))  # fmt: skip
        elif isinstance(message, VerifyOpen) and isinstance(self.kept.get(message.id), vram.Filled):
            opened = vram.open_blocks(self.kept.pop(message.id), [(lane, j) for lane, j in message.rows])
            await asyncio.sleep(gpu.answer_seconds)
            blocks = [MemoryBlock(lane=o.lane, block=o.block, chunk=o.chunk, path=[p.hex() for p in o.path],
                                  content=None if o.content is None else base64.b64encode(o.content).decode())
                      for o in opened]  # fmt: skip
            self.verification.opened(node_key, VerifyMemoryOpenings(simulated=False, id=message.id, blocks=blocks))
        elif isinstance(message, VerifyOpen):
            w, digests = self.kept.pop(message.id)
            openings = []
            for k, row in message.rows:
                o = v.open_row(w, digests, k, row)
                openings.append(RowOpening(product=k, row=row, chunk=o.chunk, path=[p.hex() for p in o.path]))
            self.verification.opened(node_key, VerifyOpenings(simulated=False, id=message.id, openings=openings))


def _settings(node, database_url: str) -> Settings:
    return Settings(rpc_url=node.url, ws_url=node.ws_url, database_url=database_url, verify_seconds=VERIFY_SECONDS,
                    api_port=free_ports(1)[0])  # fmt: skip


async def _world(chain, pool, settings, count: int) -> tuple[Market, list[Supplier], Coordinator, _Link]:
    """`count` suppliers of one real H100 node each, and a coordinator verifying them (nothing else)."""
    market = await Market.create(chain)
    suppliers = [await market.supplier(1, inventory_hash=_inventory(f"GPU-{i}").hash()) for i in range(count)]
    coordinator = await leading_without_loops(Coordinator(settings, pool, market.admin))
    await coordinator.indexer.backfill()  # the nodes and their providers in the ledger
    link = _Link(coordinator, {s.node_key.pubkey(): _inventory(f"GPU-{i}") for i, s in enumerate(suppliers)})
    coordinator.verification.link = link
    return market, suppliers, coordinator, link


async def _round(coordinator: Coordinator, link: _Link, *gpus: tuple[Supplier, _Gpu]) -> None:
    """One verification of each node, online with its scripted GPU and due now, to its end."""
    verification = coordinator.verification
    for supplier, gpu in gpus:
        key = supplier.node_key.pubkey()
        link.gpus[key] = gpu
        verification.connected(key, link.inventories[key])
        verification.due[key] = 0.0

    async def judged() -> bool:
        await verification.step()
        return all(verification.due[s.node_key.pubkey()] > time.time() for s, _ in gpus)

    await eventually(judged, timeout=60, what="the nodes judged")


async def _rows(pool, supplier: Supplier) -> list[dict]:
    async with pool.acquire() as conn:
        rows = await conn.fetch("SELECT * FROM verifications WHERE node_key = $1 ORDER BY id",
                                str(supplier.node_key.pubkey()))  # fmt: skip
    return [dict(r) for r in rows]


async def _node(chain, supplier: Supplier) -> tuple[bool, int, int]:
    """(jailed, verification tier, the provider's stake in base units), on chain."""
    n = await fetch(chain, supplier.node, "Node")
    return n.jailed, n.verification_tier, (await fetch(chain, supplier.provider, "Provider")).staked


async def _fault(pool, supplier: Supplier):
    async with pool.acquire() as conn:
        return await conn.fetchrow("SELECT * FROM faults WHERE node_key = $1", str(supplier.node_key.pubkey()))


def _coordinator_cli(*args: str, database_url: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "GPUNET_DATABASE_URL": database_url, "COLUMNS": "250", "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "coordinator", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip


@pytest.mark.timeout(300)
async def test_an_uncalibrated_real_gpu_is_not_slashed_for_being_slow_only(node, chain, database_url, pool) -> None:
    settings = _settings(node, database_url)
    _, (slow, fast, wrong, short), coordinator, link = await _world(chain, pool, settings, 4)
    verification = coordinator.verification
    before = {s: await _node(chain, s) for s in (slow, fast, wrong, short)}
    api = uvicorn.Server(uvicorn.Config(create_app(pool, ChainRpc(node.url), settings), host="127.0.0.1",
                                        port=settings.api_port, log_level="warning", lifespan="off"))  # fmt: skip
    served = asyncio.create_task(api.serve())
    try:
        # Uncalibrated: the slow GPU right but late; a GPU as slow whose compute answer is wrong; one
        # whose memory check's answer is late (it lacks the memory); the fast one (the control).
        await _round(coordinator, link, (slow, _Gpu(**SLOW)), (fast, _Gpu(**FAST)),
                     (wrong, _Gpu(**SLOW, wrong=True)), (short, _Gpu(**FAST, answer_seconds=2.6)))  # fmt: skip

        compute, memory = await _rows(pool, slow)
        assert (compute["verdict"], memory["verdict"]) == ("too_slow", "too_slow"), (compute, memory)
        seconds, deadline = compute["expected_seconds"], compute["deadline_seconds"]
        want = f"a H100 is expected in {seconds:.1f} s (deadline {deadline:.1f} s)"
        assert re.fullmatch(rf"GPU 0 too slow \(uncalibrated\): committed in \d+\.\d s, {re.escape(want)}",
                            compute["reason"]), compute["reason"]  # fmt: skip
        assert memory["reason"].startswith("GPU 0 memory check too slow (uncalibrated): filled in "), memory["reason"]
        for row in (compute, memory):  # measured, the size it was measured on, and no calibration
            assert row["committed_seconds"] > row["deadline_seconds"] and row["calibration"] is None
        assert compute["flops"] == 2 * compute["products"] * 64 * 64 * 256 and memory["blocks"] == 256
        # Not slashed, not jailed, its stake whole; unverified, and challenged again at the retry interval.
        assert await _node(chain, slow) == before[slow] == (False, 0, before[slow][2])
        assert await _fault(pool, slow) is None and slow.node_key.pubkey() not in coordinator.shared.unfit
        retry = verification.due[slow.node_key.pubkey()] - time.time()
        assert loop.RETRY_SECONDS - 30 < retry <= loop.RETRY_SECONDS, retry

        # The control: in time, passed, verified on chain (real GPUs: tier 2), checked again much later.
        assert [r["verdict"] for r in await _rows(pool, fast)] == ["passed", "passed"]
        assert (await _node(chain, fast))[:2] == (False, ix.TIER_GPU)
        assert verification.due[fast.node_key.pubkey()] - time.time() > loop.RETRY_SECONDS

        # A wrong answer fails and is slashed, uncalibrated and late as it is.
        [failed] = await _rows(pool, wrong)
        assert failed["verdict"] == "failed" and "the committed digest is not the row's" in failed["reason"]
        # A memory check's late answer fails too, uncalibrated: that deadline catches memory not there.
        assert [r["verdict"] for r in await _rows(pool, short)] == ["passed", "failed"]
        assert "the blocks asked for took over the 2.0 s deadline" in (await _rows(pool, short))[1]["reason"]
        for cheat in (wrong, short):
            fault = await _fault(pool, cheat)
            assert fault["kind"] == "FailedVerification" and fault["slash_signature"]
            jailed, tier, staked = await _node(chain, cheat)
            assert jailed and tier == 0 and staked < before[cheat][2]
            del link.gpus[cheat.node_key.pubkey()]

        # The supplier sees measured against expected: the API's evidence and `gpunet node verifications`.
        url = f"http://127.0.0.1:{settings.api_port}"
        items = (await eventually(lambda: _evidence(url, slow), what="the API serving"))["items"]
        assert [(i["kind"], i["verdict"]) for i in items] == [("memory", "too_slow"), ("compute", "too_slow")]
        assert items[1]["committed_seconds"] == compute["committed_seconds"] and items[1]["flops"] == compute["flops"]
        shown = await asyncio.create_subprocess_exec(  # (the API answers from this process's loop)
            sys.executable, "-c", "from gpunet.cli import main; main()", "node", "verifications",
            str(slow.node_key.pubkey()), "--coordinator", url, cwd=REPO,
            env={**os.environ, "COLUMNS": "300", "PYTHONPATH": str(REPO)}, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        out = (await asyncio.wait_for(shown.communicate(), 60))[0].decode()
        assert shown.returncode == 0, out
        line = next(line for line in out.splitlines() if "compute" in line)
        expected, deadline, took = (f"{compute[k]:.2f} s" for k in ("expected_seconds", "deadline_seconds",
                                                                      "committed_seconds"))  # fmt: skip
        assert "too_slow" in line and line.index(expected) < line.index(deadline) < line.index(took), line

        # Challenged again (the retry interval passed): too slow again, still not held against it.
        await _round(coordinator, link, (slow, _Gpu(**SLOW)))
        assert [r["verdict"] for r in await _rows(pool, slow)] == ["too_slow"] * 4
        assert await _node(chain, slow) == before[slow]
        # /metrics counts the verdict.
        metrics = coordinator.shared.metrics.registry
        assert metrics.get_sample_value("gpunet_coordinator_verifications_total", {"verdict": "too_slow"}) == 4

        # The H100 calibrated with an expectation the slow GPU cannot meet: its missed deadline fails.
        async with pool.acquire() as conn:
            tight = await calibrations.record(
                conn, "H100", efficiency=ASSUMED_EFFICIENCY, step_seconds=ASSUMED_STEP_SECONDS, percentile=10,
                compute_samples=5, memory_samples=5, nodes=2, suppliers=2, sample=[], set_by="test",
            )  # fmt: skip
        await _round(coordinator, link, (slow, _Gpu(**SLOW)), (fast, _Gpu(**FAST)))
        last = (await _rows(pool, slow))[-1]
        assert (last["verdict"], last["calibration"]) == ("failed", tight.id), last
        assert f"missed the deadline of {last['deadline_seconds']:.1f} s" in last["reason"]
        assert last["committed_seconds"] is None
        fault = await eventually(lambda: _slashed(pool, slow), what="the slow GPU slashed")
        assert fault["kind"] == "FailedVerification"
        jailed, tier, staked = await _node(chain, slow)
        assert jailed and staked < before[slow][2]
        # The control, under the same calibration: the fast GPU passes.
        rows = (await _rows(pool, fast))[-2:]
        assert [(r["verdict"], r["calibration"]) for r in rows] == [("passed", tight.id)] * 2
        assert (await _node(chain, fast))[:2] == (False, ix.TIER_GPU)
    finally:
        api.should_exit = True
        await served
        for task in link.tasks:
            task.cancel()
        await coordinator.chain.close()
        await coordinator.indexer.rpc.close()


async def _evidence(url: str, supplier: Supplier) -> dict:
    try:
        return await node_verifications(url, supplier.node_key.pubkey())
    except Exception:
        return {}


async def _slashed(pool, supplier: Supplier):
    fault = await _fault(pool, supplier)
    return fault if fault is not None and fault["slash_signature"] else None


@pytest.mark.timeout(400)
async def test_calibrate_sets_what_is_expected_from_honest_measurements_only_with_apply(
    node, chain, database_url, pool
) -> None:
    settings = _settings(node, database_url)
    _, (first, second, cheat), coordinator, link = await _world(chain, pool, settings, 3)
    try:
        # One node's measurements alone, however many, calibrate nothing.
        for _ in range(6):  # one more than a node's measurements that count
            await _round(coordinator, link, (first, _Gpu(**SLOW)))
        assert [r["verdict"] for r in await _rows(pool, first)] == ["too_slow"] * 12
        refused = _coordinator_cli("calibrate", "H100", "--apply", database_url=database_url)
        assert refused.returncode == 1, (refused.stdout, refused.stderr)
        assert "cannot be calibrated yet" in refused.stderr and "of 1 node: at least 2 nodes" in refused.stderr
        assert await _calibrations(pool) == []

        # A second supplier's slow GPU, and a cheat whose wrong answers come as slowly: its rows never count.
        await _round(coordinator, link, (second, _Gpu(rate=3e6, step_seconds=8e-3)),
                     (cheat, _Gpu(**SLOW, wrong=True)))  # fmt: skip
        assert [r["verdict"] for r in await _rows(pool, cheat)] == ["failed"]
        del link.gpus[cheat.node_key.pubkey()]

        # The report alone writes nothing, says how to apply, and the next check expects what it did.
        report = _coordinator_cli("calibrate", "H100", database_url=database_url)
        assert report.returncode == 0, report.stderr
        assert "`gpunet coordinator calibrate H100 --apply` records it" in report.stdout
        # compute: 6 measurements (first's latest 5 and second's 1), of 2 nodes, of 2 suppliers
        assert re.search(r"compute\s+│[^│]+│\s+6\s+│\s+2\s+│\s+2\s+│", report.stdout), report.stdout
        assert await _calibrations(pool) == []
        await _round(coordinator, link, (first, _Gpu(**SLOW)))
        unchanged = (await _rows(pool, first))[-2:]
        assert [(r["verdict"], r["calibration"]) for r in unchanged] == [("too_slow", None)] * 2
        assert unchanged[0]["expected_seconds"] == (await _rows(pool, first))[0]["expected_seconds"]

        # --apply records it: the slow end of the honest measurements, each node's latest 5 of each check.
        async with pool.acquire() as conn:
            proposal = calibration.propose(H100, await calibrations.measurements(conn, "H100"))
        applied = _coordinator_cli("calibrate", "H100", "--apply", "--by", "operator", database_url=database_url)
        assert applied.returncode == 0, applied.stderr
        [c] = await _calibrations(pool)
        assert "applied: calibration" in applied.stdout and c.set_by == "operator" and c.percentile == 10
        assert (c.compute_samples, c.memory_samples, c.nodes, c.suppliers) == (6, 6, 2, 2)
        cheats = {r["id"] for r in await _rows(pool, cheat)}
        assert c.sample == proposal.sample and not cheats & set(c.sample)
        assert c.efficiency == pytest.approx(proposal.compute.proposed)
        assert c.step_seconds == pytest.approx(proposal.memory.proposed)
        rows = await _rows(pool, first) + await _rows(pool, second)
        peak = H100.tf32_tflops * 1e12
        measured = [r["flops"] / (peak * r["committed_seconds"]) for r in rows if r["kind"] == "compute"]
        assert min(measured) <= c.efficiency < sorted(measured)[len(measured) // 2]  # the slow end, not the median
        assert c.efficiency < ASSUMED_EFFICIENCY and c.step_seconds > ASSUMED_STEP_SECONDS  # slower than assumed

        # The next checks are sized and timed by it, and the honest GPUs it came from now pass.
        await _round(coordinator, link, (first, _Gpu(**SLOW)), (second, _Gpu(rate=3e6, step_seconds=8e-3)))
        for supplier in (first, second):
            compute, memory = (await _rows(pool, supplier))[-2:]
            assert [(r["verdict"], r["calibration"]) for r in (compute, memory)] == [("passed", c.id)] * 2
            assert compute["expected_seconds"] == pytest.approx(compute["flops"] / (peak * c.efficiency))
            assert memory["expected_seconds"] == pytest.approx(memory["blocks"] * c.step_seconds)
            assert (await _node(chain, supplier))[:2] == (False, ix.TIER_GPU)
    finally:
        for task in link.tasks:
            task.cancel()
        await coordinator.chain.close()
        await coordinator.indexer.rpc.close()


async def _calibrations(pool) -> list[calibrations.Calibration]:
    async with pool.acquire() as conn:
        current = await calibrations.current(conn, "H100")
    return [] if current is None else [current]


# --- the rules, on measurements alone


def _m(node: str, supplier: str, kind: str, value: float, i: int) -> dict:
    seconds = 1.0
    if kind == "compute":
        return {"id": i, "node_key": node, "supplier": supplier, "kind": kind, "committed_seconds": seconds,
                "flops": value * H100.tf32_tflops * 1e12 * seconds, "blocks": None}  # fmt: skip
    return {"id": i, "node_key": node, "supplier": supplier, "kind": kind, "committed_seconds": value * 1000,
            "flops": None, "blocks": 1000}  # fmt: skip


def _rows_of(*nodes: tuple[str, str, list[float], list[float]]) -> list[dict]:
    """Newest first, as the ledger gives them: per node, its compute efficiencies and step times."""
    rows = []
    for node, supplier, efficiencies, steps in nodes:
        rows += [_m(node, supplier, "compute", e, 0) for e in efficiencies]
        rows += [_m(node, supplier, "memory", s, 0) for s in steps]
    return [{**r, "id": i} for i, r in enumerate(rows)]


def test_too_few_measurements_or_one_node_s_or_one_supplier_s_are_refused() -> None:
    four = _rows_of(("a", "x", [0.3, 0.3], [2e-5, 2e-5]), ("b", "y", [0.3, 0.3], [2e-5, 2e-5]))
    assert any("4 measurements of the compute check: at least 5" in p for p in calibration.propose(H100, four).problems)
    one_node = _rows_of(("a", "x", [0.3] * 9, [2e-5] * 9))
    assert any("of 1 node" in p for p in calibration.propose(H100, one_node).problems)
    one_supplier = _rows_of(("a", "x", [0.3] * 3, [2e-5] * 3), ("b", "x", [0.3] * 3, [2e-5] * 3))
    assert any("1 supplier" in p for p in calibration.propose(H100, one_supplier).problems)
    enough = _rows_of(("a", "x", [0.3] * 3, [2e-5] * 3), ("b", "y", [0.3] * 3, [2e-5] * 3))
    assert calibration.propose(H100, enough).problems == []  # the control


def test_the_value_set_is_the_slow_end_and_each_node_counts_its_latest_five() -> None:
    honest = [(f"n{i}", f"s{i}", [0.30 + 0.01 * i] * 5, [(20 + i) * 1e-6] * 5) for i in range(12)]
    p = calibration.propose(H100, _rows_of(*honest))
    assert p.compute.proposed == pytest.approx(calibration.percentile([0.30 + 0.01 * i for i in range(12)] * 5, 10))
    assert p.compute.proposed < p.compute.at(50) and p.memory.proposed > p.memory.at(50)  # the slow end of each
    # One node answering slowly on purpose, checked twenty times: its latest five count (under a tenth
    # of the measurements), and the value stays among the honest ones (the slowest honest: 0.30, 31 us).
    liar = ("liar", "s-liar", [0.01] * 20, [1e-3] * 20)
    p = calibration.propose(H100, _rows_of(liar, *honest))
    assert p.ignored == 30 and len(p.compute.measurements) == 65
    assert p.compute.proposed >= 0.30 and p.memory.proposed <= 31e-6
    # Percentiles as numpy interpolates them.
    values = [0.5, 0.1, 0.3, 0.2, 0.4]
    assert calibration.percentile(values, 10) == pytest.approx(float(np.percentile(values, 10)))
    assert calibration.percentile(values, 90) == pytest.approx(float(np.percentile(values, 90)))
