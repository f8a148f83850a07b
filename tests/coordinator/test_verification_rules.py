"""GPU verification's rules about identity and refusals, on a real chain and database with the
worker's real prover answering in process (the gateway's send side is replaced: a fake at that
boundary only): one GPU counts once — a GPU a verified node holds, claimed by another (its identity
is public evidence: a patched NVML can claim it without the GPU), leaves the claimer unfit, the fault
recorded, and the verified node untouched; claimed by two nodes neither verified with it, both are
unfit; a node with its own GPUs is verified (the control); and a node that refuses a
share it could never take fails verification at once: the fault is recorded, it is slashed (so
jailed) and its share queued to move. A node that commits to a memory check and, once it has seen
the blocks asked for, refuses to answer them fails (a refusal there would let a node short of memory
retry until the draw suits it), while a GPU's refusal before committing (a lease took it) leaves the
node unverified, unslashed, and fails none of its other GPUs' committed checks (the control);
unless a lease holds that GPU: a node busy on leases passes on its free GPUs."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from solders.pubkey import Pubkey

from coordinator.db import verifications
from coordinator.scheduler import LeaseRequest, NotPlaced
from coordinator.service import Coordinator
from coordinator.settings import Settings
from gpunet import instructions as ix
from gpunet.accounts import fetch
from gpunet.amounts import IO
from gpunet.pda import node_pda
from gpunet.protocol import Ack, GpuInfo, Inventory, Verify, VerifyMemory, VerifyOpen
from gpunet.testbed import Market
from worker.verify import Prover

from .conftest import eventually, leading_without_loops
from .links import ScriptedLink
from .world import truly


def _inventory(*uuids: str) -> Inventory:
    gpus = [
        GpuInfo(index=i, uuid=u, name="Simulated H100", model="H100", vram_mib=81920, compute_capability="0.0",
                pcie_gen=0, pcie_width=0, power_limit_w=0)
        for i, u in enumerate(uuids)
    ]  # fmt: skip
    return Inventory(driver_version="simulated", cuda_version="simulated", simulated=True, gpus=gpus)


class _Link(ScriptedLink):
    """The gateway's send side, each node's challenges answered by a real prover over its inventory."""

    def __init__(self, coordinator: Coordinator, inventories: dict[Pubkey, Inventory]) -> None:
        self.verification = coordinator.verification
        self.provers = {key: Prover(inventory) for key, inventory in inventories.items()}
        self.nodes = self.provers
        self.sent: list[tuple[Pubkey, Any]] = []

    async def send(self, node_key: Pubkey, message: Any) -> None:
        self.sent.append((node_key, message))
        prover = self.provers[node_key]
        if isinstance(message, Verify):
            self.verification.committed(node_key, await prover.commit(message, True))
        elif isinstance(message, VerifyMemory):
            self.verification.committed(node_key, await prover.commit_memory(message, True))
        elif isinstance(message, VerifyOpen) and prover.holds_memory(message.id):
            self.verification.opened(node_key, await prover.open_memory(message, True))
        elif isinstance(message, VerifyOpen):
            self.verification.opened(node_key, prover.open(message, True))


class _Refusing(_Link):
    """A link whose provers refuse a step: `verify_open`, a cheat that has seen the blocks asked for
    in its memory checks and will not answer them; `verify_memory`, an honest node whose GPU 1 a
    lease took just as its memory check came, refused while GPU 0's check waits for its openings;
    `leased`, a node whose GPU 1 a lease holds, which refuses GPU 1's challenges."""

    def __init__(self, coordinator: Coordinator, inventories: dict[Pubkey, Inventory], refuses: str) -> None:
        super().__init__(coordinator, inventories)
        self.workers, self.refuses = coordinator.workers, refuses
        self.named, self.refused = asyncio.Event(), asyncio.Event()  # GPU 0's blocks named; GPU 1 refused

    async def send(self, node_key: Pubkey, message: Any) -> None:
        memory_open = isinstance(message, VerifyOpen) and self.provers[node_key].holds_memory(message.id)
        if self.refuses == "leased" and isinstance(message, Verify | VerifyMemory) and message.gpu == 1:
            ack = Ack(simulated=True, of=message.type, error="GPU 1 is leased: it is verified once it is free",
                      challenge=message.id)  # fmt: skip
            return await self.workers.worker_ack(node_key, ack)
        if self.refuses == "verify_open" and memory_open:
            ack = Ack(simulated=True, of="verify_open", error="the blocks asked for are not at hand")
            return await self.workers.worker_ack(node_key, ack)
        if self.refuses == "verify_memory" and isinstance(message, VerifyMemory) and message.gpu == 1:
            await self.named.wait()
            ack = Ack(simulated=True, of="verify_memory", error="GPU 1 is leased: it is verified once it is free")
            await self.workers.worker_ack(node_key, ack)
            return self.refused.set()
        if self.refuses == "verify_memory" and memory_open:
            self.named.set()
            await self.refused.wait()  # GPU 0 answers after GPU 1's refusal
        await super().send(node_key, message)


async def _verdicts(pool, key: Pubkey) -> list[str]:
    async with pool.acquire() as conn:
        return [r["verdict"] for r in await conn.fetch("SELECT verdict FROM verifications WHERE node_key = $1 "
                                                       "ORDER BY id", str(key))]  # fmt: skip


async def test_one_gpu_counts_once_and_a_refused_share_fails_verification(node, chain, database_url, pool) -> None:
    market = await Market.create(chain)
    inventories = [_inventory("GPU-a", "GPU-b"), _inventory("GPU-a", "GPU-c"), _inventory("GPU-d", "GPU-e")]
    first, second, own = [await market.supplier(2, inventory_hash=inv.hash()) for inv in inventories]
    keys = [s.node_key.pubkey() for s in (first, second, own)]
    settings = Settings(rpc_url=node.url, ws_url=node.ws_url, database_url=database_url,
                        verify_simulated_seconds=0.2, verify_simulated_memory_seconds=0.2)  # fmt: skip
    # not started: only its verification runs (as the leader: its verdicts and slashes are decisions)
    coordinator = await leading_without_loops(Coordinator(settings, pool, market.admin))
    link = _Link(coordinator, dict(zip(keys, inventories, strict=True)))
    coordinator.verification.link = link
    verification, shared = coordinator.verification, coordinator.shared
    try:

        async def judged(key: Pubkey) -> list[str]:
            """The node's verdicts, once its verification has ended (it is then due again later)."""
            await verification.step()
            return await _verdicts(pool, key) if verification.due[key] > time.time() else []

        async def connects(i: int) -> None:  # one at a time: who claims a GPU first is then known
            verification.connected(keys[i], inventories[i])

        # The first node claims GPU-a first and is verified; then the second claims it too.
        await connects(0)
        # Per GPU a compute check and a memory check.
        assert (
            await eventually(lambda: judged(keys[0]), what="the first node judged") == ["passed"] * 4
        )  # compute, memory per GPU
        assert (await fetch(chain, node_pda(keys[0]), "Node")).verification_tier == ix.TIER_SIMULATED
        await connects(1)
        assert await eventually(lambda: judged(keys[1]), what="the second node judged") == ["unfit"]
        assert "GPU-a" in shared.unfit[keys[1]] and "verified with it" in shared.unfit[keys[1]]
        assert keys[0] not in shared.unfit  # the node verified with GPU-a keeps it, and its leases
        async with pool.acquire() as conn:
            fault = await conn.fetchrow("SELECT * FROM faults WHERE node_key = $1", str(keys[1]))
        assert fault["kind"] == "DuplicateGpu" and fault["slash_signature"] is None  # recorded, not slashed
        # The control: a node with its own GPUs is verified.
        await connects(2)
        assert (
            await eventually(lambda: judged(keys[2]), what="the third node judged") == ["passed"] * 4
        )  # compute, memory per GPU
        assert keys[2] not in shared.unfit

        # The third node then refuses a share it could never take: a failed verification at once.
        client = await market.client()
        lease = await market.open_lease(client, 1, gpus=2)
        await market.assign(lease, [(own, 2)])
        await coordinator.indexer.backfill()  # the share in the ledger, as the indexer finds it on chain
        refusal = Ack(simulated=True, of="dispatch", lease=str(lease), error="2 GPUs asked for, 0 free", unable=True)
        # A node speaks for its own shares only: one not on the lease refusing it moves nothing.
        await coordinator.workers.worker_ack(keys[0], refusal)
        assert str(lease) not in shared.failovers and keys[0] not in shared.unfit
        await coordinator.workers.worker_ack(keys[2], refusal)
        assert keys[2] in shared.failovers[str(lease)] and "refused its share" in shared.unfit[keys[2]]
        async with pool.acquire() as conn:
            fault = await conn.fetchrow("SELECT * FROM faults WHERE node_key = $1", str(keys[2]))
        assert (fault["kind"], fault["lease"]) == ("FailedVerification", str(lease)) and fault["slash_signature"]
        slashed = await fetch(chain, node_pda(keys[2]), "Node")
        assert slashed.jailed and slashed.verification_tier == 0  # a failed verification clears the last pass

        # A refusal that says nothing of the node's means (a later job while one runs) is no fault.
        await coordinator.workers.worker_ack(keys[0], Ack(simulated=True, of="dispatch", lease=str(lease),
                                                          error="job 2 may start once job 1 has ended"))  # fmt: skip
        assert keys[0] not in {k for nodes in shared.failovers.values() for k in nodes}
    finally:
        await coordinator.chain.close()
        await coordinator.indexer.rpc.close()


async def test_a_refusal_after_committing_fails_and_one_before_leaves_the_node_unverified(
    node, chain, database_url, pool
) -> None:
    market = await Market.create(chain)
    inventories = [_inventory("GPU-f", "GPU-g"), _inventory("GPU-h", "GPU-i"), _inventory("GPU-j", "GPU-k")]
    cheat, honest, busy = [await market.supplier(2, inventory_hash=inv.hash()) for inv in inventories]
    settings = Settings(rpc_url=node.url, ws_url=node.ws_url, database_url=database_url,
                        verify_simulated_seconds=0.2, verify_simulated_memory_seconds=0.2)  # fmt: skip
    coordinator = await leading_without_loops(Coordinator(settings, pool, market.admin))
    verification = coordinator.verification
    # The busy node holds a 1-GPU lease (in the ledger, as the indexer finds it on chain).
    await market.assign(await market.open_lease(await market.client(), 1, gpus=1), [(busy, 1)])
    await coordinator.indexer.backfill()
    try:
        steps = ("verify_open", "verify_memory", "leased")  # the cheat's refusal; the honest nodes'
        for supplier, inventory, refuses in zip((cheat, honest, busy), inventories, steps, strict=True):
            key = supplier.node_key.pubkey()
            verification.link = _Refusing(coordinator, {key: inventory}, refuses)
            verification.connected(key, inventory)

            async def judged(key: Pubkey = key) -> list[str]:
                await verification.step()
                return await _verdicts(pool, key) if verification.due[key] > time.time() else []

            verdicts = await eventually(judged, what=f"the node refusing {refuses} judged")
            node_account = await fetch(chain, node_pda(key), "Node")
            async with pool.acquire() as conn:
                fault = await conn.fetchrow("SELECT * FROM faults WHERE node_key = $1", str(key))
            if refuses == "verify_open":  # both GPUs' memory checks fail: slashed, jailed
                assert sorted(verdicts) == ["failed", "failed", "passed", "passed"], verdicts
                assert "committed, then refused to answer" in verification.shared.unfit[key]
                assert fault["kind"] == "FailedVerification" and fault["slash_signature"] and node_account.jailed
                continue
            assert fault is None and not node_account.jailed
            if refuses == "verify_memory":  # GPU 1 refused before committing; GPU 0's committed check passes
                assert sorted(verdicts) == ["passed", "passed", "passed", "refused"], verdicts
                assert node_account.verification_tier == 0  # no lease excuses the refusal: unverified
            else:  # the leased GPU's refusal is excused: verified on its free GPU
                assert sorted(verdicts) == ["passed", "passed", "refused"], verdicts
                assert node_account.verification_tier == ix.TIER_SIMULATED
    finally:
        await coordinator.chain.close()
        await coordinator.indexer.rpc.close()


async def test_a_gpu_identity_stays_with_the_node_verified_with_it(pool) -> None:
    """The ledger's rule, on the real database: of two nodes claiming one GPU, the one verified with
    it the latest keeps it; neither verified, neither keeps it."""
    first, second, third = (Pubkey.new_unique() for _ in range(3))
    async with pool.acquire() as conn:
        assert await verifications.claim_identities(conn, first, ["uuid:GPU-x"], 3600) == []
        # neither verified with it: both lose it
        [d] = await verifications.claim_identities(conn, second, ["uuid:GPU-x"], 3600)
        assert (d.identity, d.other, d.holder) == ("uuid:GPU-x", first, "none")
        await verifications.mark_verified(conn, first)
        # the first verified with it: it keeps it against any later claim, seen from either side
        claimed = await verifications.claim_identities(conn, third, ["uuid:GPU-x", "uuid:GPU-y"], 3600)
        assert {d.other: d.holder for d in claimed} == {first: "other", second: "none"}
        holders = {d.other: d.holder for d in await verifications.claim_identities(conn, first, ["uuid:GPU-x"], 3600)}
        assert holders == {second: "this", third: "this"}
        # a later pass of the third with it (the GPU moved while the first was away) makes it the holder
        await verifications.mark_verified(conn, third)
        holders = {d.other: d.holder for d in await verifications.claim_identities(conn, third, ["uuid:GPU-x"], 3600)}
        assert holders == {first: "this", second: "this"}


class _TakenMidCheck(_Link):
    """A worker whose GPUs a placement takes while its memory checks wait for their openings (the
    race): once the blocks are asked for (`named`), it waits for the test to say whether a placement
    took the GPUs (`taken`), then refuses to answer, as a worker whose job now holds the GPU would
    (and as one short of memory could: a refusal there fails)."""

    def __init__(self, coordinator: Coordinator, inventories: dict[Pubkey, Inventory]) -> None:
        super().__init__(coordinator, inventories)
        self.workers = coordinator.workers
        self.named, self.taken = asyncio.Event(), asyncio.Event()

    async def send(self, node_key: Pubkey, message: Any) -> None:
        if isinstance(message, VerifyOpen) and self.provers[node_key].holds_memory(message.id):
            self.named.set()
            await self.taken.wait()
            ack = Ack(simulated=True, of="verify_open", error="GPU 0 is leased", challenge=message.id)
            return await self.workers.worker_ack(node_key, ack)
        await super().send(node_key, message)


async def test_a_placement_taking_a_node_s_gpus_ends_its_verification_without_a_verdict(
    node, chain, database_url, pool
) -> None:
    """Verification yields to placement: the placement that reserves GPUs under challenge ends the
    challenge (no verdict, no fault, no slash), and the node is not challenged again until its worker
    holds what the placement took. The control: the same refusal with no placement fails."""
    market = await Market.create(chain)
    inventories = [_inventory("GPU-l", "GPU-m"), _inventory("GPU-n", "GPU-o")]
    placed, alone = [await market.supplier(2, inventory_hash=inv.hash()) for inv in inventories]
    keys = [s.node_key.pubkey() for s in (placed, alone)]
    settings = Settings(rpc_url=node.url, ws_url=node.ws_url, database_url=database_url,
                        verify_simulated_seconds=0.2, verify_simulated_memory_seconds=0.2)  # fmt: skip
    coordinator = await leading_without_loops(Coordinator(settings, pool, market.admin))
    verification, scheduler = coordinator.verification, coordinator.shared.scheduler
    await coordinator.indexer.backfill()
    try:
        for key, inventory in zip(keys, inventories, strict=True):
            link = verification.link = _TakenMidCheck(coordinator, {key: inventory})
            coordinator.fleet.connected(key, simulated=True)
            verification.connected(key, inventory)
            await verification.step()
            await asyncio.wait_for(link.named.wait(), 30)  # its memory checks wait for their openings
            lease = str(Pubkey.new_unique())
            if key == keys[0]:  # a placement takes the node's GPUs now (its choice and reservation)
                async with pool.acquire() as conn:
                    await coordinator.placement.view.refresh(conn)
                decision = scheduler.place(LeaseRequest(lease, ix.LeaseTerms(1, 80, 2, 0, 10 * IO, 600)))
                assert not isinstance(decision, NotPlaced), decision
                assert list(decision.node_keys) == [key]
                scheduler.reserve(decision)
            link.taken.set()
            await eventually(lambda key=key: truly(key not in verification._running), what="the verification over")
            node_account = await fetch(chain, node_pda(key), "Node")
            async with pool.acquire() as conn:
                fault = await conn.fetchrow("SELECT * FROM faults WHERE node_key = $1", str(key))
            if key == keys[1]:  # the control: no placement, so the refusal after committing fails
                assert "failed" in await _verdicts(pool, key)
                assert fault["kind"] == "FailedVerification" and node_account.jailed
                continue
            assert "failed" not in await _verdicts(pool, key) and fault is None and not node_account.jailed
            # Not challenged again until its worker holds the share (then it refuses the leased GPUs).
            await verification.step()
            assert key not in verification._running
            coordinator.shared.running_checked[key] = frozenset({lease})
            await verification.step()
            assert key in verification._running
            verification.stop()
    finally:
        await coordinator.chain.close()
        await coordinator.indexer.rpc.close()
