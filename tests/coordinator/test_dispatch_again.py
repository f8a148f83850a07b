"""A node asked to be given a lease's job again while a dispatch of it is in flight (the client
sealed it the lease's checkpoint key after the dispatch read the lease's state, before its send
returned) gets it again at the next step: the ask is not lost under the in-flight send. CI once
saw a spare wait for its key until the deadline because the key's ask landed in that window."""

from __future__ import annotations

import asyncio
from typing import Any

from solders.keypair import Keypair

from coordinator.db import jobs
from coordinator.db.leases import ActiveShare
from coordinator.loops.dispatch import Dispatch
from coordinator.scheduler import Scheduler
from coordinator.state import Shared
from gpunet import instructions as ix
from gpunet.protocol import Dispatch as DispatchMessage
from gpunet.protocol import JobSpec

LEASE = str(Keypair().pubkey())


class _Link:
    """The gateway at its boundary: every node online; the first send waits until `release`."""

    def __init__(self) -> None:
        self.sent: list[DispatchMessage] = []
        self.in_flight, self.release = asyncio.Event(), asyncio.Event()

    def online(self, node_key: Any) -> bool:
        return True

    def latency_ms(self, node_key: Any) -> float | None:
        return None

    def host(self, node_key: Any) -> str:
        return "127.0.0.1"

    def cluster_ports(self, node_key: Any) -> None:
        return None

    async def send(self, node_key: Any, message: Any) -> None:
        if not self.sent:
            self.in_flight.set()
            await self.release.wait()
        self.sent.append(message)


def _share(node_key: Any) -> ActiveShare:
    terms = ix.LeaseTerms("H100", 80, 1, 0, 10**9, 3600)
    return ActiveShare(LEASE, node_key, "node", 1, 10**6, None, 1, 0, 1, 1_800_000_000, 3600, 0, terms)


async def _dispatch_with_ask_in_flight(pool, ask: bool) -> list[DispatchMessage]:
    node_key = Keypair().pubkey()
    shared, link = Shared(Scheduler()), _Link()
    dispatch = Dispatch(pool, shared, link, cluster_port=29500)
    job, given = jobs.Job(1, JobSpec(command=["true"]), None), shared.dispatched.setdefault(LEASE, set())

    async def step() -> None:
        async with pool.acquire() as conn:
            await dispatch._dispatch(conn, LEASE, [_share(node_key)], job, shared.dispatched[LEASE])

    first = asyncio.create_task(step())
    await link.in_flight.wait()  # the dispatch read the lease's state (no key yet) and is sending
    if ask:  # what the API's checkpoint-key route does: keep the sealed key, ask for the job again
        async with pool.acquire() as conn:
            await jobs.save_checkpoint_keys(conn, LEASE, {str(node_key): "c2VhbGVk"})
        shared.give_again([node_key], LEASE)
    link.release.set()
    await first
    await step()  # dispatch's next step
    assert given is shared.dispatched[LEASE]
    return link.sent


async def test_an_ask_during_an_in_flight_dispatch_gives_the_job_again_with_what_was_sealed(pool) -> None:
    sent = await _dispatch_with_ask_in_flight(pool, ask=True)
    assert [m.checkpoint_key for m in sent] == [None, "c2VhbGVk"]


async def test_without_an_ask_the_job_is_given_once(pool) -> None:
    """The control: a node given the job is not given it again at the next step."""
    sent = await _dispatch_with_ask_in_flight(pool, ask=False)
    assert [m.checkpoint_key for m in sent] == [None]
