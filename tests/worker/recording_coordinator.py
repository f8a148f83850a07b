"""What the coordinator's real gateway (coordinator.gateway) hands the coordinator, recorded: the
coordinator's side of the worker tests that run the real gateway (the double sits at the gateway's
boundary)."""

from __future__ import annotations

import asyncio

from solders.pubkey import Pubkey

from coordinator.gateway import NotRegistered
from gpunet.protocol import Ack, Checkpoint, Heartbeat, Hello, JobLog, JobStatus, UsageReceiptMessage


class Coordinator:
    """Records what the gateway hands the coordinator; admits only the registered node keys."""

    def __init__(self, registered: set[Pubkey]) -> None:
        self.registered = registered
        self.seen: list[object] = []

    async def admit(self, node_key: Pubkey, hello: Hello) -> NotRegistered | None:
        return None if node_key in self.registered else NotRegistered(f"node {node_key} has no Node account")

    async def connected(self, node_key: Pubkey, hello: Hello) -> None:
        self.seen.append(hello)

    async def heartbeat(self, node_key: Pubkey, beat: Heartbeat) -> None:
        self.seen.append(beat)

    async def job_status(self, node_key: Pubkey, status: JobStatus) -> None:
        self.seen.append(status)

    async def job_log(self, node_key: Pubkey, line: JobLog) -> None:
        self.seen.append(line)

    async def usage(self, node_key: Pubkey, receipt: UsageReceiptMessage) -> None:
        self.seen.append(receipt)

    async def worker_ack(self, node_key: Pubkey, ack: Ack) -> None:
        self.seen.append(ack)

    async def checkpoint(self, node_key: Pubkey, checkpoint: Checkpoint) -> None:
        self.seen.append(checkpoint)

    async def disconnected(self, node_key: Pubkey) -> None:
        pass

    def of(self, kind: type) -> list:
        return [m for m in self.seen if isinstance(m, kind)]


async def until(condition, what: str, timeout: float = 60.0):
    async def poll():
        while not (value := condition()):
            await asyncio.sleep(0.05)
        return value

    try:
        return await asyncio.wait_for(poll(), timeout)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None
