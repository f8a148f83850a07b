"""Usage metering and the journal: periods from the time a share is held (not a job's run time),
capped at the lease's end, signed reports, crash recovery, and no second metered twice."""

from __future__ import annotations

import itertools
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


def meter(journal: Journal, node: Keypair, gpus: int = 2, period: int = 10, ends_at: int | None = None) -> LeaseMeter:
    return LeaseMeter(journal, node, LEASE, gpus, period, simulated=True, ends_at=ends_at)


def summary(reports) -> list[tuple[int, int, int, int]]:
    return [(r.seq, r.period_start, r.period_end, r.gpu_seconds) for r in reports]


def test_a_held_share_is_billed_for_the_held_time_whether_a_job_runs_or_not(tmp_path: Path, open_journal) -> None:
    node = Keypair()
    journal = open_journal(tmp_path / "usage.jsonl")
    m = meter(journal, node)
    assert m.hold(1000.4) == []  # the share is taken; no job has to run for it to be billed
    assert m.tick(1005.0) == []
    [first] = m.tick(1010.0)
    assert summary([first]) == [(1, 1000, 1010, 18)]  # 9 whole held seconds (9.6) x 2 GPUs
    assert first.simulated and first.verify(node.pubkey()) and not first.verify(Keypair().pubkey())
    second, third = m.tick(1031.0)  # held on, nothing running: every second is billed
    assert summary([second, third]) == [(2, 1010, 1020, 20), (3, 1020, 1030, 20)]
    [last] = m.release(1033.7)  # released: the last partial period ends at a whole second already past
    assert summary([last]) == [(4, 1030, 1033, 6)]
    assert m.tick(1050.0) == [] and m.release(1051.0) == []  # nothing after the release
    assert [r.seq for r in journal.unacked()] == [1, 2, 3, 4] and journal.open_periods == {}


def test_cancel_stops_billing_at_once_and_a_share_released_right_away_bills_nothing(
    tmp_path: Path, open_journal
) -> None:
    journal = open_journal(tmp_path / "usage.jsonl")
    m = meter(journal, Keypair())
    m.hold(1000.0)
    assert summary(m.release(1004.0)) == [(1, 1000, 1004, 8)]
    other = LeaseMeter(journal, Keypair(), str(Pubkey.new_unique()), 2, 10, simulated=True)
    other.hold(2000.2)
    assert other.release(2000.9) == []  # no whole second held: no empty or zero report
    assert journal.open_periods == {}


def test_a_close_that_reaches_the_node_late_still_ends_the_last_period_at_the_close(
    tmp_path: Path, open_journal
) -> None:
    # the client closed at 1014 (billing ended there on chain); the cancel arrives at 1016.5
    m = meter(open_journal(tmp_path / "usage.jsonl"), Keypair())
    m.hold(1000.0)
    assert summary(m.tick(1016.0)) == [(1, 1000, 1010, 20)]
    assert summary(m.release(1016.5, billing_ended_at=1014)) == [(2, 1010, 1014, 8)]  # not ...1016: refused on chain
    # control: a cancel without a billing end (a moved share) ends where it arrives
    m2 = meter(open_journal(tmp_path / "other.jsonl"), Keypair())
    m2.hold(1000.0)
    m2.tick(1016.0)
    assert summary(m2.release(1016.5)) == [(2, 1010, 1016, 12)]


def test_no_period_ends_after_the_lease_end_even_without_a_cancel(tmp_path: Path, open_journal) -> None:
    journal = open_journal(tmp_path / "usage.jsonl")
    m = meter(journal, Keypair(), ends_at=1025)
    m.hold(1000.0)
    reports = m.tick(1040.0)  # the cancel never came
    assert summary(reports) == [(1, 1000, 1010, 20), (2, 1010, 1020, 20), (3, 1020, 1025, 10)]
    assert m.tick(1100.0) == [] and m.release(1101.0) == []  # a worker that ignores the cancel is not paid for it
    assert journal.open_periods == {}


def test_a_lease_end_on_a_period_boundary_closes_there(tmp_path: Path, open_journal) -> None:
    journal = open_journal(tmp_path / "usage.jsonl")
    m = meter(journal, Keypair(), ends_at=1020)
    m.hold(1000.0)
    assert summary(m.tick(1020.0) + m.tick(1030.0)) == [(1, 1000, 1010, 20), (2, 1010, 1020, 20)]
    assert journal.open_periods == {}  # no empty period opened at the end


def test_a_top_up_moves_the_end_and_billing_goes_on(tmp_path: Path, open_journal) -> None:
    journal = open_journal(tmp_path / "usage.jsonl")
    m = meter(journal, Keypair(), ends_at=1015)
    m.hold(1000.0)
    assert summary(m.tick(1012.0)) == [(1, 1000, 1010, 20)]
    assert m.extend(1040, 1013.0) == []  # topped up before the end: no break
    assert summary(m.tick(1045.0)) == [(2, 1010, 1020, 20), (3, 1020, 1030, 20), (4, 1030, 1040, 20)]
    # news of a top-up that comes after the old end: billed again from then, not for the gap
    assert m.extend(1100, 1050.5) == []
    assert summary(m.tick(1061.0)) == [(5, 1050, 1060, 18)]  # 9.5 s held: 9 whole seconds x 2 GPUs


def test_a_share_taken_after_the_lease_end_bills_nothing(tmp_path: Path, open_journal) -> None:
    journal = open_journal(tmp_path / "usage.jsonl")
    m = meter(journal, Keypair(), ends_at=1000)
    assert m.hold(1000.5) == [] and m.tick(1100.0) == [] and m.release(1101.0) == []
    assert journal.reports == {} and journal.open_periods == {}


def test_no_period_ends_in_the_future(tmp_path: Path, open_journal) -> None:
    journal = open_journal(tmp_path / "usage.jsonl")
    m = meter(journal, Keypair())
    m.hold(1000.0)
    [last] = m.release(1003.999)
    assert last.period_end == 1003 <= 1003.999  # rounded down: the program refuses a period ending after its clock


def test_gpu_seconds_are_whole_held_seconds_so_never_over_what_the_coordinator_saw_online(
    tmp_path: Path, open_journal
) -> None:
    # The coordinator caps a report at the whole seconds it saw the node online (which began before
    # the dispatch) x GPUs: 2.6 s held on 4 GPUs may claim 8, never floor(10.4) = 10.
    journal = open_journal(tmp_path / "usage.jsonl")
    m = LeaseMeter(journal, Keypair(), LEASE, 4, 10, simulated=True)
    m.hold(1000.4)
    [report] = m.release(1003.0)
    assert (report.period_start, report.period_end, report.gpu_seconds) == (1000, 1003, 8)


def test_acks_are_journaled_and_unknown_acks_refused(tmp_path: Path, open_journal) -> None:
    path = tmp_path / "usage.jsonl"
    journal = open_journal(path)
    m = meter(journal, Keypair(), period=2)
    m.hold(100.0)
    reports = m.tick(106.0)
    assert [r.seq for r in reports] == [1, 2, 3]
    assert journal.record_ack(LEASE, 2) and journal.record_ack(LEASE, 2)
    assert not journal.record_ack(LEASE, 9) and not journal.record_ack(str(Pubkey.new_unique()), 1)
    journal.close()
    again = open_journal(path)
    assert [r.seq for r in again.unacked()] == [1, 3]
    assert again.next_seq(LEASE) == 4


def test_a_crash_mid_hold_closes_the_open_period_at_its_last_journaled_instant_and_never_re_meters(
    tmp_path: Path, open_journal
) -> None:
    path, node = tmp_path / "usage.jsonl", Keypair()
    journal = open_journal(path)
    m = meter(journal, node)
    m.hold(1000.0)  # no job needs to run: the share is held
    [_first] = m.tick(1010.0)
    m.tick(1014.3)  # 4.3 s into period 2, journaled; then the agent is killed
    journal.close()

    journal = open_journal(path)  # restart
    [recovered] = recover_open_periods(journal, node, simulated=True)
    assert summary([recovered]) == [(2, 1010, 1014, 8)]  # up to the last journaled whole second
    assert recover_open_periods(journal, node, simulated=True) == []  # closed once, for good
    # the coordinator dispatches again right away: the share is held again, after what was reported
    m = meter(journal, node)
    m.hold(1014.8)
    [third] = m.tick(1025.0)
    assert summary([third]) == [(3, 1014, 1024, 18)]  # held from 1014.8: 9 whole seconds, none twice
    assert [r.seq for r in journal.unacked()] == [1, 2, 3]
    assert all(a.period_end <= b.period_start for a, b in itertools.pairwise(journal.unacked()))


def test_a_torn_last_line_is_dropped_and_other_damage_refused(tmp_path: Path, open_journal) -> None:
    path = tmp_path / "usage.jsonl"
    journal = open_journal(path)
    m = meter(journal, Keypair(), period=2)
    m.hold(100.0)
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
    m.hold(1000.0)
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
    meter(journal, Keypair(), period=2).hold(100.0)
    journal.close()
    with open(path, "ab") as f:
        f.write(b'{"kind":"ack"')  # the agent is in the middle of a write
    content = path.read_bytes()
    reader = Journal(path, read_only=True)
    assert LEASE in reader.open_periods and path.read_bytes() == content
    with pytest.raises(RuntimeError, match="read-only"):
        reader.record_closed(LEASE)
