"""The worker's append-only usage journal: every signed report, every acknowledgement, and the
metering progress of each open usage period, fsynced before anything is sent.

One JSON object per line (JSONL). After a crash the journal is the truth: reports without an
ack are sent again; the last metered instant of each lease (its last report's period_end, or
the progress of its open period) keeps a restart from metering the same seconds twice.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpunet.protocol import UsageReportMessage

__all__ = ["Journal", "JournalError", "OpenPeriod"]


class JournalError(RuntimeError):
    """The journal file is damaged beyond a torn last line; the message names the line."""


@dataclass(frozen=True)
class OpenPeriod:
    """A usage period being metered: the seconds the share was held in it so far (`run_seconds`,
    the journal's name for them), as of `until` (unix seconds)."""

    lease: str
    gpus: int
    period_start: int
    until: float
    run_seconds: float


def _progress(period: OpenPeriod) -> dict[str, Any]:
    return {
        "kind": "progress",
        "lease": period.lease,
        "gpus": period.gpus,
        "period_start": period.period_start,
        "until": period.until,
        "run_seconds": period.run_seconds,
    }


class Journal:
    """The agent's journal (`read_only=False`: one writer, which repairs a torn tail and compacts
    superseded progress records at open), or a reader's view of it (`gpunet worker status`)."""

    def __init__(self, path: Path, read_only: bool = False) -> None:
        self.path = path
        self.reports: dict[tuple[str, int], UsageReportMessage] = {}
        self.acked: set[tuple[str, int]] = set()
        self.open_periods: dict[str, OpenPeriod] = {}
        self._superseded = 0  # progress/closed records that no longer say anything
        if read_only:
            self._load(repair=False)
            self._file = None
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        self._load(repair=True)
        if self._superseded:
            self._compact()
        self._file = open(path, "a", encoding="utf-8")

    def _compact(self) -> None:
        """Rewrites the journal with only what its state needs; atomic (rename) and durable (fsync)."""
        records: list[dict[str, Any]] = [
            {"kind": "report", "message": m.model_dump(mode="json")} for _, m in sorted(self.reports.items())
        ]
        records += [{"kind": "ack", "lease": lease, "seq": seq} for lease, seq in sorted(self.acked)]
        records += [_progress(p) for p in self.open_periods.values()]
        tmp = self.path.with_suffix(".compact")
        with open(tmp, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(r, separators=(",", ":")) + "\n" for r in records)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        directory = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)

    def _load(self, repair: bool) -> None:
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        lines = data.split(b"\n")
        good = 0  # bytes of whole, parsed records
        for number, line in enumerate(lines, 1):
            if not line:
                good += 1
                continue
            try:
                self._apply(json.loads(line))
            except (ValueError, KeyError) as e:
                if number == len(lines):
                    break  # a torn last write (killed mid-append): it was never fsynced, so never sent
                raise JournalError(f"{self.path}:{number}: damaged journal record ({e})") from None
            good += len(line) + 1
        if good < len(data) and repair:
            with open(self.path, "r+b") as f:
                f.truncate(good)

    def _apply(self, record: dict[str, Any]) -> None:
        kind = record["kind"]
        if kind == "report":
            message = UsageReportMessage.model_validate(record["message"])
            self.reports[(message.lease, message.seq)] = message
            self._superseded += self.open_periods.pop(message.lease, None) is not None
        elif kind == "ack":
            self.acked.add((record["lease"], record["seq"]))
        elif kind == "progress":
            period = OpenPeriod(
                record["lease"], record["gpus"], record["period_start"], record["until"], record["run_seconds"]
            )
            self._superseded += period.lease in self.open_periods
            self.open_periods[period.lease] = period
        elif kind == "closed":
            self._superseded += 1
            self.open_periods.pop(record["lease"], None)
        else:
            raise ValueError(f"unknown record kind {kind!r}")

    def _append(self, record: dict[str, Any]) -> None:
        if self._file is None:
            raise RuntimeError("this journal was opened read-only")
        self._apply(record)
        self._file.write(json.dumps(record, separators=(",", ":")) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        if self._file is not None and not self._file.closed:
            self._file.close()

    # --- writes

    def record_report(self, message: UsageReportMessage) -> None:
        """Before the report is sent: once this returns it survives a crash."""
        self._append({"kind": "report", "message": message.model_dump(mode="json")})

    def record_ack(self, lease: str, seq: int) -> bool:
        """False (and nothing written) for a report this worker never made or already acked."""
        if (lease, seq) not in self.reports:
            return False
        if (lease, seq) not in self.acked:
            self._append({"kind": "ack", "lease": lease, "seq": seq})
        return True

    def record_progress(self, period: OpenPeriod) -> None:
        self._append(_progress(period))

    def record_closed(self, lease: str) -> None:
        """An open period ended with nothing to report."""
        self._append({"kind": "closed", "lease": lease})

    # --- reads

    def next_seq(self, lease: str) -> int:
        return max((seq for (key, seq) in self.reports if key == lease), default=0) + 1

    def metered_until(self, lease: str) -> int | None:
        """The end of the last reported period of `lease`: no later report may start before it."""
        ends = [m.period_end for (key, _), m in self.reports.items() if key == lease]
        return max(ends) if ends else None

    def unacked(self) -> list[UsageReportMessage]:
        return [m for key, m in sorted(self.reports.items()) if key not in self.acked]

    def leases(self) -> list[str]:
        return sorted({lease for lease, _ in self.reports} | set(self.open_periods))
