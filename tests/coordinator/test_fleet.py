"""Fleet liveness from heartbeats: online time for usage checks, and loss detection (a fake clock)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from solders.pubkey import Pubkey

from coordinator.fleet import Fleet, due_shares


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def test_online_time_counts_heartbeats_and_not_the_gaps_between_outages() -> None:
    clock, node = Clock(), Pubkey.new_unique()
    fleet = Fleet(lost_after_seconds=3, clock=clock)
    fleet.connected(node, simulated=True)
    for _ in range(5):  # beats at 1002..1010, every 2 s
        clock.now += 2
        fleet.heartbeat(node, healthy=True)
    assert fleet.online_seconds(node, 1_000, 1_010) == 10
    assert fleet.online_seconds(node, 1_000, 1_013) == 13  # a beat covers lost_after (3 s) after it
    assert fleet.online_seconds(node, 1_000, 1_020) == 13  # nothing heard after 1,010 + 3: offline
    clock.now = 1_012.5  # a blip shorter than lost_after is not held against the node
    fleet.heartbeat(node, healthy=True)
    assert fleet.online_seconds(node, 1_010, 1_015) == 5
    clock.now = 1_030  # back after an outage
    fleet.heartbeat(node, healthy=True)
    assert fleet.online_seconds(node, 1_000, 1_040) == 18  # 1,000..1,015.5 and 1,030..1,033, in whole seconds
    assert fleet.online_seconds(Pubkey.new_unique(), 1_000, 1_040) == 0


def test_a_silent_node_is_lost_once_per_outage() -> None:
    clock, node = Clock(), Pubkey.new_unique()
    fleet = Fleet(lost_after_seconds=10, clock=clock)
    fleet.connected(node, simulated=False)
    clock.now += 9
    assert fleet.newly_lost() == [] and fleet.online(node)
    clock.now += 2
    assert fleet.newly_lost() == [node] and not fleet.online(node)
    assert fleet.newly_lost() == []  # reported once
    fleet.heartbeat(node, healthy=False)
    assert fleet.online(node) and not fleet.healthy(node)
    clock.now += 11
    assert fleet.newly_lost() == [node]


def test_a_node_expected_after_a_restart_is_lost_only_after_its_grace() -> None:
    clock, node = Clock(), Pubkey.new_unique()
    fleet = Fleet(lost_after_seconds=3, clock=clock)
    fleet.expect(node, grace_seconds=10)
    clock.now += 9
    assert fleet.newly_lost() == [] and not fleet.online(node)
    clock.now += 2
    assert fleet.newly_lost() == [node]
    fleet.connected(node, simulated=True)
    assert fleet.online(node)


def _run(fleet: Fleet, clock: Clock, seconds: float) -> None:
    """The coordinator running normally for `seconds`: its stall watch wakes every 0.2 s."""
    for _ in range(round(seconds / 0.2)):
        clock.now += 0.2
        assert fleet.watch(0.2, 1.0) == 0.0


def test_the_coordinator_s_own_stall_is_never_a_node_s_silence() -> None:
    clock, alive, dead = Clock(), Pubkey.new_unique(), Pubkey.new_unique()
    fleet = Fleet(lost_after_seconds=3, clock=clock, drain_seconds=1)
    for node in (alive, dead):
        fleet.connected(node, simulated=True)
    fleet.watch(0.2, 1.0)
    _run(fleet, clock, 1.0)  # the dead node's last beat was at 1,000 (its connection)
    fleet.heartbeat(alive, healthy=True)  # at 1,001
    clock.now += 10  # the coordinator sees nothing for 10 s (SIGSTOP, a blocked loop)
    # its loop resumes: before the stall watch wakes, nobody may be judged (it is late)
    assert not fleet.judging() and fleet.newly_lost() == []
    assert fleet.watch(0.2, 1.0) == pytest.approx(10.0)
    # its heartbeats are still in the socket: nobody is judged until they are read
    assert fleet.newly_lost() == [] and not fleet.judging()
    _run(fleet, clock, 0.4)
    fleet.heartbeat(alive, healthy=True)  # drained
    _run(fleet, clock, 0.6)
    assert fleet.silent_for(alive) < 1 and fleet.silent_for(dead) < 3  # the stall is nobody's silence
    assert fleet.newly_lost() == []
    _run(fleet, clock, 2.0)  # the control: the dead node's own silence (not the stall) now exceeds lost_after
    fleet.heartbeat(alive, healthy=True)
    assert fleet.newly_lost() == [dead] and fleet.silent(dead) and not fleet.silent(alive)
    # the stall counts as online time for a node that was online when it began
    assert fleet.online_seconds(alive, 1_001, 1_011) == 10


def test_a_blind_window_from_an_outage_is_counted_for_the_nodes() -> None:
    clock, node = Clock(), Pubkey.new_unique()
    fleet = Fleet(lost_after_seconds=3, clock=clock, drain_seconds=1)
    fleet.connected(node, simulated=True)
    clock.now = 1_020  # the database was down from 1,001 to 1,020: nothing could be judged
    fleet.add_blind(1_001, 1_020)
    assert fleet.silent_for(node) == 1 and not fleet.judging()
    clock.now += 1
    assert fleet.judging() and fleet.newly_lost() == [] and fleet.online_seconds(node, 1_000, 1_020) == 20


def test_the_share_of_the_fleet_silent_at_once() -> None:
    clock = Clock()
    fleet = Fleet(lost_after_seconds=3, clock=clock)
    nodes = [Pubkey.new_unique() for _ in range(4)]
    for node in nodes:
        fleet.connected(node, simulated=True)
    clock.now += 5
    fleet.heartbeat(nodes[0], healthy=True)
    assert fleet.silent_share(window_seconds=60) == (3, 4)
    for node in nodes[1:3]:
        fleet.heartbeat(node, healthy=True)
    assert fleet.silent_share(window_seconds=60) == (1, 4)
    # the whole fleet stops at once: when the first node crosses lost_after, the others (their last
    # beats up to a heartbeat later) already count, so the outage is seen as correlated in time
    for node in nodes:
        fleet.heartbeat(node, healthy=True)
        clock.now += 0.5
    clock.now += 1.1  # the first node's silence: 3.1 s, the last one's: 1.6 s
    assert [fleet.silent(n) for n in nodes] == [True, False, False, False]
    assert fleet.silent_share(window_seconds=60) == (4, 4)
    clock.now += 100  # nodes not heard within the window are no longer part of the fleet
    fleet.heartbeat(nodes[0], healthy=True)
    assert fleet.silent_share(window_seconds=60) == (0, 1)


def test_a_stall_noticed_after_the_waiting_heartbeats_were_read_still_counts_as_online() -> None:
    clock, node = Clock(), Pubkey.new_unique()
    fleet = Fleet(lost_after_seconds=2, clock=clock)
    fleet.connected(node, simulated=True)
    fleet.watch(0.2, 1.0)
    clock.now = 1_006.2  # the loop resumes: the node's waiting heartbeat is read before the watch wakes
    fleet.heartbeat(node, healthy=True)
    assert fleet.watch(0.2, 1.0) == pytest.approx(6.2)
    assert fleet.online_seconds(node, 1_000, 1_006) == 6


def test_a_lease_s_downtime_tolerance_lengthens_lost_after_and_never_shortens_it() -> None:
    clock, node = Clock(), Pubkey.new_unique()
    fleet = Fleet(lost_after_seconds=10, clock=clock)
    fleet.connected(node, simulated=True)  # heard at 1,000
    clock.now = 1_008
    assert not fleet.silent(node, 5), "a tolerance below lost_after does not make a node lost sooner"
    clock.now = 1_015
    assert fleet.silent(node) and fleet.silent(node, 5)  # the network's default: lost after 10 s
    assert not fleet.silent(node, 30), "its client tolerates 30 s"
    clock.now = 1_031
    assert fleet.silent(node, 30)

    # Per share: only the shares whose lease's tolerance the silence exceeds are lost.
    shares = [
        SimpleNamespace(lease="default", downtime_tolerance_seconds=0),
        SimpleNamespace(lease="patient", downtime_tolerance_seconds=30),
        SimpleNamespace(lease="hasty", downtime_tolerance_seconds=5),
    ]

    def names(rows: list[SimpleNamespace]) -> list[str]:
        return [r.lease for r in rows]

    lost, tolerated = due_shares(shares, 15, 10)
    assert (names(lost), names(tolerated)) == (["default", "hasty"], ["patient"])
    assert names(due_shares(shares, 8, 10)[0]) == [], "nobody is lost before lost_after, whatever the lease asked"
    assert names(due_shares(shares, 31, 10)[0]) == ["default", "patient", "hasty"]


def test_silence_a_lease_tolerates_is_billable_time_counted_once() -> None:
    clock, node = Clock(), Pubkey.new_unique()
    fleet = Fleet(lost_after_seconds=10, clock=clock)
    fleet.connected(node, simulated=True)  # 1,000
    clock.now = 1_002
    fleet.heartbeat(node, healthy=True)
    clock.now = 1_025  # 23 s of silence, then heard again
    fleet.heartbeat(node, healthy=True)
    assert fleet.online_seconds(node, 1_000, 1_030) == 12 + 5  # the default: 1,000..1,012 and 1,025..1,030
    # a lease tolerating 30 s: the whole span is held time, each second counted once (the two
    # spans' reaches overlap)
    assert fleet.online_seconds(node, 1_000, 1_030, tolerance=30) == 30
    assert fleet.online_seconds(node, 1_000, 1_030, tolerance=5) == 17, "never less than lost_after's reach"


def test_a_region_s_share_of_silence_and_its_excused_outage_count_for_its_nodes_only() -> None:
    clock = Clock()
    fleet = Fleet(lost_after_seconds=2, clock=clock)
    east, west = [Pubkey.new_unique() for _ in range(3)], [Pubkey.new_unique() for _ in range(2)]
    region = {**{k: 1 for k in east}, **{k: 2 for k in west}}
    for key in (*east, *west):
        fleet.connected(key, simulated=True)
    clock.now += 1.5
    for key in west:
        fleet.heartbeat(key, healthy=True)
    # every eastern node going silent at once; the west is too small to be judged on its own
    assert fleet.silent_regions(60, region.get, min_nodes=3) == {1: (3, 3)}
    assert fleet.silent_regions(60, region.get, min_nodes=2) == {1: (3, 3), 2: (0, 2)}
    assert fleet.silent_share(60) == (3, 5)
    clock.now += 10
    fleet.add_blind(1_001, clock.now, east)  # the east's outage, excused for the east only
    for key in west:
        assert fleet.silent(key), "the west's silence is not excused by the east's outage"
    assert [round(fleet.silent_for(k), 6) for k in east] == [1.0] * 3  # only the second before it counts
    assert fleet.online_seconds(east[0], 1_000, int(clock.now)) == int(clock.now) - 1_000  # online through it
    assert fleet.online_seconds(west[0], 1_000, int(clock.now)) < int(clock.now) - 1_000


def test_a_correlated_outage_is_dated_from_its_first_silence_and_covers_who_was_online_in_it() -> None:
    clock = Clock()
    fleet = Fleet(lost_after_seconds=2, clock=clock)
    dead, first, second, late = (Pubkey.new_unique() for _ in range(4))
    for node in (dead, first, second):
        fleet.connected(node, simulated=True)
    clock.now = 1_003.0  # `dead` is silent past lost_after, reported lost before the outage
    for node in (first, second):
        fleet.heartbeat(node, healthy=True)
    assert fleet.newly_lost() == [dead]
    clock.now = 1_003.5
    fleet.heartbeat(second, healthy=True)
    clock.now = 1_004.0  # `late` connects while the others are going silent, and falls silent too
    fleet.connected(late, simulated=True)
    clock.now = 1_005.2  # first silent 2.2 s (past lost_after, not reported yet), second 1.7 s, late 1.2 s
    assert fleet.silence_began(60) == 1_003.0, "the first silence not already judged lost, not `dead`'s"
    clock.now = 1_010.0  # the pause ends: its window counts for nobody, and as online time
    fleet.add_blind(1_003.0, clock.now)
    assert [fleet.silent_for(n) for n in (first, second, late)] == [0.0, 0.0, 0.0]
    assert fleet.online_seconds(first, 1_003, 1_010) == 7
    assert fleet.online_seconds(late, 1_004, 1_010) == 6  # online in the window from its connection on
    assert fleet.online_seconds(dead, 1_000, 1_010) == 2  # gone before it: its last beat's reach only
