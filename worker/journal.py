"""The worker's usage journal: the newest signed receipt of each share and whether the coordinator
acknowledged it, fsynced before anything is sent.

One JSON object per line (JSONL), appended. A receipt is cumulative, so it supersedes every
receipt of its share before it: the journal's state is one receipt per share, however long the
lease. Superseded lines are compacted away (at open, and whenever they outnumber the live ones by
`COMPACT_AFTER`), so the file stays small too. A share whose final receipt was acknowledged is
done and dropped at compaction. After a crash the journal is the truth: an unacknowledged receipt
is sent again, and a share held again continues from its newest receipt (never counting a second
twice, nor the time the agent was down).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from gpunet.protocol import UsageReceiptMessage

__all__ = ["COMPACT_AFTER", "Journal", "JournalError", "ShareKey"]

COMPACT_AFTER = 1_000  # superseded lines tolerated before the file is rewritten

ShareKey = tuple[str, int]
"""(lease, assignment epoch): one share of one lease on this node."""


class JournalError(RuntimeError):
    """The journal file is damaged beyond a torn last line; the message names the line."""


def _key(message: UsageReceiptMessage) -> ShareKey:
    return (message.lease, message.epoch)


def _same(message: UsageReceiptMessage, gpu_seconds: int, through: int) -> bool:
    return (message.gpu_seconds, message.through) == (gpu_seconds, through)


class Journal:
    """The agent's journal (`read_only=False`: one writer, which repairs a torn tail and compacts
    superseded records), or a reader's view of it (`gpunet worker status`)."""

    def __init__(self, path: Path, read_only: bool = False) -> None:
        self.path = path
        self.receipts: dict[ShareKey, UsageReceiptMessage] = {}  # the newest of each share
        self.acked: set[ShareKey] = set()  # shares whose newest receipt the coordinator recorded
        self._superseded = 0  # lines that no longer say anything
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
        """Rewrites the journal with only what its state needs; atomic (rename) and durable (fsync).
        Shares whose final receipt was acknowledged are done: they are left out."""
        done = [key for key, m in self.receipts.items() if m.final and key in self.acked]
        for key in done:
            del self.receipts[key]
            self.acked.discard(key)
        records: list[dict[str, Any]] = []
        for key, m in sorted(self.receipts.items()):
            records.append({"kind": "receipt", "message": m.model_dump(mode="json")})
            if key in self.acked:
                records.append(_ack(m))
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
        self._superseded = 0

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
        if kind == "receipt":
            message = UsageReceiptMessage.model_validate(record["message"])
            key = _key(message)
            if key in self.receipts:
                self._superseded += 1 + (key in self.acked)  # the receipt, and its ack if any
            self.receipts[key] = message
            self.acked.discard(key)
        elif kind == "ack":
            key = (record["lease"], record["epoch"])
            newest = self.receipts.get(key)
            if newest is not None and _same(newest, record["gpu_seconds"], record["through"]):
                self.acked.add(key)
            else:
                self._superseded += 1  # an ack of a receipt superseded before it came
        else:
            raise ValueError(f"unknown record kind {kind!r}")

    def _append(self, record: dict[str, Any]) -> None:
        if self._file is None:
            raise RuntimeError("this journal was opened read-only")
        self._apply(record)
        self._file.write(json.dumps(record, separators=(",", ":")) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())
        if self._superseded > max(COMPACT_AFTER, len(self.receipts)):
            self._file.close()
            self._compact()
            self._file = open(self.path, "a", encoding="utf-8")

    def close(self) -> None:
        if self._file is not None and not self._file.closed:
            self._file.close()

    # --- writes

    def record_receipt(self, message: UsageReceiptMessage) -> None:
        """Before the receipt is sent: once this returns it survives a crash, and it supersedes
        the share's receipts before it."""
        self._append({"kind": "receipt", "message": message.model_dump(mode="json")})

    def record_ack(self, lease: str, epoch: int, gpu_seconds: int, through: int) -> bool:
        """False (and nothing written) for a receipt this worker never made; an ack of a receipt
        since superseded is true and changes nothing (the newer one is still to be acknowledged)."""
        newest = self.receipts.get((lease, epoch))
        if newest is None or ((gpu_seconds, through) > (newest.gpu_seconds, newest.through) and not newest.final):
            return False
        if _same(newest, gpu_seconds, through) and (lease, epoch) not in self.acked:
            self._append(
                {"kind": "ack", "lease": lease, "epoch": epoch, "gpu_seconds": gpu_seconds, "through": through}
            )
        return True

    # --- reads

    def newest(self, lease: str, epoch: int) -> UsageReceiptMessage | None:
        """The share's newest receipt: a share held again continues from it."""
        return self.receipts.get((lease, epoch))

    def unacked(self) -> list[UsageReceiptMessage]:
        return [m for key, m in sorted(self.receipts.items()) if key not in self.acked]

    def leases(self) -> list[str]:
        return sorted({lease for lease, _ in self.receipts})

    def size(self) -> int:
        """Bytes on disk."""
        return self.path.stat().st_size if self.path.exists() else 0


def _ack(m: UsageReceiptMessage) -> dict[str, Any]:
    return {"kind": "ack", "lease": m.lease, "epoch": m.epoch, "gpu_seconds": m.gpu_seconds, "through": m.through}
