"""Verification: the coordinator checks that each node's GPUs are what its supplier registered
before the node gets leases (when the cluster's config requires it) and again every
`verify_every_seconds` (jittered), after any inventory change, never on a leased GPU.

A node is checked in this order, and the first finding is its verdict (every one stored as
evidence, `coordinator/db/verifications.py`, served by the API):
1. its live inventory (the worker's hello) hashes to the inventory hash registered on chain, and
   has the registered count of GPUs of the registered model — else *unfit*: no leases until the
   supplier fixes one or the other (no slash);
2. none of its GPUs' identities (UUID, serial) is claimed by another node — else the node not
   verified with it is *unfit* (both, when neither was) until one stops claiming it (the fault is
   recorded, no slash): a claim copied from the public evidence cannot unseat a verified node;
3. each registered GPU answers a compute check (gpunet.verification) and then a memory check
   (gpunet.vram), each in time and right — else *failed* (the reason says which check: a memory
   failure's reads "GPU i memory check: ..."): slashed with fault FailedVerification (which jails
   the node), unless the worker *refused* the challenge before committing to it (no GPU backend, a
   lease took the GPU): then it stays unverified. A refusal to open a committed challenge is a
   failure. Each check is a row of evidence (its `kind`).
   A real GPU whose model is not calibrated yet (coordinator/calibration.py: its deadlines rest on
   the catalog's peak figures times an assumed efficiency, not on the fleet's measurements) is
   waited for past its deadline (`verify_uncalibrated_wait` times it), and its commitment checked
   as any: right but late (the compute check's deadline, or the memory check's fill deadline) is
   *too slow*, neither slashed nor verified, and its time is recorded to calibrate the model from.
   A wrong answer, a broken commitment or a memory check's late answer (what catches memory that
   is not there) still fails. Once the model is calibrated (its calibration sizes the workloads),
   a missed deadline fails.
A node whose every GPU passed is recorded on chain as verified (tier 1 for simulated GPUs, which
only clusters that accept simulated nodes take; tier 2 for real ones) until the verification runs out.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import random
import secrets
import time
from dataclasses import dataclass, field, replace

import asyncpg
from solana.rpc.async_api import AsyncClient
from solders.pubkey import Pubkey

from coordinator.attester import Attester, evidence_hash
from coordinator.db import calibrations, nodes, verifications
from coordinator.db import leases as ledger
from coordinator.db.verifications import Verdict
from coordinator.gateway import NodeOffline
from coordinator.keys import NodeKey
from coordinator.leader import Fence
from coordinator.settings import Settings
from coordinator.state import Shared, WorkerLink
from gpunet import logs, vram
from gpunet import verification as v
from gpunet.accounts import AccountError, fetch, fetch_config
from gpunet.catalog import CatalogError, GpuModel, gpu_model
from gpunet.logs import get_logger
from gpunet.pda import node_pda
from gpunet.protocol import (
    Ack,
    Inventory,
    Verify,
    VerifyCommit,
    VerifyMemory,
    VerifyMemoryOpenings,
    VerifyOpen,
    VerifyOpenings,
)

__all__ = ["SIMULATED_TIER", "VERIFIED_TIER", "Verification"]

log = get_logger("gpunet.coordinator.verification")

SIMULATED_TIER = 1  # the reference path on simulated GPUs (clusters that accept simulated nodes)
VERIFIED_TIER = 2  # compute challenges passed on real GPUs
OPEN_TIMEOUT_SECONDS = 30.0  # for the openings, once committed (they cost the prover little)
SPOT_CHECKS = 0.25  # the share of verifications that come at a random, earlier time
RETRY_SECONDS = 300.0  # a node left unverified (refused, unfit, failed, too slow) is looked at again after this


class _Refused(Exception):
    """The worker refused the challenge (its reason)."""


class _Failed(Exception):
    """The node took the challenge and failed it (its reason)."""


class _TooSlow(Exception):
    """An uncalibrated real GPU answered right, but after the deadline, or not in the time waited
    (`committed`: whether it committed at all): not held against it, it is not verified either."""

    def __init__(self, reason: str, *, committed: bool = True) -> None:
        super().__init__(reason)
        self.committed = committed


@dataclass
class _Challenge:
    id: str
    node_key: NodeKey
    committed: asyncio.Future[VerifyCommit] = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    opened: asyncio.Future[VerifyOpenings | VerifyMemoryOpenings] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class Verification:
    def __init__(
        self,
        settings: Settings,
        pool: asyncpg.Pool,
        chain: AsyncClient,
        shared: Shared,
        link: WorkerLink,
        attester: Attester,
        *,
        fence: Fence,
    ) -> None:
        self.settings, self.pool, self.chain, self.shared, self.link = settings, pool, chain, shared, link
        self.attester, self.fence = attester, fence
        self.due: dict[NodeKey, float] = {}  # node -> when it is verified next
        self._running: dict[NodeKey, asyncio.Task[None]] = {}
        self._challenging: set[NodeKey] = set()  # nodes of `_running` whose challenges are not all answered
        shared.scheduler.taken = self.yield_gpus  # verification yields to placement (see `step`)
        self._challenges: dict[str, _Challenge] = {}  # by id: a node's GPUs are challenged at once
        self._config_read = 0.0

    def stop(self) -> None:
        """This replica stopped leading: the verifications in flight end (the next leader starts them again)."""
        for task in self._running.values():
            task.cancel()

    # --- what the workers say (from the worker messages)

    def connected(self, node_key: NodeKey, inventory: Inventory) -> None:
        """A worker's hello: a node never seen, or whose inventory changed, is verified now."""
        if self.shared.inventories.get(node_key) != inventory:
            self.shared.inventories[node_key] = inventory
            self.due[node_key] = 0.0

    def committed(self, node_key: NodeKey, message: VerifyCommit) -> None:
        c = self._challenges.get(message.id)
        if c is not None and c.node_key == node_key and not c.committed.done():
            c.committed.set_result(message)

    def opened(self, node_key: NodeKey, message: VerifyOpenings | VerifyMemoryOpenings) -> None:
        c = self._challenges.get(message.id)
        if c is not None and c.node_key == node_key and not c.opened.done():
            c.opened.set_result(message)

    def refused(self, node_key: NodeKey, ack: Ack) -> None:
        """A refusal of the challenge it names (an older worker's names none: it refuses every one of
        the node's at that step). A challenge not yet committed may be refused: that GPU is left
        unchecked (a lease took it, no GPU backend). One committed and asked to open fails: the prover
        has seen which rows or blocks are asked by then, so a refusal there would let one that cannot
        answer them (skipped work, memory short of its claim) walk away unslashed and try again until
        the draw suits it."""
        outcome: Exception
        if ack.of in ("verify", "verify_memory"):
            step, outcome = "committed", _Refused(ack.error or "refused")
        elif ack.of == "verify_open":
            step, outcome = "opened", _Failed(f"it committed, then refused to answer: {ack.error or 'refused'}")
        else:
            return
        for c in [c for c in self._challenges.values() if c.node_key == node_key and ack.challenge in (None, c.id)]:
            waiting = c.opened if c.committed.done() else c.committed  # the step the challenge is at
            if waiting is getattr(c, step) and not waiting.done():
                waiting.set_exception(outcome)
                waiting.exception()  # retrieved here: the challenge may already be past waiting on it

    async def refused_dispatch(self, node_key: NodeKey, lease: str, error: str) -> None:
        """The node cannot take a share it was given (it lacks the GPUs it registered): the fault is
        recorded, the node slashed for it (FailedVerification, which jails it, so the program lets its
        share move) and the share moves at once (the failover loop); it gets no leases until verified."""
        reason = f"refused its share of lease {lease}: {error}"
        self.due[node_key] = 0.0
        await self._failed(node_key, reason, lease=lease)
        self.shared.failovers.setdefault(lease, set()).add(node_key)

    # --- the loop

    async def step(self) -> None:
        now = time.time()
        await self._read_config(now)
        for node_key, due in list(self.due.items()):
            if due > now or node_key in self._running or not self.link.online(node_key):
                continue
            async with self.pool.acquire() as conn:
                leased = sum(share.gpus for share in await ledger.active_shares(conn, node_key=node_key))
            if leased >= len(self.shared.inventories[node_key].gpus):
                continue  # a challenge never interrupts a leased GPU: verified once one is free
            # Placement first. From this check to the task's start nothing awaits, and a placement's
            # choice and reservation await nothing either: one comes wholly before or wholly after.
            # Before: the node waits until its worker holds what the placement took (its heartbeat
            # says so; it then refuses those GPUs' challenges, and a refusal is no failure). After:
            # the reservation calls `yield_gpus`, which ends the challenges without a verdict.
            if self._being_taken(node_key):
                continue
            self._challenging.add(node_key)
            self._running[node_key] = asyncio.create_task(self._verify(node_key, leased), name=f"verify-{node_key}")

    def yield_gpus(self, node_key: NodeKey) -> None:
        """A placement, a move or a restored assignment takes GPUs of the node (the scheduler calls
        this as it reserves them): a verification challenging the node ends now, with no verdict (no
        evidence, no slash; the node is verified again later). One whose challenges are all answered
        is recording its verdict, which stands."""
        task = self._running.get(node_key)
        if task is not None and node_key in self._challenging:
            task.cancel()
            log.info("verification.yielded", node=node_key, reason="a placement takes its GPUs")

    def _being_taken(self, node_key: NodeKey) -> bool:
        """A lease the scheduler reserves on the node (a placement or a move in flight, or one placed
        and not yet dispatched) that the node's worker does not hold yet."""
        held = self.shared.running_checked.get(node_key, frozenset())
        reserved = self.shared.scheduler.reservations.items()
        return any(node_key in placement.node_keys and lease not in held for lease, placement in reserved)

    async def _read_config(self, now: float) -> None:
        """The verification tier the cluster requires to assign a node (read every 30 s)."""
        if now - self._config_read < 30:
            return
        self._config_read = now
        with contextlib.suppress(AccountError):
            self.shared.required_tier = int(getattr(await fetch_config(self.chain), "min_verification_tier", 0))

    @logs.scoped
    async def _verify(self, node_key: NodeKey, leased: int) -> None:
        logs.bind(node=node_key)
        try:
            verdict = await self._judge(node_key, leased)
        except Exception:
            log.exception("verification.error", node=node_key)
            verdict = "an error (logged)"
        finally:
            self._running.pop(node_key, None)
            self._challenging.discard(node_key)
        self.due[node_key] = time.time() + (self._next_check() if verdict is None else RETRY_SECONDS)

    def _next_check(self) -> float:
        """Seconds until a verified node is checked again: before its verification runs out (jittered,
        so nodes do not all come at once), or, as a random spot check, any time before that: a node
        cannot count on being left alone until then."""
        period = self.settings.verify_every_seconds
        if random.random() < SPOT_CHECKS:
            return period * random.uniform(0.05, 0.8)
        return period * random.uniform(0.8, 0.9)

    async def _judge(self, node_key: NodeKey, leased: int) -> str | None:
        """Verifies the node; None when it passed, else why not (recorded, and acted on). `leased`: its
        GPUs that leases hold, whose challenges the worker refuses (they are checked once free)."""
        node = await fetch(self.chain, node_pda(node_key), "Node")
        inventory = self.shared.inventories[node_key]
        try:
            model = gpu_model(int(node.spec.gpu_model))
        except CatalogError as e:
            return await self._unfit(node_key, inventory, "?", f"its registered model is not listed: {e}")
        if not any(node.spec.inventory_hash):
            reason = "no inventory hash is registered: register the one `gpunet worker inventory` prints"
            await self._store(Verdict(node_key, model.name, inventory.simulated, "unverified", reason))
            log.info("verification.unverified", node=node_key, reason=reason)
            return reason
        if inventory.hash() != bytes(node.spec.inventory_hash):
            return await self._unfit(
                node_key,
                inventory,
                model.name,
                "its GPUs differ from its registration (the inventory hash on chain): register the machine as it "
                "is (gpunet node update --inventory-hash, see gpunet worker status) or restore it",
            )
        gpus = [g for g in inventory.gpus if g.model == model.name]
        if len(gpus) < node.spec.gpu_count:
            return await self._unfit(
                node_key,
                inventory,
                model.name,
                f"it runs {len(gpus)} {model.name} GPUs, registered {node.spec.gpu_count}",
            )
        if inventory.simulated and not self.settings.accept_simulated:
            return await self._unfit(node_key, inventory, model.name, "simulated GPUs are not accepted on this cluster")
        if (duplicate := await self._claim_identities(node_key, inventory, model)) is not None:
            return duplicate
        # Every GPU at once: a node verified in the time of one GPU, and the memory checks' fills held
        # all together (one GPU's worth of memory cannot answer for each GPU in turn).
        calibration = None
        if not inventory.simulated:  # simulated GPUs' deadlines are the simulation's own
            async with self.pool.acquire() as conn:
                calibration = await calibrations.current(conn, model.name)
        outcomes = await asyncio.gather(
            *(
                self._gpu(node_key, inventory, model, calibration, gpu.index, gpu.uuid)
                for gpu in gpus[: node.spec.gpu_count]
            ),
            return_exceptions=True,
        )
        self._challenging.discard(node_key)  # answered: a placement from now on no longer ends it
        for outcome in outcomes:
            if isinstance(outcome, BaseException) and not isinstance(outcome, _Refused | _Failed | _TooSlow):
                raise outcome
        if failed := [o for o in outcomes if isinstance(o, _Failed)]:
            await self._failed(node_key, str(failed[0]))
            return str(failed[0])
        # Right but late on an uncalibrated model: no slash, and no verification (it is not known to
        # be the model it claims); challenged again at the retry interval.
        if slow := [o for o in outcomes if isinstance(o, _TooSlow)]:
            log.warning("verification.too_slow", node=node_key, reason=str(slow[0]))
            return str(slow[0])
        # A node busy on leases passes on its free GPUs: one partly leased all the time must not run
        # out of verification (and so of new leases). The GPUs it says are leased were verified before
        # a lease could take them (the config requires it), and they are never more than leases hold.
        refused = [o for o in outcomes if isinstance(o, _Refused)]
        if refused and (len(refused) > leased or len(refused) == len(outcomes)):
            log.warning("verification.refused", node=node_key, reason=str(refused[0]))
            return str(refused[0])
        tier = SIMULATED_TIER if inventory.simulated else VERIFIED_TIER
        self.shared.unfit.pop(node_key, None)
        await self._record_pass(node_key, tier)
        log.info(
            "verification.passed", node=node_key, tier=tier, gpus=len(outcomes) - len(refused), leased=len(refused)
        )
        return None

    async def _claim_identities(self, node_key: NodeKey, inventory: Inventory, model: GpuModel) -> str | None:
        identities = [f"uuid:{g.uuid}" for g in inventory.gpus] + [
            f"serial:{g.serial}" for g in inventory.gpus if g.serial
        ]
        async with self.pool.acquire() as conn:
            async with self.fence.decision(conn):
                also = await verifications.claim_identities(
                    conn, node_key, identities, self.settings.verify_every_seconds
                )
        # A node verified with a GPU keeps it: a claim copied from the public evidence (a patched
        # NVML needs no GPU) must not take an honest node's leases away. It is the other's turn to
        # be found unfit when it is verified.
        lost = [d for d in also if d.holder != "this"]
        if not lost:
            return None
        d = lost[0]
        if d.holder == "other":
            reason = f"GPU {d.identity} is claimed by node {d.other}, verified with it: one GPU counts once"
        else:
            reason = f"GPU {d.identity} is also claimed by node {d.other}: one GPU counts once (both stay unverified)"
            self.shared.unfit[d.other] = reason
        evidence = {"fault": "DuplicateGpu", "node_key": str(node_key), "identity": d.identity, "also": str(d.other)}
        async with self.pool.acquire() as conn:
            async with self.fence.decision(conn):
                await nodes.record_fault(conn, node_key, None, "DuplicateGpu", evidence, evidence_hash(evidence))
        return await self._unfit(node_key, inventory, model.name, reason)

    async def _gpu(
        self,
        node_key: NodeKey,
        inventory: Inventory,
        model: GpuModel,
        calibration: calibrations.Calibration | None,
        gpu: int,
        uuid: str,
    ) -> None:
        """One GPU's checks, compute then memory; raises _Refused, _Failed or _TooSlow (its reason). A
        compute check too slow but committed is followed by the memory check all the same (which may
        fail it, and is measured too)."""
        slow: _TooSlow | None = None
        try:
            try:
                await self._challenge(node_key, inventory, model, calibration, gpu, uuid)
            except _TooSlow as e:
                if not e.committed:
                    raise
                slow = e
            await self._memory_check(node_key, inventory, model, calibration, gpu, uuid)
        except _Refused as e:
            raise _Refused(f"GPU {gpu} refused its challenge: {e}") from None
        if slow is not None:
            raise slow

    def _waited(self, inventory: Inventory, calibration: calibrations.Calibration | None, deadline: float) -> float:
        """How long a commitment is waited for: the deadline, or longer on an uncalibrated real GPU
        (its time is what calibrates the model)."""
        if inventory.simulated or calibration is not None:
            return deadline
        return deadline * self.settings.verify_uncalibrated_wait

    async def _challenge(
        self,
        node_key: NodeKey,
        inventory: Inventory,
        model: GpuModel,
        calibration: calibrations.Calibration | None,
        gpu: int,
        uuid: str,
    ) -> None:
        """One GPU's challenge; raises _Refused, _Failed or _TooSlow (its reason), recording the evidence
        either way."""
        seconds = self.settings.verify_simulated_seconds if inventory.simulated else self.settings.verify_seconds
        efficiency = None if calibration is None else calibration.efficiency
        workload = v.workload_for(
            model, v.new_seed(), simulated=inventory.simulated, seconds=seconds, efficiency=efficiency
        )
        c = _Challenge(secrets.token_hex(16), node_key)
        self._challenges[c.id] = c
        evidence = Verdict(
            node_key, model.name, inventory.simulated, "passed", gpu_index=gpu, gpu_uuid=uuid, challenge=c.id,
            kind="compute",
            seed=workload.seed.hex(), n=workload.n, depth=workload.depth, products=workload.products,
            expected_seconds=workload.expected_seconds, deadline_seconds=workload.deadline, flops=workload.flops,
            calibration=None if calibration is None else calibration.id,
        )  # fmt: skip
        waited = self._waited(inventory, calibration, workload.deadline)
        sent = time.monotonic()
        try:
            try:
                await self.link.send(node_key, Verify(
                    id=c.id, gpu=gpu, seed=workload.seed.hex(), n=workload.n, depth=workload.depth,
                    products=workload.products, expected_seconds=workload.expected_seconds,
                ))  # fmt: skip
                commit = await asyncio.wait_for(asyncio.shield(c.committed), waited)
            except NodeOffline:
                raise _Refused("the worker disconnected") from None
            except TimeoutError:
                if waited > workload.deadline:
                    raise _TooSlow(
                        f"GPU {gpu} too slow (uncalibrated): no commitment in {waited:.1f} s (the deadline of "
                        f"{workload.deadline:.1f} s {self.settings.verify_uncalibrated_wait:g} times), "
                        f"a {model.name} is expected in {workload.expected_seconds:.1f} s", committed=False,
                    ) from None  # fmt: skip
                raise _Failed(f"GPU {gpu} missed the deadline of {workload.deadline:.1f} s "
                              f"(a {model.name} needs about {workload.expected_seconds:.1f} s)") from None  # fmt: skip
            elapsed = time.monotonic() - sent
            evidence = replace(evidence, committed_seconds=round(elapsed, 3))
            rows = v.choose_rows(workload)
            try:
                await self.link.send(node_key, VerifyOpen(id=c.id, rows=[[k, r] for k, r in rows]))
                answer = await asyncio.wait_for(asyncio.shield(c.opened), OPEN_TIMEOUT_SECONDS)
            except (NodeOffline, TimeoutError):
                raise _Failed(f"GPU {gpu} committed but did not open the rows asked for") from None
            if not isinstance(answer, VerifyOpenings):
                raise _Failed(f"GPU {gpu} answered its compute check with a memory check's openings")
            openings = [
                v.Opening(o.product, o.row, o.chunk, [bytes.fromhex(p) for p in o.path]) for o in answer.openings
            ]
            wrong = await asyncio.to_thread(v.check_all, workload, bytes.fromhex(commit.root), openings, rows)
            if wrong is not None:
                raise _Failed(f"GPU {gpu}: {wrong}")
            if elapsed > workload.deadline and waited > workload.deadline:  # right, but late: uncalibrated
                raise _TooSlow(
                    f"GPU {gpu} too slow (uncalibrated): committed in {elapsed:.1f} s, a {model.name} is expected "
                    f"in {workload.expected_seconds:.1f} s (deadline {workload.deadline:.1f} s)"
                )
            await self._store(evidence)
        except _Refused as e:
            await self._store(replace(evidence, verdict="refused", reason=str(e)))
            raise
        except _Failed as e:
            await self._store(replace(evidence, verdict="failed", reason=str(e)))
            raise
        except _TooSlow as e:
            await self._store(replace(evidence, verdict="too_slow", reason=str(e)))
            raise
        finally:
            self._challenges.pop(c.id, None)

    async def _memory_check(
        self,
        node_key: NodeKey,
        inventory: Inventory,
        model: GpuModel,
        calibration: calibrations.Calibration | None,
        gpu: int,
        uuid: str,
    ) -> None:
        """One GPU's memory check (gpunet.vram); raises _Refused, _Failed or _TooSlow (its reason, "GPU i
        memory check..."), recording the evidence either way. Only the fill's deadline waits for a
        calibration: the answer's (no time to recompute) is what catches memory that is not there."""
        w = vram.memory_workload_for(
            model, v.new_seed(), simulated=inventory.simulated,
            simulated_seconds=self.settings.verify_simulated_memory_seconds,
            step_seconds=None if calibration is None else calibration.step_seconds,
        )  # fmt: skip
        c = _Challenge(secrets.token_hex(16), node_key)
        self._challenges[c.id] = c
        evidence = Verdict(
            node_key, model.name, inventory.simulated, "passed", gpu_index=gpu, gpu_uuid=uuid, challenge=c.id,
            kind="memory", seed=w.seed.hex(), lanes=w.lanes, blocks=w.blocks, block_bytes=w.block_bytes,
            expected_seconds=w.expected_seconds, deadline_seconds=w.deadline, answer_deadline_seconds=w.answer_deadline,
            calibration=None if calibration is None else calibration.id,
        )  # fmt: skip
        what = f"GPU {gpu} memory check"
        waited = self._waited(inventory, calibration, w.deadline)
        sent = time.monotonic()
        try:
            try:
                await self.link.send(node_key, VerifyMemory(
                    id=c.id, gpu=gpu, seed=w.seed.hex(), lanes=w.lanes, blocks=w.blocks, block_bytes=w.block_bytes,
                    expected_seconds=w.expected_seconds,
                ))  # fmt: skip
                commit = await asyncio.wait_for(asyncio.shield(c.committed), waited)
            except NodeOffline:
                raise _Refused("the worker disconnected") from None
            except TimeoutError:
                if waited > w.deadline:
                    raise _TooSlow(
                        f"{what} too slow (uncalibrated): no commitment in {waited:.1f} s (the fill deadline of "
                        f"{w.deadline:.1f} s {self.settings.verify_uncalibrated_wait:g} times), "
                        f"a {model.name} fills {w.bytes} bytes in about {w.expected_seconds:.1f} s", committed=False,
                    ) from None  # fmt: skip
                raise _Failed(f"{what}: it missed the fill deadline of {w.deadline:.1f} s (a {model.name} fills "
                              f"{w.bytes} bytes in about {w.expected_seconds:.1f} s)") from None  # fmt: skip
            filled = time.monotonic() - sent
            evidence = replace(evidence, committed_seconds=round(filled, 3))
            asked = vram.choose_blocks(w)
            named = time.monotonic()
            try:
                await self.link.send(node_key, VerifyOpen(id=c.id, rows=[[lane, j] for lane, j in asked]))
                answer = await asyncio.wait_for(asyncio.shield(c.opened), w.answer_deadline)
            except NodeOffline:
                raise _Failed(f"{what}: it committed but did not answer the blocks asked for") from None
            except TimeoutError:
                raise _Failed(
                    f"{what}: the blocks asked for took over the {w.answer_deadline:.1f} s deadline "
                    "(a GPU holding its fill answers at once; one short of memory must recompute)"
                ) from None
            evidence = replace(evidence, answered_seconds=round(time.monotonic() - named, 3))
            if not isinstance(answer, VerifyMemoryOpenings):
                raise _Failed(f"{what}: it answered with a compute check's openings")
            try:
                openings = [
                    vram.BlockOpening(b.lane, b.block, None if b.content is None else base64.b64decode(b.content),
                                      b.chunk, [bytes.fromhex(p) for p in b.path])
                    for b in answer.blocks
                ]  # fmt: skip
            except binascii.Error as e:
                raise _Failed(f"{what}: a block's content is not base64 ({e})") from None
            wrong = await asyncio.to_thread(vram.check_memory, w, bytes.fromhex(commit.root), openings, asked)
            if wrong is not None:
                raise _Failed(f"{what}: {wrong}")
            if filled > w.deadline and waited > w.deadline:  # right, but late: uncalibrated
                raise _TooSlow(
                    f"{what} too slow (uncalibrated): filled in {filled:.1f} s, a {model.name} is expected in "
                    f"{w.expected_seconds:.1f} s (deadline {w.deadline:.1f} s)"
                )
            await self._store(evidence)
        except _Refused as e:
            await self._store(replace(evidence, verdict="refused", reason=str(e)))
            raise
        except _Failed as e:
            await self._store(replace(evidence, verdict="failed", reason=str(e)))
            raise
        except _TooSlow as e:
            await self._store(replace(evidence, verdict="too_slow", reason=str(e)))
            raise
        finally:
            self._challenges.pop(c.id, None)

    async def _store(self, verdict: Verdict) -> None:
        async with self.pool.acquire() as conn:
            async with self.fence.decision(conn):
                await verifications.record(conn, verdict)
        self.shared.metrics.verifications.labels(verdict.verdict).inc()

    async def _unfit(self, node_key: NodeKey, inventory: Inventory, model: str, reason: str) -> str:
        await self._store(Verdict(node_key, model, inventory.simulated, "unfit", reason))
        self.shared.unfit[node_key] = reason
        log.warning("verification.unfit", node=node_key, reason=reason)
        return reason

    async def _failed(self, node_key: NodeKey, reason: str, lease: str | None = None) -> None:
        self.shared.unfit[node_key] = reason
        log.warning("verification.failed", node=node_key, reason=reason)
        async with self.pool.acquire() as conn:
            rows = await verifications.of_node(conn, str(node_key), limit=16)
        evidence = {"fault": "FailedVerification", "node_key": str(node_key), "reason": reason,
                    "challenges": [{k: r[k] for k in ("challenge", "kind", "gpu_index", "seed", "n", "depth",
                                                      "products", "lanes", "blocks", "block_bytes", "deadline_seconds",
                                                      "committed_seconds", "answer_deadline_seconds",
                                                      "answered_seconds", "verdict", "reason")}
                                   for r in rows]}  # fmt: skip
        async with self.pool.acquire() as conn:
            async with self.fence.decision(conn):
                fault = await nodes.record_fault(
                    conn, node_key, lease, "FailedVerification", evidence, evidence_hash(evidence)
                )
        if not self.settings.slash_failed_verification:
            return
        try:
            victim = Pubkey.from_string(lease) if lease else None  # the client whose share it refused
            sig = await self.attester.slash(node_key, "FailedVerification", evidence, lease=victim)
            async with self.pool.acquire() as conn:
                async with self.fence.decision(conn):
                    await nodes.set_slash_signature(conn, fault, str(sig) if sig else None)
        except Exception:
            log.exception("verification.slash_failed", node=node_key)

    async def _record_pass(self, node_key: NodeKey, tier: int) -> None:
        """Records the pass on chain: valid for `verify_every_seconds` (or the config's maximum)."""
        async with self.pool.acquire() as conn:
            rows = await verifications.of_node(conn, str(node_key), limit=64)
        evidence = {"node_key": str(node_key), "tier": tier,
                    "challenges": [r["challenge"] for r in rows if r["verdict"] == "passed"]}  # fmt: skip
        await self.attester.record_verification(node_key, tier, self.settings.verify_every_seconds, evidence)
        async with self.pool.acquire() as conn:
            async with self.fence.decision(conn):
                await verifications.mark_verified(conn, node_key)  # it keeps its GPUs' identities
