"""Reserved GPUs are billed for the time they are reserved, not for the time a job runs: the real
coordinator, gpunet-localnet and a `gpunet worker run` process with simulated GPUs.

A client's lease runs a job that exits at once; the node keeps holding the GPUs, and usage is
settled on chain for the whole reserved time (not the job's zero seconds) up to the lease's end,
which a top-up moves, and never after it. A second job, submitted through the API once the first
has ended with `gpunet lease job` (as a client runs it), runs on the same GPUs; a third while the
second runs is refused.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from gpunet import instructions as ix
from gpunet.accounts import fetch
from gpunet.client import send_and_confirm
from gpunet.jobs import job_view
from gpunet.keys import create_keypair_file
from gpunet.pda import lease_pda, node_pda
from gpunet.protocol import JobSpec

from .conftest import eventually
from .world import PRICE, World, closed, live_settings, running, settlement_events, start_worker, submitted, truly

GPUS, DURATION, TOP_UP = 2, 40, 6
GPUNET = str(Path(sys.executable).with_name("gpunet"))


async def _lease_job(
    api: str, rpc: str, keyfile: Path, lease: Pubkey, command: str
) -> subprocess.CompletedProcess[str]:
    """`gpunet lease job` as a client runs it."""
    return await asyncio.to_thread(
        subprocess.run,
        [
            *(GPUNET, "lease", "job", str(lease), "--command", command),
            *("--coordinator", api, "--url", rpc, "-k", str(keyfile), "--json"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def _job_state(api: str, client: Keypair, lease: Pubkey, number: int) -> str | None:
    view = await job_view(api, client, lease)
    states = [n["state"] for n in view["nodes"]]
    return states[0] if view["job_number"] == number and len(states) == 1 else None


async def _lines(api: str, client: Keypair, lease: Pubkey) -> list[tuple[int, str]]:
    return [(line["job_number"], line["line"]) for line in (await job_view(api, client, lease))["logs"]]


async def _settled_gpu_seconds(chain, lease: Pubkey) -> int:
    return sum(e.gpu_seconds for e in await settlement_events(chain, lease))


@pytest.mark.timeout(300)
async def test_a_lease_pays_for_its_reserved_gpus_whether_or_not_a_job_runs(
    node, chain, pool, database_url, tmp_path
) -> None:
    world = await World().build(chain, tmp_path)
    rpc = node.url  # `lease job` checks the chain before it seals the checkpoint key
    settings = live_settings(
        node,
        database_url,
        settle_seconds=1,
        settle_interval_seconds=0,  # every receipt as it comes (production: hourly)
        settle_min_amount=0,
        close_grace_seconds=4,
    )
    api = f"http://127.0.0.1:{settings.api_port}"
    async with running(settings, pool, world.admin) as coordinator:
        worker = start_worker(world, 0, coordinator.gateway.url, tmp_path / "worker0.log")  # the only node online
        try:
            await eventually(lambda: truly(len(coordinator.gateway.sessions) == 1), what="the worker connected")
            lease = lease_pda(world.client.pubkey(), 1)
            await send_and_confirm(
                chain,
                world.client,
                [
                    ix.open_lease(
                        world.client.pubkey(),
                        world.client_tokens,
                        world.mint,
                        1,
                        ix.LeaseTerms(1, 80, GPUS, 0, 2 * PRICE, DURATION),
                    )
                ],
            )
            first = JobSpec(command=["sh", "-c", "echo first job on $CUDA_VISIBLE_DEVICES"])
            await eventually(lambda: submitted(api, world.client, lease, first), what="job 1 accepted")
            await eventually(lambda: _succeeded(api, world.client, lease, 1), what="job 1 exited")
            started = (await fetch(chain, lease, "Lease")).started_at

            # Nothing runs, yet the GPUs are reserved: whole periods are settled on chain.
            await eventually(
                lambda: _at_least(chain, lease, 3 * 3 * GPUS),
                timeout=60,
                what="three periods' GPU-seconds settled after the job exited",
            )

            # The lease's next job runs on the same GPUs; a third while it runs is refused.
            keyfile = tmp_path / "client.json"
            create_keypair_file(keyfile, world.client)
            second = await _lease_job(
                api, node.url, keyfile, lease, "sh -c 'echo second job on $CUDA_VISIBLE_DEVICES; sleep 8'"
            )
            assert second.returncode == 0, second.stderr
            node = str(world.node_keys()[0])
            # the lease's checkpoint key goes to its node with the job (job 1 came through the SDK)
            assert json.loads(second.stdout) == {
                "lease": str(lease),
                "job_number": 2,
                "accepted": True,
                "checkpoint_key_sealed_to": [node],
            }
            await eventually(lambda: _running(api, world.client, lease, 2), what="job 2 running")
            third = await _lease_job(api, rpc, keyfile, lease, "true")
            refusal = json.loads(third.stdout)["error"]
            assert third.returncode == 1 and "(409): job 2 of lease" in refusal and "is still running" in refusal
            assert (await job_view(api, world.client, lease))["job_number"] == 2
            await eventually(lambda: _succeeded(api, world.client, lease, 2), what="job 2 exited")
            lines = await _lines(api, world.client, lease)
            [(_, one)] = [x for x in lines if x[0] == 1]
            [(_, two)] = [x for x in lines if x[0] == 2]
            assert one.startswith("first job on ") and two == "second job on " + one.removeprefix("first job on ")

            # A top-up moves the end: the node is told, and bills until the new end.
            await send_and_confirm(
                chain, world.client, [ix.top_up_lease(world.client.pubkey(), world.client_tokens, lease, TOP_UP)]
            )
            await eventually(lambda: closed(chain, lease), timeout=120, what="the lease closed by the coordinator")
        finally:
            worker.send_signal(signal.SIGTERM)
            try:
                worker.wait(timeout=30)
            except subprocess.TimeoutExpired:
                worker.kill()

    ends_at = started + DURATION + TOP_UP
    settled = await settlement_events(chain, lease)
    assert settled and all(e.through <= ends_at for e in settled)  # nothing after the lease's end
    assert max(e.through for e in settled) == ends_at  # ...and up to it, the top-up included
    gpu_seconds = sum(e.gpu_seconds for e in settled)
    # the whole reserved time x GPUs, less the part-second before the first dispatch reached the node
    assert (DURATION + TOP_UP - 3) * GPUS <= gpu_seconds <= (DURATION + TOP_UP) * GPUS, gpu_seconds
    assert {str(e.node) for e in settled} == {str(node_pda(Pubkey.from_string(world.node_keys()[0])))}
    final = await fetch(chain, lease, "Lease")
    assert final.deposited == final.paid + final.fees + final.refunded
    assert final.paid + final.fees == sum(e.payout + e.fee for e in settled) == gpu_seconds * PRICE // 3600


async def _at_least(chain, lease: Pubkey, gpu_seconds: int) -> bool:
    return await _settled_gpu_seconds(chain, lease) >= gpu_seconds


async def _running(api: str, client: Keypair, lease: Pubkey, number: int) -> bool:
    return await _job_state(api, client, lease, number) == "running"


async def _succeeded(api: str, client: Keypair, lease: Pubkey, number: int) -> bool:
    return await _job_state(api, client, lease, number) == "succeeded"
