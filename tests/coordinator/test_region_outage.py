"""A region's correlated outage (most of its nodes silent at once: a regional power cut or
partition) pauses slashing in that region only, while a node of another region that really goes
silent is still judged; when the region is heard again its silence during the pause counts for
none of its nodes; the operator may end a pause (signed with the attester key), and nobody else
can. The coordinator is not started: its failover pass is driven by hand against
a fleet on a test clock (the chain RPC and the database are real)."""

from __future__ import annotations

import time

import httpx
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from coordinator.api import create_app
from coordinator.api.work import work_routes
from coordinator.indexer.rpc import ChainRpc
from coordinator.scheduler import NodeView
from coordinator.service import Coordinator
from coordinator.settings import Settings
from gpunet.protocol import operator_message

from .conftest import leading_without_loops

EAST, WEST = 1, 2


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def _view(key: Pubkey, region: int) -> NodeView:
    return NodeView(
        node=Pubkey.new_unique(),
        node_key=key,
        provider_authority=Pubkey.new_unique(),
        gpu_model=1,
        gpu_count=2,
        vram_gb=80,
        region=region,
        price_per_gpu_hour=1,
    )


def _settings(node, database_url: str) -> Settings:
    """Silence is judged after 2 s; a region of 3 nodes or more may be paused."""
    return Settings(
        rpc_url=node.url, ws_url=node.ws_url, database_url=database_url, lost_after_seconds=2.0, region_min_nodes=3
    )


def _connected(coordinator: Coordinator, easts: int, wests: int) -> tuple[list[Pubkey], list[Pubkey]]:
    """`easts` nodes in the east and `wests` in the west, known to the scheduler and connected."""
    east, west = [Pubkey.new_unique() for _ in range(easts)], [Pubkey.new_unique() for _ in range(wests)]
    for key, region in [*((k, EAST) for k in east), *((k, WEST) for k in west)]:
        coordinator.shared.scheduler.upsert_node(_view(key, region))
        coordinator.fleet.connected(key, simulated=True)
    return east, west


async def test_a_region_s_correlated_outage_pauses_slashing_there_only(node, database_url, pool) -> None:
    settings = _settings(node, database_url)
    clock = Clock()
    coordinator = Coordinator(settings, pool, Keypair(), clock=clock)
    fleet, outages, failover = coordinator.fleet, coordinator.outages, coordinator.failover
    east, west = _connected(coordinator, 3, 5)
    try:
        # The east goes dark and one western node dies: 4 of 8 silent, not over half the fleet.
        for _ in range(5):
            clock.now += 0.5
            for key in west[1:]:
                fleet.heartbeat(key, healthy=True)
        await failover.step()
        assert EAST in outages.paused_regions and not outages.slashing_paused
        assert set(east) <= failover.silent, "the east's nodes wait for their region to be heard"
        assert west[0] not in failover.silent, "the dead western node was judged (it held no share)"

        # The east comes back: the pause ends, and its silence during it counts for nobody.
        clock.now += 5
        for key in (*east, *west[1:]):
            fleet.heartbeat(key, healthy=True)
        clock.now += 0.5
        await failover.step()
        assert outages.paused_regions == {}
        assert not failover.silent & set(east)
        clock.now += 1.8  # 2.3 s after their last beat, but the pause is excused: not silent
        assert not any(fleet.silent(k) for k in east)
        assert fleet.silent(west[0])  # the control: unexcused silence is still silence
    finally:
        await coordinator.chain.close()


async def test_the_operator_ends_a_pause_with_the_attester_key_and_nobody_else_can(node, database_url, pool) -> None:
    settings = _settings(node, database_url)
    attester = Keypair()
    clock = Clock()
    coordinator = await leading_without_loops(Coordinator(settings, pool, attester, clock=clock))
    fleet, outages, failover = coordinator.fleet, coordinator.outages, coordinator.failover
    east, west = _connected(coordinator, 3, 4)
    rpc = ChainRpc(settings.rpc_url)
    app = create_app(pool, rpc, settings, work_routes(coordinator), coordinator)
    try:
        for _ in range(5):  # the east goes dark
            clock.now += 0.5
            for key in west:
                fleet.heartbeat(key, healthy=True)
        await failover.step()
        assert EAST in outages.paused_regions

        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://coordinator") as http:

            async def resume(key: Keypair, region: str | None, at: int | None = None) -> httpx.Response:
                at = int(time.time()) if at is None else at
                signature = key.sign_message(operator_message("resume-slashing", region, at))
                return await http.post(
                    "/slashing/resume", json={"region": region, "at": at, "signature": str(signature)}
                )

            stranger = await resume(Keypair(), "us-east")
            assert stranger.status_code == 401 and EAST in outages.paused_regions
            stale = await resume(attester, "us-east", int(time.time()) - 3600)
            assert stale.status_code == 401 and "stale" in stale.json()["error"] and EAST in outages.paused_regions
            assert (await resume(attester, "atlantis")).status_code == 400
            fleet_wide = await resume(attester, None)  # not paused: nothing to end
            assert fleet_wide.status_code == 409 and EAST in outages.paused_regions

            at = int(time.time())
            signature = str(attester.sign_message(operator_message("resume-slashing", "us-east", at)))
            body = {"region": "us-east", "at": at, "signature": signature}
            ok = await http.post("/slashing/resume", json=body)
            assert ok.status_code == 200 and ok.json() == {"resumed": "region us-east"}
            assert outages.paused_regions == {}
            replay = await http.post("/slashing/resume", json=body)
            assert replay.status_code == 401 and "replayed" in replay.json()["error"]

        # Its silent nodes are judged now (their silence counts), and the region is not paused again
        # while it stays dark.
        clock.now += 0.5
        await failover.step()
        assert outages.paused_regions == {} and not failover.silent & set(east)
        assert all(fleet.silent(k) for k in east)
    finally:
        await rpc.close()
        await coordinator.chain.close()


async def test_a_region_back_one_by_one_is_paused_from_its_first_silence_and_its_last_node_gets_lost_after(
    node, database_url, pool
) -> None:
    settings = _settings(node, database_url)
    clock = Clock()
    coordinator = Coordinator(settings, pool, Keypair(), clock=clock)
    fleet, outages, failover = coordinator.fleet, coordinator.outages, coordinator.failover
    east, west = _connected(coordinator, 3, 5)

    async def until(t: float, beating: list[Pubkey]) -> None:
        """Passes of the failover loop every 0.1 s up to `t`, the `beating` nodes heard at each."""
        while clock.now < t - 1e-9:
            clock.now = round(clock.now + 0.1, 6)
            for key in beating:
                fleet.heartbeat(key, healthy=True)
            await failover.step()
            # nobody of the east is judged: a node reported lost waits (judged, it would have left the
            # failover's silent set while still reported, as the dead western node does)
            judged = [k for k in east if fleet.nodes[k].lost_reported and k not in failover.silent]
            assert judged == [], clock.now

    try:
        # The east goes dark a node at a time (0.4 s apart) while one western node dies for good.
        await until(1_000.4, [*east, *west[1:]])
        await until(1_000.8, [*east[1:], *west[1:]])
        await until(1_001.2, [east[2], *west[1:]])
        await until(1_006.0, west[1:])
        assert outages.paused_regions == {EAST: 1_000.4}, "dated from the first silence it covers"
        # Back one by one, 1.5 s apart (the region's pause ends with the second), the last one
        # 1.9 s after the pause's end: within lost_after of it.
        await until(1_007.5, [east[0], *west[1:]])
        await until(1_009.4, [*east[:2], *west[1:]])
        assert outages.paused_regions == {}
        await until(1_012.0, [*east, *west[1:]])
        assert fleet.silent(west[0]) and west[0] not in failover.silent, "the control: the dead node is judged"
        # Each eastern node counts as online through the outage: its held time in it is paid.
        assert [fleet.online_seconds(k, 1_000, 1_012) for k in east] == [12, 12, 12]
        assert fleet.online_seconds(west[0], 1_000, 1_012) == 2  # its last beat's reach, no more
    finally:
        await coordinator.chain.close()
