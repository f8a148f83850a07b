"""Reaching a lease's job through the data plane with real processes: gpunet-localnet, the
coordinator with its relay, `gpunet worker run` with simulated GPUs, and a job that serves HTTP in
its own network namespace on each of its two nodes. A port forward, one command and a terminal,
each through the relay and directly; what the relay carries holds none of it in the clear; every
attack beside its honest control: a stranger, a node that is not the lease's, the relay's own word
about which node is which, a node killed under a command (and the forward that follows its share
to the node it moved to), a closed lease."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from urllib.parse import urlencode

import pytest
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from websockets.asyncio.client import connect

from gpunet import tunnel
from gpunet.protocol import Expose, JobSpec, sign_request
from gpunet.reach import Access, ReachError, open_access, reach_info
from gpunet.tunnel import (
    EXIT,
    RESIZE,
    STDIN,
    AccessRequest,
    SecureChannel,
    TunnelError,
    WebSocketPipe,
    client_context,
    read_frame,
    resize_payload,
    send_frame,
    sign_access,
)
from tests.worker.sandboxes import JOBS

from .conftest import eventually
from .world import (
    World,
    cluster_env,
    live_settings,
    open_lease,
    placed_lease,
    running,
    start_workers,
    steps_job,
    submitted,
)

PORT = 8765
MARK = "fortytwo-is-the-answer"  # what the job's answers carry, never the relay's bytes in the clear


def _env(node_url: str):
    def env(i: int) -> dict[str, str]:
        # each job in a network namespace of its own (both serve PORT on one machine); each worker
        # reads the lease's client on chain and takes clients directly on a port of its own
        return {
            **cluster_env(i),
            "GPUNET_WORKER_NETWORK": "none",
            "GPUNET_WORKER_RPC_URL": node_url,
            "GPUNET_WORKER_TUNNEL_PORT": "0",
        }

    return env


async def _http(access: Access, request: bytes) -> bytes:
    await access.channel.send(request)
    got = b""
    while (data := await access.channel.recv()) is not None:
        got += data
    return got


async def _command(access: Access, stdin: bytes = b"") -> tuple[bytes, int]:
    """A command's output and exit code (a shell's: what its terminal showed)."""
    if stdin:
        await send_frame(access.channel, STDIN, stdin)
    out = b""
    while (frame := await read_frame(access.channel)) is not None:
        kind, payload = frame
        if kind == EXIT:
            return out, int.from_bytes(payload, "big", signed=True)
        out += payload
    raise AssertionError(f"the channel ended without an exit code after {out!r}")


@pytest.fixture
def relayed(monkeypatch) -> list[bytes]:
    """Every DATA payload the relay (this process) moved through the nodes' links, both ways."""
    seen: list[bytes] = []
    write, frame = tunnel.Link.write, tunnel.Link._frame

    async def recording_write(self, kind, stream, payload):
        if kind == tunnel.DATA:
            seen.append(payload)
        await write(self, kind, stream, payload)

    async def recording_frame(self, kind, sid, payload):
        if kind == tunnel.DATA:
            seen.append(payload)
        return await frame(self, kind, sid, payload)

    monkeypatch.setattr(tunnel.Link, "write", recording_write)
    monkeypatch.setattr(tunnel.Link, "_frame", recording_frame)
    return seen


async def test_the_client_reaches_its_job_and_nobody_else_does(
    node, chain, pool, database_url, tmp_path, spawned, relayed
) -> None:
    world = await World().build(chain, tmp_path)
    settings = live_settings(node, database_url)
    api = f"http://127.0.0.1:{settings.api_port}"
    spec = JobSpec(
        command=[sys.executable, str(JOBS / "serve.py")],
        env={"PORT": str(PORT), "SECRET_WORD": MARK},
        expose=[Expose(name="api", port=PORT)],
    )
    async with running(settings, pool, world.admin) as coordinator:
        workers = await start_workers(world, coordinator, tmp_path, spawned, env=_env(node.url))
        lease, placed = await placed_lease(world, api, chain, 600, spec)
        await eventually(lambda: _all_linked(coordinator, placed), what="both nodes' data-plane links")
        # no permessage-deflate on the links (nor on the client's tunnels, below): ciphertext does not compress
        assert not any(link.ws.protocol.extensions for link in coordinator.relay.links.values())
        client = world.client

        async def forwarded(rank: int, direct: bool) -> dict | None:
            try:
                access = await open_access(
                    api, chain, client, lease, AccessRequest(kind="tcp", lease=str(lease), port=PORT), rank=rank,
                    direct=direct,
                )  # fmt: skip
            except ReachError as e:
                starting = ("nothing listens", "not running", "no job", "holds no share", "no data-plane link")
                if any(why in str(e) for why in starting):
                    return None  # the server is still starting (or its share still moving)
                raise
            answer = await _http(access, b"GET /hello HTTP/1.0\r\n\r\n")
            return {"via": access.via, "node": str(access.node_key), "body": json.loads(answer.split(b"\r\n\r\n")[1])}

        # a port forward: each rank's own server, through the relay and directly
        for rank in (0, 1):
            got = await eventually(lambda rank=rank: forwarded(rank, False), what=f"rank {rank}'s server")
            assert got["via"] == "relay" and got["node"] == placed[rank]
            assert got["body"] == {"served_by_rank": str(rank), "lease": str(lease), "path": "/hello"}
        direct = await forwarded(0, True)
        assert direct is not None and direct["via"] == "direct" and direct["body"]["served_by_rank"] == "0"

        # one command, through the relay: the job's environment, directory and exit code
        exec_ = AccessRequest(kind="exec", lease=str(lease), command=["sh", "-c", "env; pwd; exit 7"])
        access = await open_access(api, chain, client, lease, exec_, direct=False)
        assert isinstance(access.channel.pipe, WebSocketPipe) and not access.channel.pipe.ws.protocol.extensions
        await send_frame(access.channel, tunnel.STDIN_EOF)
        out, code = await _command(access)
        assert code == 7
        assert f"GPUNET_LEASE={lease}" in out.decode() and f"SECRET_WORD={MARK}" in out.decode()
        assert out.decode().splitlines()[-1].endswith(f"jobs/{lease}/work")

        # a terminal: its size, a line typed, a resize, its exit code
        shell = AccessRequest(kind="shell", lease=str(lease), command=["/bin/sh"], rows=33, cols=101)
        access = await open_access(api, chain, client, lease, shell, direct=False)
        await send_frame(access.channel, STDIN, b"stty size; echo $((6*7))-$SECRET_WORD\n")
        await asyncio.sleep(0.5)
        await send_frame(access.channel, RESIZE, resize_payload(40, 120))
        await asyncio.sleep(0.3)
        out, code = await _command(access, b"stty size; exit 3\n")
        text = out.decode(errors="replace")
        assert code == 3
        assert "33 101" in text and f"42-{MARK}" in text and "40 120" in text

        # the relay moved all of that, and none of it in the clear (the honest control: it did move bytes)
        carried = b"".join(relayed)
        assert len(carried) > 10_000
        for plain in (MARK.encode(), b"served_by_rank", b"GPUNET_LEASE", b"stty size", b"GET /hello"):
            assert plain not in carried

        # a stranger: refused by the relay, and by the node itself when it knocks there directly
        stranger = Keypair()
        with pytest.raises(ReachError, match="is not the lease's client"):
            await open_access(api, chain, stranger, lease, exec_, direct=False)
        with pytest.raises(TunnelError, match="is not the lease's client"):  # at the relay itself
            await _relay_channel(api, client, lease, Pubkey.from_string(placed[0]), signer=stranger)
        refusal = await _knock_directly(api, client, stranger, lease, Pubkey.from_string(placed[0]))
        assert "is not the client of lease" in refusal

        # a node that holds no share of the lease: the relay opens nothing to it
        unplaced = next(k for k in world.node_keys() if k not in placed)
        with pytest.raises(Exception, match="holds no share"):
            await _relay_channel(api, client, lease, Pubkey.from_string(unplaced))

        # the relay's word about which node is which: a channel pinned to another node's key fails
        with pytest.raises(TunnelError, match="is not node"):
            channel = await _relay_channel(api, client, lease, Pubkey.from_string(placed[0]), pin=placed[1])
            await channel.handshake()

        # a node killed under a shell: the shell ends, saying so
        access = await open_access(
            api, chain, client, lease, AccessRequest(kind="exec", lease=str(lease), command=["sleep", "600"]),
            rank=1, direct=False,
        )  # fmt: skip
        waiting = asyncio.create_task(read_frame(access.channel))
        await asyncio.sleep(0.5)
        workers[placed[1]].send_signal(signal.SIGKILL)
        with pytest.raises(TunnelError, match="closed"):
            await asyncio.wait_for(waiting, 30)

        # the forward follows the share: once it moved, the same rank's port is the new node's server
        await eventually(lambda: _all_linked(coordinator, [unplaced]), what="the third node's link")

        async def moved() -> dict | None:
            got = await forwarded(1, False)
            return got if got is not None and got["node"] == unplaced else None

        got = await eventually(moved, timeout=90, what="rank 1's server on the node it moved to")
        assert got["body"]["served_by_rank"] == "1" and got["via"] == "relay"

        # the lease closes: nothing of it is reached any more
        await world.market.close_lease(world.lessee, lease)
        with pytest.raises(ReachError, match=r"no longer reached|not active"):
            await eventually(
                lambda: open_access(api, chain, client, lease, exec_, direct=False), timeout=20, what="a refusal"
            )


async def _all_linked(coordinator, nodes: list[str]) -> bool:
    return all(coordinator.relay.linked(Pubkey.from_string(k)) for k in nodes)


async def _relay_channel(
    api: str, client: Keypair, lease: Pubkey, node_key: Pubkey, pin: str | None = None, signer: Keypair | None = None
):
    """A channel through the relay to `node_key`, pinned to `pin` (default: that node's own key), the
    tunnel signed by `signer` (default: the client)."""
    info = await reach_info(api, client, lease)
    query = urlencode({"lease": str(lease), "node": str(node_key)})
    path = f"/client?{query}"
    ws = await connect(f"{info['relay']}?{query}", additional_headers=sign_request(signer or client, "GET", path))
    channel = SecureChannel(
        WebSocketPipe(ws), client_context(), server_side=False, node_key=Pubkey.from_string(pin or str(node_key))
    )
    if pin is None:
        await channel.handshake()
    return channel


async def _knock_directly(api: str, client: Keypair, wallet: Keypair, lease: Pubkey, node_key: Pubkey) -> str:
    """What the node answers `wallet` asking for a command in the lease's job at its direct address."""
    info = await reach_info(api, client, lease)
    direct = next(n["direct"] for n in info["nodes"] if n["node_key"] == str(node_key))
    ws = await connect(f"{direct}?{urlencode({'lease': str(lease)})}")
    channel = SecureChannel(WebSocketPipe(ws), client_context(), server_side=False, node_key=node_key)
    await channel.handshake()
    nonce = bytes.fromhex((await channel.read_message())["nonce"])
    request = AccessRequest(kind="exec", lease=str(lease), command=["id"])
    await channel.send_message(sign_access(wallet, node_key, nonce, request))
    return str((await channel.read_message()).get("error"))


async def test_a_flood_of_streams_holds_back_neither_the_relay_nor_any_control_session(
    node, chain, pool, database_url, tmp_path, spawned
) -> None:
    """Node A's job floods eight forwards whose client stops reading; the relay keeps at most a
    window of each (a link's credit), and both nodes' control sessions, node A's own included, go on
    (their heartbeats and job logs recorded meanwhile) since the data plane is a link of its own."""
    world = await World().build(chain, tmp_path, nodes=2)
    settings = live_settings(node, database_url)
    api = f"http://127.0.0.1:{settings.api_port}"
    flood = JobSpec(command=[sys.executable, str(JOBS / "flood.py")], env={"PORT": str(PORT)})
    async with running(settings, pool, world.admin) as coordinator:
        await start_workers(world, coordinator, tmp_path, spawned, env=_env(node.url))
        lease_a, placed_a = await placed_lease(world, api, chain, 600, flood, gpus=2)
        lease_b = await open_lease(world, chain, 600, gpus=2, lease_id=2)
        await eventually(lambda: submitted(api, world.client, lease_b, steps_job()), what="lease B's job")
        node_a, node_b = (
            Pubkey.from_string(placed_a[0]),
            next(Pubkey.from_string(k) for k in world.node_keys() if k != placed_a[0]),
        )
        await eventually(lambda: _all_linked(coordinator, [str(node_a)]), what="node A's link")

        async def forward() -> Access | None:
            request = AccessRequest(kind="tcp", lease=str(lease_a), port=PORT)
            try:
                return await open_access(api, chain, world.client, lease_a, request, direct=False)
            except ReachError as e:
                if "nothing listens" in str(e) or "no job" in str(e):
                    return None
                raise

        streams = [await eventually(forward, what="a forward of the flood") for _ in range(8)]
        for access in streams:  # each takes its first bytes, then reads no more
            assert await access.channel.recv()
        before = {k: await _recorded(pool, k) for k in (node_a, node_b)}
        await asyncio.sleep(4)
        link = coordinator.relay.links[node_a]
        held = [s.buffered for s in link.streams.values()]
        # each stalled stream holds what its window let through (the rest waits in the client's socket
        # buffers and the job's), never more
        assert len(held) == 8 and 0 < min(held) and max(held) <= tunnel.WINDOW
        for key in (node_a, node_b):
            assert coordinator.fleet.silent_for(key) < 3  # heartbeats go on through the flood
            assert await _recorded(pool, key) > before[key]  # so do the jobs' logs
        for access in streams:
            await access.channel.close()


async def _recorded(pool, node_key: Pubkey) -> int:
    async with pool.acquire() as conn:
        return await conn.fetchval(
            "SELECT count(*) FROM job_events WHERE kind = 'log' AND node_key = $1", str(node_key)
        )
