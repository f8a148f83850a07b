"""Usage metering and the journal: periods from run time, signed reports, crash recovery,
and no second metered twice."""

from __future__ import annotations

from pathlib import Path

import pytest
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from worker.journal import Journal, JournalError
from worker.metering import LeaseMeter, recover_open_periods

LEASE = str(Pubkey.new_unique())


@pytest.fixture
def open_journal():
    """Journal(path), closed at teardown (a still-open journal means a leaked file)."""
    opened: list[Journal] = []

    def open_(path: Path) -> Journal:
        opened.append(Journal(path))
        return opened[-1]

    yield open_
    for journal in opened:
        journal.close()


def meter(journal: Journal, node: Keypair, gpus: int = 2, period: int = 10) -> LeaseMeter:
    return LeaseMeter(journal, node, LEASE, gpus, period, simulated=True)


def test_periods_from_run_time_signed_by_the_node(tmp_path: Path, open_journal) -> None:
    node = Keypair()
    journal = open_journal(tmp_path / "usage.jsonl")
    m = meter(journal, node)
    assert m.start(1000.4) == []
    assert m.tick(1005.0) == []
    [first] = m.tick(1010.0)
    assert (first.seq, first.period_start, first.period_end, first.gpu_seconds) == (1, 1000, 1010, 19)  # 9.6 s x 2 GPUs
    assert first.simulated and first.verify(node.pubkey()) and not first.verify(Keypair().pubkey())
    assert m.stop(1013.5) == []  # 3.5 s run in the next period
    assert m.start(1016.0) == []
    [second] = m.tick(1020.5)
    assert (second.seq, second.period_start, second.period_end, second.gpu_seconds) == (2, 1010, 1020, 15)  # (3.5 + 4) x 2
    [last] = m.finish(1022.2)
    assert (last.seq, last.period_start, last.period_end, last.gpu_seconds) == (3, 1020, 1023, 4)  # 2.2 s x 2
    assert [r.seq for r in journal.unacked()] == [1, 2, 3]


def test_a_period_with_no_run_time_is_not_reported(tmp_path: Path, open_journal) -> None:
    journal = open_journal(tmp_path / "usage.jsonl")
    m = meter(journal, Keypair())
    m.start(1000.0)
    m.stop(1000.0)
    assert m.tick(1030.0) == [] and m.finish(1031.0) == []
    assert journal.reports == {} and journal.open_periods == {}


def test_acks_are_journaled_and_unknown_acks_refused(tmp_path: Path, open_journal) -> None:
    path = tmp_path / "usage.jsonl"
    journal = open_journal(path)
    m = meter(journal, Keypair(), period=2)
    m.start(100.0)
    reports = m.tick(106.0)
    assert [r.seq for r in reports] == [1, 2, 3]
    assert journal.record_ack(LEASE, 2) and journal.record_ack(LEASE, 2)
    assert not journal.record_ack(LEASE, 9) and not journal.record_ack(str(Pubkey.new_unique()), 1)
    journal.close()
    again = open_journal(path)
    assert [r.seq for r in again.unacked()] == [1, 3]
    assert again.next_seq(LEASE) == 4


def test_a_crash_closes_the_open_period_at_its_last_journaled_instant_and_never_re_meters(tmp_path: Path, open_journal) -> None:
    path, node = tmp_path / "usage.jsonl", Keypair()
    journal = open_journal(path)
    m = meter(journal, node)
    m.start(1000.0)
    [_first] = m.tick(1010.0)
    m.tick(1014.3)  # 4.3 s into period 2, journaled; then the agent is killed
    journal.close()

    journal = open_journal(path)  # restart
    [recovered] = recover_open_periods(journal, node, simulated=True)
    assert (recovered.seq, recovered.period_start, recovered.period_end, recovered.gpu_seconds) == (2, 1010, 1015, 8)
    assert recover_open_periods(journal, node, simulated=True) == []  # closed once, for good
    # the job is dispatched again right away: metering resumes after what was reported
    m = meter(journal, node)
    m.start(1014.8)
    [third] = m.tick(1025.0)
    assert (third.seq, third.period_start, third.period_end) == (3, 1015, 1025)
    assert third.gpu_seconds == 20
    assert [r.seq for r in journal.unacked()] == [1, 2, 3]


def test_a_torn_last_line_is_dropped_and_other_damage_refused(tmp_path: Path, open_journal) -> None:
    path = tmp_path / "usage.jsonl"
    journal = open_journal(path)
    m = meter(journal, Keypair(), period=2)
    m.start(100.0)
    m.tick(102.0)
    journal.close()
    with open(path, "ab") as f:
        f.write(b'{"kind":"ack","lea')  # killed mid-write
    assert [r.seq for r in open_journal(path).unacked()] == [1]
    assert path.read_bytes().endswith(b"}\n")  # truncated back to whole records
    lines = path.read_bytes().split(b"\n")
    lines[0] = b"garbage"
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(JournalError, match=r"usage.jsonl:1: damaged"):
        open_journal(path)


def test_the_writer_compacts_superseded_progress_and_keeps_every_fact(tmp_path: Path, open_journal) -> None:
    path, node = tmp_path / "usage.jsonl", Keypair()
    journal = open_journal(path)
    m = meter(journal, node, period=10)
    m.start(1000.0)
    for i in range(1, 100):
        m.tick(1000.0 + i * 0.25)  # 2 reports and many progress records
    journal.record_ack(LEASE, 2)
    journal.close()
    lines_before = path.read_bytes().count(b"\n")

    again = open_journal(path)
    assert path.read_bytes().count(b"\n") == 2 + 1 + 1 < lines_before  # 2 reports, the ack, the open period
    assert again.reports == journal.reports and again.acked == journal.acked
    assert again.open_periods == journal.open_periods and again.next_seq(LEASE) == 3
    assert not (tmp_path / "usage.compact").exists()


def test_a_reader_never_repairs_or_writes(tmp_path: Path, open_journal) -> None:
    path = tmp_path / "usage.jsonl"
    journal = open_journal(path)
    meter(journal, Keypair(), period=2).start(100.0)
    journal.close()
    with open(path, "ab") as f:
        f.write(b'{"kind":"ack"')  # the agent is in the middle of a write
    content = path.read_bytes()
    reader = Journal(path, read_only=True)
    assert LEASE in reader.open_periods and path.read_bytes() == content
    with pytest.raises(RuntimeError, match="read-only"):
        reader.record_closed(LEASE)
