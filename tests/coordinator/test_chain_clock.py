"""The chain's clock, not the coordinator's, bounds a receipt's `through`: on a node whose clock
lags the wall clock (a block every 2.5 s here; on a real cluster the latest block's time), a
receipt through a second the wall clock has reached and the chain's has not waits for the chain
(never a transaction the program refuses with BadPeriod, nor a refused receipt), and settles once
the chain's clock reaches it."""

from __future__ import annotations

import asyncio
import time

import pytest

from coordinator.settlement import Settler, Status
from gpunet.accounts import chain_clock, fetch

from .chain import Cluster

SLOT_MS = 2_500


@pytest.fixture
def node(start_node):
    return start_node(slot_ms=SLOT_MS)  # the chain's clock moves once a block, up to 2.5 s behind


async def test_a_receipt_ahead_of_the_chain_s_clock_waits_for_it_and_then_settles(chain) -> None:
    cluster = await Cluster().build(chain)
    settler = Settler(cluster.client, cluster.admin)
    # A moment when the wall clock has passed a second the chain's clock has not reached yet.
    while True:
        through = int(time.time())
        if through > cluster.started and await chain_clock(chain) < through:
            break
        await asyncio.sleep(0.1)
    ahead = cluster.receipt(0, 0, through=through)
    [waiting] = await settler.settle([ahead])
    assert waiting.status is Status.WAITING and "chain's clock" in waiting.reason, waiting
    lease = await fetch(chain, cluster.lease, "Lease")
    assert [a.receipt_gpu_seconds for a in list(lease.assignments)[:2]] == [0, 0]

    # The control: once the chain's clock reaches it, the same receipt settles, all of it paid.
    while await chain_clock(chain) < through:
        await asyncio.sleep(0.2)
    [settled] = await settler.settle([ahead])
    assert settled.status is Status.SETTLED, settled
    assert settled.gpu_seconds == ahead.receipt.gpu_seconds == (through - cluster.started) * 2
