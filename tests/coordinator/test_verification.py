"""GPU verification with real processes (gpunet-localnet, PostgreSQL, the coordinator, four
workers with simulated H100s) on a cluster that requires verified nodes: the honest node passes
both checks of each GPU and is recorded verified on chain; a node whose GPUs are slower than the
H100s it registered misses the compute check's deadline, and one whose GPUs hold an eighth of an
H100's memory fails the memory check: each is slashed and jailed with its evidence; a node whose
machine is not what it registered is unfit (no slash, no lease); a lease is placed on the verified
node only, and waits, saying why, while none is; the evidence is served."""

from __future__ import annotations

import json
import re
import sys
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from solders.pubkey import Pubkey

from coordinator.settings import Settings
from gpunet import instructions as ix
from gpunet.accounts import fetch
from gpunet.client import send_and_confirm
from gpunet.jobs import job_view, node_verifications
from gpunet.pda import lease_pda, node_pda
from gpunet.protocol import JobSpec

from .conftest import eventually
from .world import JOB, PRICE, World, live_settings, placed_view, running, start_worker, submitted


def _settings(node, database_url: str) -> Settings:
    return live_settings(
        node,
        database_url,
        lost_after_seconds=5.0,
        settle_seconds=1,
        settle_interval_seconds=0,  # every receipt as it comes (production: hourly)
        settle_min_amount=0,
        reconnect_grace_seconds=2,
        verify_simulated_seconds=3.0,  # long enough to see the lease wait for it
        # A node with an eighth of its memory answers in 3 s or more (the deadline is 1 s).
        verify_simulated_memory_seconds=8.0,
    )


async def _verdicts(pool, node_key: Pubkey) -> list[tuple[str, str]]:
    async with pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT verdict, reason FROM verifications WHERE node_key = $1 ORDER BY id", str(node_key)
        )
    return [(r["verdict"], r["reason"]) for r in rows]


async def _slashed_fault(pool, node_key: Pubkey):
    """The node's fault once its slash's signature is recorded (the chain shows the jail a moment before)."""

    async def recorded():
        async with pool.acquire() as conn:
            fault = await conn.fetchrow("SELECT * FROM faults WHERE node_key = $1", str(node_key))
        return fault if fault is not None and fault["slash_signature"] else None

    return await eventually(recorded, timeout=30, what="the slash's signature recorded")


@pytest.mark.timeout(300)
async def test_only_nodes_whose_gpus_prove_what_was_registered_are_verified_and_get_leases(
    node, chain, database_url, pool, tmp_path, spawned
) -> None:
    # node 0 honest; node 1 registered 2 H100s but its GPUs answer 4x slower; node 2 registered one
    # H100 while its machine has two; node 3's GPUs hold an eighth of an H100's VRAM.
    world = await World().build(chain, tmp_path, min_verification_tier=ix.TIER_SIMULATED, inventories=[2, 2, 1, 2])
    honest, slow, misregistered, short = (k.pubkey() for _, k in world.suppliers)
    settings = _settings(node, database_url)
    api = f"http://127.0.0.1:{settings.api_port}"

    # A lease opened before any node is verified waits, and says why.
    lease = lease_pda(world.client.pubkey(), 1)
    terms = ix.LeaseTerms(1, 80, 2, 0, 2 * PRICE, 600)
    await send_and_confirm(
        chain, world.client, [ix.open_lease(world.client.pubkey(), world.client_tokens, world.mint, 1, terms)]
    )
    async with running(settings, pool, world.admin) as coordinator:
        spec = JobSpec(command=[sys.executable, JOB], env={"STEPS": "100000", "STEP_SECONDS": "0.2"})
        await eventually(lambda: submitted(api, world.client, lease, spec), what="the job accepted")
        gateway = coordinator.gateway.url
        lies = ({}, {"GPUNET_WORKER_SIMULATE_SLOWDOWN": "4"}, {}, {"GPUNET_WORKER_SIMULATE_VRAM_SHARE": "0.125"})
        for i, env in enumerate(lies):
            spawned.append(start_worker(world, i, gateway, tmp_path / f"worker{i}.log", env))

        async def waits_for_verification() -> bool:
            placement = (await job_view(api, world.client, lease))["placement"]
            return placement["state"] == "waiting" and "not verified" in placement["reason"]

        await eventually(waits_for_verification, timeout=30, what="the lease waiting for verified nodes")

        async def verified(key: Pubkey) -> bool:
            n = await fetch(chain, node_pda(key), "Node")
            return n.verification_tier == ix.TIER_SIMULATED and n.verified_until > time.time()

        await eventually(lambda: verified(honest), timeout=90, what="the honest node verified on chain")
        assert [v for v, _ in await _verdicts(pool, honest)] == ["passed"] * 4  # a compute and a memory check per GPU

        # The slower node: past the deadline, slashed with the evidence, jailed; its verification is none.
        async def jailed(key: Pubkey) -> bool:
            return (await fetch(chain, node_pda(key), "Node")).jailed

        await eventually(lambda: jailed(slow), timeout=90, what="the slow node slashed")
        failed = await _verdicts(pool, slow)
        assert failed[-1][0] == "failed" and "missed the deadline" in failed[-1][1]
        fault = await _slashed_fault(pool, slow)
        assert fault["kind"] == "FailedVerification"
        assert (await fetch(chain, node_pda(slow), "Node")).verification_tier == 0

        # The node short of memory: its compute check passes, its memory check's answer comes too late.
        await eventually(lambda: jailed(short), timeout=90, what="the node short of memory slashed")
        failed = await _verdicts(pool, short)
        # Its GPUs are checked at once: each passes its compute check, and each memory check fails.
        assert [v for v, _ in failed] == ["passed", "passed", "failed", "failed"], failed
        assert all(re.match(r"GPU [01] memory check: .*deadline", reason) for _, reason in failed[2:]), failed
        fault = await _slashed_fault(pool, short)
        assert fault["kind"] == "FailedVerification"
        assert json.loads(fault["evidence"])["challenges"][0]["kind"] == "memory"

        # The misregistered node: unfit, not slashed (the supplier fixes the registration or the machine).
        async def unfit(key: Pubkey) -> list:
            return [r for v, r in await _verdicts(pool, key) if v == "unfit"]

        reasons = await eventually(lambda: unfit(misregistered), timeout=60, what="the misregistered node found unfit")
        assert "differ from its registration" in reasons[0]
        assert not await jailed(misregistered)

        # The lease goes to the verified node alone.
        view = await eventually(lambda: placed_view(api, world.client, lease), timeout=60, what="the lease placed")
        assert view["placement"]["nodes"] == [str(honest)]  # not the node short of memory

        # Anyone can read the evidence, by node key or node account.
        evidence = await node_verifications(api, node_pda(slow))
        assert evidence["node_key"] == str(slow) and evidence["items"][0]["verdict"] == "failed"
        latest = evidence["items"][0]
        assert latest["committed_seconds"] is None or latest["committed_seconds"] > latest["deadline_seconds"]
        assert latest["seed"] and latest["products"] >= 1 and latest["model"] == "H100" and latest["simulated"]
        memory = (await node_verifications(api, node_pda(short)))["items"][0]
        assert (memory["kind"], memory["verdict"]) == ("memory", "failed") and memory["lanes"] and memory["blocks"]
        assert memory["answered_seconds"] is None and memory["answer_deadline_seconds"] == 1.0
        assert memory["committed_seconds"] < memory["deadline_seconds"]  # it filled in time, then could not answer
        async with httpx.AsyncClient() as http:
            missing = await http.get(f"{api}/nodes/{Pubkey.new_unique()}/verifications")
        assert missing.status_code == 404

        # /metrics counts the verdicts as the ledger records them.
        async def verdicts_counted() -> bool:
            async with pool.acquire() as conn:
                recorded = {
                    r["verdict"]: r["n"]
                    for r in await conn.fetch("SELECT verdict, count(*) AS n FROM verifications GROUP BY verdict")
                }
            async with httpx.AsyncClient() as http:
                text = (await http.get(f"{api}/metrics")).text
            counted = {
                s.labels["verdict"]: s.value
                for f in text_string_to_metric_families(text)
                for s in f.samples
                if s.name == "gpunet_coordinator_verifications_total"
            }
            return counted == recorded and recorded.keys() >= {"passed", "failed", "unfit"}

        await eventually(verdicts_counted, what="the verdicts counted in /metrics")
