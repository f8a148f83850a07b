"""GPU-seconds per usage period for the time a lease's share of this node is held, signed with
the node key.

A share is billable from the moment the node takes it (the lease's first dispatch reaching it)
until the coordinator releases it (cancel) or the lease ends (`ends_at`, which a top-up moves),
whether the client's job is running, has finished or has not started: the GPUs are reserved
for the lease all that time. The meter counts held wall time, not a job's run time.

Periods are whole unix seconds, at most `period_seconds` long, each starting no earlier than
the previous one ended (the program checks the same), never ending after the lease's end or
after the current time, never empty; GPU-seconds are whole held seconds x GPUs, so never over
wall time x GPUs nor over the whole seconds the coordinator saw the node online. Progress is
journaled every tick, so a crash loses no more than a tick and a restart re-meters nothing.
"""

from __future__ import annotations

import math

from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.signature import Signature

from gpunet.protocol import UsageReportMessage
from gpunet.usage import UsageReport
from worker.journal import Journal, OpenPeriod

__all__ = ["LeaseMeter", "recover_open_periods", "sign_report"]


def sign_report(node: Keypair, lease: str, report: UsageReport, simulated: bool) -> UsageReportMessage:
    signature = Signature.from_bytes(report.signature(Pubkey.from_string(lease), node))
    return UsageReportMessage(
        simulated=simulated,
        lease=lease,
        seq=report.seq,
        period_start=report.period_start,
        period_end=report.period_end,
        gpu_seconds=report.gpu_seconds,
        signature=str(signature),
    )


def _report(
    journal: Journal, node: Keypair, period: OpenPeriod, end: int, simulated: bool
) -> UsageReportMessage | None:
    """Journals the report of `period` closed at `end` (None and a 'closed' record when it billed nothing).
    `period.run_seconds` are the seconds the share was held in it."""
    # Whole seconds only: the coordinator checks a report against the whole seconds it saw the
    # node online, and the wall-time cap guards against clock steps.
    held = min(math.floor(period.run_seconds), end - period.period_start)
    if held <= 0:
        journal.record_closed(period.lease)
        return None
    report = UsageReport(journal.next_seq(period.lease), period.period_start, end, held * period.gpus)
    message = sign_report(node, period.lease, report, simulated)
    journal.record_report(message)
    return message


def recover_open_periods(journal: Journal, node: Keypair, simulated: bool) -> list[UsageReportMessage]:
    """After a restart: close every period left open by the crash at its last journaled instant."""
    reports = []
    for period in list(journal.open_periods.values()):
        if (message := _report(journal, node, period, math.floor(period.until), simulated)) is not None:
            reports.append(message)
    return reports


class LeaseMeter:
    """The held time of one lease's share on this node, cut into signed usage periods.

    `hold(now)` when the node takes the share, `tick(now)` regularly, `extend(ends_at, now)` when
    the lease's end moves, `release(now)` when the coordinator releases the share (or the agent
    stops). Each returns the reports it journaled, to be sent."""

    def __init__(
        self,
        journal: Journal,
        node: Keypair,
        lease: str,
        gpus: int,
        period_seconds: int,
        simulated: bool,
        ends_at: int | None = None,
    ) -> None:
        self.journal, self.node, self.lease, self.gpus = journal, node, lease, gpus
        self.period_seconds, self.simulated, self.ends_at = period_seconds, simulated, ends_at
        self._period: OpenPeriod | None = None  # the open period, as last journaled (None: not billing now)
        self._held_since: float | None = None  # when billing (re)started; None before hold and after release

    def hold(self, now: float) -> list[UsageReportMessage]:
        """The node took the share at `now`: billing starts (unless the lease has ended)."""
        self._open(now)
        return self.tick(now)

    def extend(self, ends_at: int, now: float) -> list[UsageReportMessage]:
        """The lease's end moved to `ends_at`. A share still held past its old end bills again from
        now: the seconds between the old end and this news are not billed."""
        self.ends_at = ends_at
        if self._held_since is not None and self._period is None:
            self._open(now)
        return self.tick(now)

    def tick(self, now: float) -> list[UsageReportMessage]:
        """Closes every period that has ended by `now` (or at the lease's end) and journals progress."""
        reports: list[UsageReportMessage] = []
        t = self._capped(now)
        while self._period is not None and t >= self._period.period_start + self.period_seconds:
            reports += self._close(self._period.period_start + self.period_seconds)
        if self._period is not None and self.ends_at is not None and t >= self.ends_at:
            reports += self._close(self.ends_at)  # the lease's end: nothing after it is billed, cancel or not
        if self._period is not None:
            self._period = self._as_of(t)
            self.journal.record_progress(self._period)
        return reports

    def release(self, now: float, billing_ended_at: int | None = None) -> list[UsageReportMessage]:
        """The share is released at `now` (billing having ended at `billing_ended_at`, when the lease was
        closed before this news arrived): the last, partial period is reported; billing ends."""
        if billing_ended_at is not None:
            self.ends_at = billing_ended_at if self.ends_at is None else min(self.ends_at, billing_ended_at)
        reports = self.tick(now)
        if self._period is not None:
            reports += self._close(math.floor(self._capped(now)))  # never an end in the future
        self._period = self._held_since = None
        return reports

    def _capped(self, now: float) -> float:
        return now if self.ends_at is None else min(now, self.ends_at)

    def _open(self, now: float) -> None:
        # never before the last reported period's end: those seconds are paid already
        start = max(math.floor(now), self.journal.metered_until(self.lease) or 0)
        self._held_since = now
        if self.ends_at is not None and start >= self.ends_at:
            return  # the lease has ended: nothing to bill
        self._period = OpenPeriod(self.lease, self.gpus, start, start, 0.0)

    def _as_of(self, t: float) -> OpenPeriod:
        """The open period with its held seconds counted up to `t` (a clock step back counts nothing)."""
        assert self._period is not None and self._held_since is not None
        p = self._period
        held = max(p.run_seconds, t - max(p.period_start, self._held_since))
        return OpenPeriod(self.lease, self.gpus, p.period_start, max(t, p.until), held)

    def _close(self, end: int) -> list[UsageReportMessage]:
        """Reports the open period up to `end`; the next one starts there while the share is held
        (not at the lease's end)."""
        message = _report(self.journal, self.node, self._as_of(end), end, self.simulated)
        self._period = None
        if self._held_since is not None and (self.ends_at is None or end < self.ends_at):
            self._period = OpenPeriod(self.lease, self.gpus, end, end, 0.0)
        return [message] if message is not None else []
