"""Usage metering and the journal: cumulative receipts of the time a share is held (not a job's run
time), capped at the lease's end, signed every tick and sent every usage period, the final one at
the billing end, crash recovery without a second counted twice, and a journal that stays small."""

from __future__ import annotations

from pathlib import Path

import pytest
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from worker.journal import COMPACT_AFTER, Journal, JournalError
from worker.metering import LeaseMeter

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
    return LeaseMeter(journal, node, LEASE, 3, gpus, period, simulated=True, ends_at=ends_at)


def summary(receipts) -> list[tuple[int, int, bool]]:
    return [(r.gpu_seconds, r.through, r.final) for r in receipts]


def test_a_held_share_is_billed_cumulatively_for_the_held_time(tmp_path: Path, open_journal) -> None:
    node = Keypair()
    journal = open_journal(tmp_path / "usage.jsonl")
    m = meter(journal, node)
    assert m.hold(1000.4) == []  # the share is taken; no job has to run for it to be billed
    assert m.tick(1005.0) == []  # signed and journaled every tick, sent every period
    assert summary([journal.newest(LEASE, 3)]) == [(8, 1005, False)]  # from 1001: whole held seconds x 2 GPUs
    [first] = m.tick(1011.0)
    assert summary([first]) == [(20, 1011, False)]
    assert first.epoch == 3 and first.lease == LEASE
    assert first.simulated and first.verify(node.pubkey()) and not first.verify(Keypair().pubkey())
    assert m.tick(1015.0) == []
    [second] = m.tick(1021.0)  # held on, nothing running: every second is billed
    assert summary([second]) == [(40, 1021, False)]
    [last] = m.release(1023.7)  # released: the final receipt runs through a whole second already past
    assert summary([last]) == [(44, 1023, True)]
    assert m.tick(1050.0) == [] and m.release(1051.0) == []  # nothing after the release
    assert summary(journal.unacked()) == [(44, 1023, True)]  # only the newest is kept


def test_a_close_that_reaches_the_node_late_ends_the_final_receipt_at_the_close(tmp_path: Path, open_journal) -> None:
    # the client closed at 1014 (billing ended there on chain); the cancel arrives at 1016.5
    m = meter(open_journal(tmp_path / "usage.jsonl"), Keypair())
    m.hold(1000.0)
    assert summary(m.tick(1016.0)) == [(32, 1016, False)]
    # the count as of the close, though a later receipt was signed: that one is refused on chain
    assert summary(m.release(1016.5, billing_ended_at=1014)) == [(28, 1014, True)]
    # control: a cancel without a billing end (a moved share) ends where it arrives
    m2 = meter(open_journal(tmp_path / "other.jsonl"), Keypair())
    m2.hold(1000.0)
    m2.tick(1016.0)
    assert summary(m2.release(1016.5)) == [(32, 1016, True)]


def test_no_receipt_runs_past_the_lease_end_even_without_a_cancel(tmp_path: Path, open_journal) -> None:
    journal = open_journal(tmp_path / "usage.jsonl")
    m = meter(journal, Keypair(), ends_at=1025)
    m.hold(1000.0)
    assert summary(m.tick(1040.0)) == [(50, 1025, False)]  # the cancel never came: sent at the end
    assert m.tick(1100.0) == []  # a worker that ignores the cancel is not paid for it
    assert summary(m.release(1101.0)) == [(50, 1025, True)]


def test_a_top_up_moves_the_end_and_billing_goes_on_without_the_gap(tmp_path: Path, open_journal) -> None:
    journal = open_journal(tmp_path / "usage.jsonl")
    m = meter(journal, Keypair(), ends_at=1015)
    m.hold(1000.0)
    assert summary(m.tick(1012.0)) == [(24, 1012, False)]
    assert m.extend(1040, 1013.0) == []  # topped up before the end: no break
    assert summary(m.tick(1045.0)) == [(80, 1040, False)]  # capped at the new end
    # news of a top-up that comes after the old end: billed again from then, not for the gap
    assert m.extend(1100, 1050.5) == []
    assert summary(m.tick(1061.0)) == [(100, 1061, False)]  # from 1051: 10 more seconds x 2 GPUs


def test_a_share_taken_after_the_lease_end_bills_nothing(tmp_path: Path, open_journal) -> None:
    journal = open_journal(tmp_path / "usage.jsonl")
    m = meter(journal, Keypair(), ends_at=1000)
    assert m.hold(1000.5) == [] and m.tick(1100.0) == [] and m.release(1101.0) == []
    assert journal.receipts == {}


def test_no_receipt_runs_into_the_future_and_only_whole_held_seconds_count(tmp_path: Path, open_journal) -> None:
    # The coordinator pays an increment for the whole seconds it saw the node online x GPUs: 2.6 s
    # held on 4 GPUs may claim 8, never 10.4 rounded.
    journal = open_journal(tmp_path / "usage.jsonl")
    m = LeaseMeter(journal, Keypair(), LEASE, 1, 4, 10, simulated=True)
    m.hold(1000.4)
    [receipt] = m.release(1003.999)
    assert (receipt.gpu_seconds, receipt.through) == (8, 1003)  # rounded down: never after the chain's clock


def test_acks_are_journaled_and_unknown_acks_refused(tmp_path: Path, open_journal) -> None:
    path = tmp_path / "usage.jsonl"
    journal = open_journal(path)
    m = meter(journal, Keypair(), period=2)
    m.hold(100.0)
    [sent] = m.tick(102.0)
    assert journal.record_ack(LEASE, 3, sent.gpu_seconds, sent.through)
    assert journal.unacked() == []
    assert not journal.record_ack(LEASE, 3, 999, 999)  # never signed
    assert not journal.record_ack(LEASE, 4, sent.gpu_seconds, sent.through)  # another assignment
    assert not journal.record_ack(str(Pubkey.new_unique()), 3, 1, 1)
    m.tick(103.0)  # a newer receipt: unacknowledged again; a late ack of the older one changes nothing
    assert journal.record_ack(LEASE, 3, sent.gpu_seconds, sent.through)
    assert summary(journal.unacked()) == [(6, 103, False)]
    journal.close()
    again = open_journal(path)
    assert summary(again.unacked()) == [(6, 103, False)]


def test_a_restart_resends_the_newest_receipt_and_counts_on_without_the_downtime(tmp_path: Path, open_journal) -> None:
    path, node = tmp_path / "usage.jsonl", Keypair()
    journal = open_journal(path)
    m = meter(journal, node)
    m.hold(1000.0)
    [_first] = m.tick(1010.0)
    m.tick(1014.3)  # signed and journaled at 1014, not sent yet; then the agent is killed
    journal.close()

    journal = open_journal(path)  # restart: the newest receipt is what is sent again
    assert summary(journal.unacked()) == [(28, 1014, False)]
    # the coordinator dispatches again: the share is held again, from its newest receipt on
    m = meter(journal, node)
    m.hold(1020.2)  # down from 1014 to 1020.2: never billed
    [receipt] = m.tick(1031.0)
    assert summary([receipt]) == [(28 + 2 * 10, 1031, False)]  # from 1021, none twice
    assert receipt.verify(node.pubkey())


def test_a_torn_last_line_is_dropped_and_other_damage_refused(tmp_path: Path, open_journal) -> None:
    path = tmp_path / "usage.jsonl"
    journal = open_journal(path)
    m = meter(journal, Keypair(), period=2)
    m.hold(100.0)
    m.tick(102.0)
    journal.close()
    with open(path, "ab") as f:
        f.write(b'{"kind":"ack","lea')  # killed mid-write
    assert summary(open_journal(path).unacked()) == [(4, 102, False)]
    assert path.read_bytes().endswith(b"}\n")  # truncated back to whole records
    lines = path.read_bytes().split(b"\n")
    lines[0] = b"garbage"
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(JournalError, match=r"usage.jsonl:1: damaged"):
        open_journal(path)


def test_the_journal_stays_small_over_a_long_lease(tmp_path: Path, open_journal) -> None:
    """Metered every second for a long lease, acknowledged as it goes: the file never holds more
    than the newest receipt of the share and the superseded lines between two compactions."""
    path, node = tmp_path / "usage.jsonl", Keypair()
    journal = open_journal(path)
    m = meter(journal, node, period=60)
    m.hold(0.0)
    ticks = 6 * COMPACT_AFTER  # 100 minutes of one-second ticks
    sizes = []
    for t in range(1, ticks + 1):
        for sent in m.tick(float(t)):
            journal.record_ack(sent.lease, sent.epoch, sent.gpu_seconds, sent.through)
        if t % 500 == 0:
            sizes.append(path.read_bytes().count(b"\n"))
    # bounded by the compaction threshold, not by the lease's length
    assert len(sizes) == 12 and max(sizes) <= COMPACT_AFTER + 2
    assert summary([journal.newest(LEASE, 3)]) == [(2 * ticks, ticks, False)]
    journal.close()
    again = open_journal(path)  # at open, only what the state needs: the newest receipt (and its ack)
    assert path.read_bytes().count(b"\n") <= 2
    assert summary([again.newest(LEASE, 3)]) == [(2 * ticks, ticks, False)]
    assert not (tmp_path / "usage.compact").exists()


def test_a_finished_share_leaves_the_journal_once_its_final_receipt_is_acknowledged(
    tmp_path: Path, open_journal
) -> None:
    path = tmp_path / "usage.jsonl"
    journal = open_journal(path)
    done, going = meter(journal, Keypair()), LeaseMeter(journal, Keypair(), LEASE, 4, 1, 10, simulated=True)
    done.hold(100.0)
    going.hold(100.0)
    [final] = done.release(110.0)
    going.tick(110.0)
    assert journal.record_ack(LEASE, 3, final.gpu_seconds, final.through)
    journal.close()
    again = open_journal(path)
    assert list(again.receipts) == [(LEASE, 4)]  # the finished share is gone, the running one kept


def test_a_reader_never_repairs_or_writes(tmp_path: Path, open_journal) -> None:
    path = tmp_path / "usage.jsonl"
    journal = open_journal(path)
    m = meter(journal, Keypair(), period=2)
    m.hold(100.0)
    m.tick(101.0)
    journal.close()
    with open(path, "ab") as f:
        f.write(b'{"kind":"ack"')  # the agent is in the middle of a write
    content = path.read_bytes()
    reader = Journal(path, read_only=True)
    assert (LEASE, 3) in reader.receipts and path.read_bytes() == content
    with pytest.raises(RuntimeError, match="read-only"):
        reader.record_ack(LEASE, 3, 2, 101)
