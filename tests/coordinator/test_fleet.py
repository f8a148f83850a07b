"""Fleet liveness from heartbeats: online time for usage checks, and loss detection (a fake clock)."""

from __future__ import annotations

from solders.pubkey import Pubkey

from coordinator.fleet import Fleet


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
