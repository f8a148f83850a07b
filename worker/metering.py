"""The GPU-seconds a lease's share of this node is held, as cumulative usage receipts signed with
the node key.

A share is billable from the moment the node takes it (the lease's first dispatch reaching it)
until the coordinator releases it (cancel) or the lease ends (`ends_at`, which a top-up moves),
whether the client's job is running, has finished or has not started: the GPUs are reserved
for the lease all that time. The meter counts held wall time, not a job's run time.

A receipt says: this share (lease, assignment epoch) has been held for `gpu_seconds` GPU-seconds
in all since its assignment, through `through` (whole unix seconds). Each metering tick signs
and journals a new one that supersedes the last (the journal keeps only the newest); the newest
is sent every usage period and when the share is released, so the coordinator settles whenever
it likes, paying the difference to what is settled. Held seconds count `gpus` each, so a receipt
never exceeds wall time x GPUs since the assignment (the program checks the same), nor the
whole seconds the coordinator saw the node online while it holds (the coordinator checks that
on each settlement's increment). A crash loses at most a tick; the time the agent was down is
never counted (a share held again continues from its newest receipt, from the moment it is held).
"""

from __future__ import annotations

import math

from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.signature import Signature

from gpunet.logs import get_logger
from gpunet.protocol import UsageReceiptMessage
from gpunet.usage import Receipt
from worker.journal import Journal

__all__ = ["LeaseMeter", "sign_receipt"]

log = get_logger("gpunet.worker.metering")


def sign_receipt(
    node: Keypair, lease: str, receipt: Receipt, simulated: bool, final: bool = False
) -> UsageReceiptMessage:
    signature = Signature.from_bytes(receipt.signature(Pubkey.from_string(lease), node))
    return UsageReceiptMessage(
        simulated=simulated,
        lease=lease,
        epoch=receipt.epoch,
        gpu_seconds=receipt.gpu_seconds,
        through=receipt.through,
        final=final,
        signature=str(signature),
    )


class LeaseMeter:
    """The held time of one share (lease, assignment epoch) of this node, as signed receipts.

    `hold(now)` when the node takes the share, `tick(now)` every metering tick, `extend(ends_at, now)`
    when the lease's end moves, `release(now)` when the coordinator releases the share (`final`) or
    the agent stops. Each returns the receipts to send now (at most one: the newest)."""

    def __init__(
        self,
        journal: Journal,
        node: Keypair,
        lease: str,
        epoch: int,
        gpus: int,
        period_seconds: int,
        simulated: bool,
        ends_at: int | None = None,
    ) -> None:
        self.journal, self.node, self.lease, self.epoch, self.gpus = journal, node, lease, epoch, gpus
        self.period_seconds, self.simulated, self.ends_at = period_seconds, simulated, ends_at
        newest = journal.newest(lease, epoch)
        # The share's count so far (from the journal after a restart), and the instant it runs through.
        self.gpu_seconds = newest.gpu_seconds if newest else 0
        self.through: int | None = newest.through if newest else None
        self.held = False  # between hold and release
        self.billing = False  # held, and the lease not past its end
        # Since when the share was held without a break up to `through`, and the count then: the
        # count at any instant t in between is anchor + (t - since) x gpus.
        self._since: int | None = None
        self._anchor = self.gpu_seconds
        self._sent_through: int | None = newest.through if newest else None  # the newest receipt sent

    def hold(self, now: float) -> list[UsageReceiptMessage]:
        """The node took the share at `now`: billing starts (unless the lease has ended)."""
        self.held = True
        self._open(now)
        return self.tick(now)

    def extend(self, ends_at: int, now: float) -> list[UsageReceiptMessage]:
        """The lease's end moved to `ends_at`. A share still held past its old end bills again from
        now: the seconds between the old end and this news are not billed."""
        self.ends_at = ends_at
        if self.held and not self.billing:
            self._open(now)
        return self.tick(now)

    def tick(self, now: float) -> list[UsageReceiptMessage]:
        """Counts the held seconds up to `now` (or the lease's end) and signs the receipt; returns
        it when a usage period has passed since the last one sent, or the lease has ended."""
        if not self.billing:
            return []
        t = self._capped(now)
        assert self._since is not None and self.through is not None
        signed = self._sign(t) if t > max(self.through, self._since) else None  # a held second more
        if self.ends_at is not None and t >= self.ends_at:
            self.billing = False  # the lease's end: nothing after it is billed, cancel or not
            return self._send(self.journal.newest(self.lease, self.epoch))
        if signed is not None and (self._sent_through is None or t - self._sent_through >= self.period_seconds):
            return self._send(signed)
        return []

    def release(self, now: float, billing_ended_at: int | None = None, final: bool = True) -> list[UsageReceiptMessage]:
        """The share is released at `now` (billing having ended at `billing_ended_at`, when the lease
        was closed before this news arrived). `final`: the coordinator released it (the agent
        stopping is not final: the share is held again after a restart). The newest receipt is sent;
        a final one runs through the billing end, which may be before receipts already signed."""
        if not self.held:
            return []  # released already (or never held)
        if billing_ended_at is not None:
            self.ends_at = billing_ended_at if self.ends_at is None else min(self.ends_at, billing_ended_at)
        if self.billing:
            t = self._capped(now)
            assert self._since is not None and self.through is not None
            if t > max(self.through, self._since):
                self._sign(t)
        self.held = self.billing = False
        if self.journal.newest(self.lease, self.epoch) is None:
            return []  # not a whole second held: nothing to receipt
        if not final:
            return self._send(self.journal.newest(self.lease, self.epoch))
        end = self.through if self.ends_at is None else min(self.through, self.ends_at)
        if end < self.through:
            if self._since is not None and end >= self._since:
                # billing ended before receipts already signed: the count as of its end
                self.gpu_seconds, self.through = self._anchor + (end - self._since) * self.gpus, end
            else:  # held again after a restart past the end: the count as of the end is unknown
                log.warning("usage.final_unknown", lease=self.lease, epoch=self.epoch, billing_ended_at=end)
        message = sign_receipt(
            self.node, self.lease, Receipt(self.epoch, self.gpu_seconds, self.through), self.simulated, final=True
        )
        self.journal.record_receipt(message)
        return self._send(message)

    # --- internals

    def _capped(self, now: float) -> int:
        t = math.floor(now)
        return t if self.ends_at is None else min(t, self.ends_at)

    def _open(self, now: float) -> None:
        # Whole held seconds only: from the next whole second (the coordinator checks a receipt's
        # increment against the whole seconds it saw the node online).
        start = math.ceil(now)
        if self.through is not None:
            start = max(start, self.through)  # never count a second twice
        if self.ends_at is not None and start >= self.ends_at:
            self.billing = False
            return  # the lease has ended: nothing to bill
        self.billing = True
        self._since, self._anchor = start, self.gpu_seconds
        if self.through is None:  # the count starts here, at zero (nothing to sign yet)
            self.through = self._sent_through = start

    def _sign(self, t: int) -> UsageReceiptMessage:
        assert self._since is not None
        self.gpu_seconds, self.through = self._anchor + max(0, t - self._since) * self.gpus, t
        message = sign_receipt(self.node, self.lease, Receipt(self.epoch, self.gpu_seconds, t), self.simulated)
        self.journal.record_receipt(message)
        return message

    def _send(self, message: UsageReceiptMessage | None) -> list[UsageReceiptMessage]:
        if message is None:
            return []
        self._sent_through = message.through
        return [message]
