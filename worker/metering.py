"""GPU-seconds per usage period from a job's actual run time, signed with the node key.

Periods are whole unix seconds, at most `period_seconds` long, each starting no earlier than
the previous one ended (the program checks the same), and GPU-seconds never exceed
wall time x GPUs. Progress is journaled every tick, so a crash loses no metered second and a
restart re-meters none.
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
    return UsageReportMessage(simulated=simulated, lease=lease, seq=report.seq, period_start=report.period_start,
                              period_end=report.period_end, gpu_seconds=report.gpu_seconds, signature=str(signature))


def _report(journal: Journal, node: Keypair, period: OpenPeriod, end: int, run_seconds: float,
            simulated: bool) -> UsageReportMessage | None:
    """Journals the period's report (None and a 'closed' record when nothing ran in it)."""
    # run time can never exceed the period's wall time; the cap guards against clock steps
    gpu_seconds = min(math.floor(run_seconds * period.gpus), (end - period.period_start) * period.gpus)
    if gpu_seconds == 0 or end <= period.period_start:
        journal.record_closed(period.lease)
        return None
    report = UsageReport(journal.next_seq(period.lease), period.period_start, end, gpu_seconds)
    message = sign_report(node, period.lease, report, simulated)
    journal.record_report(message)
    return message


def recover_open_periods(journal: Journal, node: Keypair, simulated: bool) -> list[UsageReportMessage]:
    """After a restart: close every period left open by the crash at its last journaled instant."""
    reports = []
    for period in list(journal.open_periods.values()):
        if (message := _report(journal, node, period, math.ceil(period.until), period.run_seconds, simulated)) is not None:
            reports.append(message)
    return reports


class LeaseMeter:
    """The run time of one lease's job on this node, cut into signed usage periods."""

    def __init__(self, journal: Journal, node: Keypair, lease: str, gpus: int, period_seconds: int, simulated: bool) -> None:
        self.journal, self.node, self.lease, self.gpus = journal, node, lease, gpus
        self.period_seconds, self.simulated = period_seconds, simulated
        self._period: OpenPeriod | None = None  # the open period, as last journaled
        self._running_since: float | None = None

    def start(self, now: float) -> list[UsageReportMessage]:
        """The job (re)started running at `now`."""
        reports = self.tick(now)
        if self._period is None:
            # never before the last reported period's end: those seconds are paid already
            start = max(math.floor(now), self.journal.metered_until(self.lease) or 0)
            self._period = OpenPeriod(self.lease, self.gpus, start, start, 0.0)
        self._running_since = max(now, self._period.period_start)
        self._save(now)
        return reports

    def stop(self, now: float) -> list[UsageReportMessage]:
        """The job stopped running (exited, killed, restarting)."""
        reports = self.tick(now)
        if self._period is not None:
            self._save(now)
        self._running_since = None
        return reports

    def tick(self, now: float) -> list[UsageReportMessage]:
        """Closes every period that has ended by `now` and journals progress on the open one."""
        reports = []
        while self._period is not None and now >= self._period.period_start + self.period_seconds:
            end = self._period.period_start + self.period_seconds
            if (message := _report(self.journal, self.node, self._period, end, self._run_until(end), self.simulated)):
                reports.append(message)
            self._period = None
            if self._running_since is not None:
                self._period = OpenPeriod(self.lease, self.gpus, end, end, 0.0)
                self._running_since = float(end)
        if self._period is not None:
            self._save(now)
        return reports

    def finish(self, now: float) -> list[UsageReportMessage]:
        """The lease's job is over on this node: report the last, partial period."""
        reports = self.stop(now)
        if self._period is not None:
            period, self._period = self._period, None
            if (message := _report(self.journal, self.node, period, math.ceil(period.until), period.run_seconds,
                                   self.simulated)):
                reports.append(message)
        return reports

    def _run_until(self, t: float) -> float:
        assert self._period is not None
        running = max(0.0, t - self._running_since) if self._running_since is not None else 0.0
        return self._period.run_seconds + running

    def _save(self, now: float) -> None:
        assert self._period is not None
        until = max(now, self._period.until)
        self._period = OpenPeriod(self.lease, self.gpus, self._period.period_start, until, self._run_until(now))
        if self._running_since is not None:
            self._running_since = max(now, self._running_since)
        self.journal.record_progress(self._period)
