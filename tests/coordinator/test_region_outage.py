"""A region's correlated outage (most of its nodes silent at once: a regional power cut or
partition) pauses slashing in that region only, while a node of another region that really goes
silent is still judged; when the region is heard again its silence during the pause counts for
none of its nodes. The coordinator is not started: its failover pass is driven by hand against
a fleet on a test clock (the chain RPC and the database are real)."""

from __future__ import annotations

from solders.keypair import Keypair
from solders.pubkey import Pubkey

from coordinator.fleet import Fleet
from coordinator.scheduler import NodeView
from coordinator.service import Coordinator
from coordinator.settings import Settings

EAST, WEST = 1, 2


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def _view(key: Pubkey, region: int) -> NodeView:
    return NodeView(node=str(Pubkey.new_unique()), node_key=str(key), provider_authority=str(Pubkey.new_unique()),
                    gpu_model=1, gpu_count=2, vram_gb=80, region=region, price_per_gpu_hour=1)


async def test_a_region_s_correlated_outage_pauses_slashing_there_only(node, database_url, pool) -> None:
    settings = Settings(rpc_url=node.url, ws_url=node.ws_url, database_url=database_url, lost_after_seconds=2.0,
                        region_min_nodes=3)
    coordinator = Coordinator(settings, pool, Keypair())
    clock = Clock()
    fleet = coordinator.fleet = Fleet(lost_after_seconds=2.0, clock=clock)
    east, west = [Pubkey.new_unique() for _ in range(3)], [Pubkey.new_unique() for _ in range(5)]
    for key, region in [*((k, EAST) for k in east), *((k, WEST) for k in west)]:
        coordinator.placer.scheduler.upsert_node(_view(key, region))
        fleet.connected(key, simulated=True)
    try:
        # The east goes dark and one western node dies: 4 of 8 silent, not over half the fleet.
        for _ in range(5):
            clock.now += 0.5
            for key in west[1:]:
                fleet.heartbeat(key, healthy=True)
        await coordinator.fail_over()
        assert EAST in coordinator.paused_regions and not coordinator.slashing_paused
        assert set(east) <= coordinator._silent, "the east's nodes wait for their region to be heard"
        assert west[0] not in coordinator._silent, "the dead western node was judged (it held no share)"

        # The east comes back: the pause ends, and its silence during it counts for nobody.
        clock.now += 5
        for key in (*east, *west[1:]):
            fleet.heartbeat(key, healthy=True)
        clock.now += 0.5
        await coordinator.fail_over()
        assert coordinator.paused_regions == {}
        assert not coordinator._silent & set(east)
        clock.now += 1.8  # 2.3 s after their last beat, but the pause is excused: not silent
        assert not any(fleet.silent(k) for k in east)
        assert fleet.silent(west[0])  # the control: unexcused silence is still silence
    finally:
        await coordinator.chain.close()
