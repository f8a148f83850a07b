"""The worker gateway over a real WebSocket: admission by node key and a fresh challenge, the
protocol's close codes for every kind of bad message, and usage receipts acknowledged only
after the coordinator recorded them. (The worker side is played with raw frames here, so that
each bad message can be sent exactly; tests/worker runs the real agent.)"""

from __future__ import annotations

import asyncio
import json

import pytest
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from coordinator.gateway import Gateway, NodeOffline, NotRegistered
from gpunet.protocol import (
    CLOSE_MALFORMED,
    CLOSE_NOT_LEADER,
    CLOSE_NOT_REGISTERED,
    CLOSE_UNAUTHORISED,
    CLOSE_VERSION_MISMATCH,
    PROTOCOL_VERSION,
    Cancel,
    Heartbeat,
    Hello,
    Inventory,
    JobLog,
    answer_challenge,
    encode,
    parse_coordinator_message,
)
from gpunet.usage import Receipt


class Recorder:
    """The coordinator's side at the module boundary: admits `registered` keys, records the rest."""

    def __init__(self, registered: set[Pubkey]) -> None:
        self.registered = registered
        self.events: list[tuple[str, Pubkey, object]] = []

    async def admit(self, node_key, hello):
        return None if node_key in self.registered else NotRegistered(f"node {node_key} is not registered")

    def __getattr__(self, name):
        async def record(node_key, message=None):
            self.events.append((name, node_key, message))

        return record

    def kinds(self) -> list[str]:
        return [kind for kind, _, _ in self.events]


def hello(node: Keypair, simulated: bool = True, version: int = PROTOCOL_VERSION) -> str:
    return encode(
        Hello(
            simulated=simulated,
            version=version,
            node_key=str(node.pubkey()),
            inventory=Inventory(driver_version="", cuda_version="", simulated=simulated, gpus=[]),
        )
    )


@pytest.fixture
async def gateway():
    node = Keypair()
    recorder = Recorder({node.pubkey()})
    gw = await Gateway(recorder, heartbeat_seconds=1).start()
    yield gw, recorder, node
    await gw.stop()


async def _admitted(gw: Gateway, node: Keypair):
    ws = await connect(gw.url)
    await ws.send(hello(node))
    challenge = parse_coordinator_message(await ws.recv())
    await ws.send(encode(answer_challenge(node, challenge, simulated=True)))
    assert parse_coordinator_message(await ws.recv()).type == "welcome"
    return ws


async def _closed_with(ws) -> tuple[int, str]:
    with pytest.raises(ConnectionClosed) as closed:
        while True:
            await ws.recv()
    return closed.value.rcvd.code, closed.value.rcvd.reason


async def test_a_registered_node_is_admitted_and_its_signed_usage_is_recorded_then_acked(gateway) -> None:
    gw, recorder, node = gateway
    ws = await _admitted(gw, node)
    assert gw.online(node.pubkey()) and recorder.kinds() == ["connected"]
    lease = Pubkey.new_unique()
    receipt = Receipt(1, 120, 160)
    await ws.send(
        json.dumps(
            {
                "type": "usage_receipt",
                "simulated": True,
                "lease": str(lease),
                "epoch": 1,
                "gpu_seconds": 120,
                "through": 160,
                "signature": str(node.sign_message(receipt.message(lease, node.pubkey()))),
            }
        )
    )
    ack = parse_coordinator_message(await ws.recv())
    assert (ack.type, ack.lease, ack.epoch, ack.gpu_seconds, ack.through) == ("ack", str(lease), 1, 120, 160)
    assert recorder.kinds() == ["connected", "usage"]  # recorded before the ack was sent
    await gw.send(node.pubkey(), Cancel(lease=str(lease), reason="lease closed"))
    assert parse_coordinator_message(await ws.recv()).type == "cancel"
    await ws.close()
    await _wait(lambda: not gw.online(node.pubkey()))
    assert recorder.kinds()[-1] == "disconnected"
    with pytest.raises(NodeOffline):
        await gw.send(node.pubkey(), Cancel(lease=str(lease)))


async def _wait(predicate, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.02)


async def test_an_unregistered_node_a_wrong_answer_and_another_version_are_refused(gateway) -> None:
    gw, recorder, node = gateway
    async with connect(gw.url) as ws:  # a first message nested too deep: malformed, refused as such
        await ws.send(DEEP.replace('"heartbeat"', '"hello"'))
        code, reason = await _closed_with(ws)
        assert code == CLOSE_MALFORMED and "not JSON" in reason
    async with connect(gw.url) as ws:
        await ws.send(hello(Keypair()))
        code, reason = await _closed_with(ws)
        assert code == CLOSE_NOT_REGISTERED and "not registered" in reason  # the worker says what to do
    async with connect(gw.url) as ws:
        await ws.send(hello(node))
        parse_coordinator_message(await ws.recv())
        other_nonce = parse_coordinator_message(json.dumps({"type": "challenge", "nonce": "00" * 32}))
        await ws.send(encode(answer_challenge(node, other_nonce, simulated=True)))  # a replayed answer
        code, reason = await _closed_with(ws)
        assert code == CLOSE_UNAUTHORISED and "challenge answer" in reason
    async with connect(gw.url) as ws:
        await ws.send(hello(node, version=PROTOCOL_VERSION + 1))
        assert (await _closed_with(ws))[0] == CLOSE_VERSION_MISMATCH
    assert recorder.events == [] and not gw.online(node.pubkey())


# JSON nested past any recursive parser's stack (the standard library's raised RecursionError, and the
# gateway closed with 1011, its own internal error, for what is the worker's malformed message)
DEEP = '{"type": "heartbeat", "simulated": true, "healthy": true, "gpus": ' + "[" * 5000 + "]" * 5000 + "}"


@pytest.mark.parametrize(
    ("frame", "code", "reason"),
    [
        ("not json", CLOSE_MALFORMED, "not JSON"),
        ('{"type": "teleport", "simulated": true}', CLOSE_MALFORMED, "unknown worker message type"),
        ('{"type": "heartbeat", "simulated": true, "healthy": "yes", "gpus": []}', CLOSE_MALFORMED, "healthy"),
        ('{"type": "heartbeat", "simulated": false, "healthy": true, "gpus": []}', CLOSE_MALFORMED, "simulated flag"),
        (
            '{"type": "challenge_answer", "simulated": true, "signature": "' + "1" * 64 + '"}',
            CLOSE_MALFORMED,
            "handshake",
        ),
        (DEEP, CLOSE_MALFORMED, "not JSON: recursion limit exceeded"),
    ],
)
async def test_bad_messages_close_the_session_with_their_code_and_reach_nothing(gateway, frame, code, reason) -> None:
    gw, recorder, node = gateway
    ws = await _admitted(gw, node)
    await ws.send(frame)
    got_code, got_reason = await _closed_with(ws)
    assert got_code == code and reason in got_reason
    await _wait(lambda: recorder.kinds()[-1] == "disconnected")
    assert recorder.kinds() == ["connected", "disconnected"]


async def test_a_usage_receipt_the_node_did_not_sign_is_refused_and_not_recorded(gateway) -> None:
    gw, recorder, node = gateway
    ws = await _admitted(gw, node)
    lease = Pubkey.new_unique()
    forged = Keypair().sign_message(Receipt(1, 60, 60).message(lease, node.pubkey()))
    await ws.send(
        json.dumps(
            {
                "type": "usage_receipt",
                "simulated": True,
                "lease": str(lease),
                "epoch": 1,
                "gpu_seconds": 60,
                "through": 60,
                "signature": str(forged),
            }
        )
    )
    code, reason = await _closed_with(ws)
    assert code == CLOSE_UNAUTHORISED and "not signed by this node" in reason
    assert "usage" not in recorder.kinds()


async def test_a_second_session_of_the_same_node_replaces_the_first(gateway) -> None:
    gw, _, node = gateway
    first = await _admitted(gw, node)
    second = await _admitted(gw, node)
    assert (await _closed_with(first))[0] == CLOSE_UNAUTHORISED
    assert gw.sessions[node.pubkey()] is not None and gw.online(node.pubkey())
    await gw.send(node.pubkey(), Cancel(lease=str(Pubkey.new_unique())))
    assert parse_coordinator_message(await second.recv()).type == "cancel"
    await second.close()


async def test_a_message_the_coordinator_cannot_record_keeps_the_session_and_is_not_acked(gateway) -> None:
    gw, recorder, node = gateway
    ws = await _admitted(gw, node)
    lease = Pubkey.new_unique()
    receipt = Receipt(1, 120, 160)
    frame = json.dumps(
        {
            "type": "usage_receipt",
            "simulated": True,
            "lease": str(lease),
            "epoch": 1,
            "gpu_seconds": 120,
            "through": 160,
            "signature": str(node.sign_message(receipt.message(lease, node.pubkey()))),
        }
    )

    async def database_down(node_key, message=None):
        raise OSError("connection refused")

    recorder.usage = database_down  # the coordinator's database is down
    await ws.send(frame)
    error = parse_coordinator_message(await ws.recv())
    assert error.type == "error" and "send it again later" in error.message  # no ack: the worker keeps it
    assert gw.online(node.pubkey())  # the session is kept: no reconnect storm
    del recorder.usage  # the database is back: the same receipt is recorded and acked
    await ws.send(frame)
    ack = parse_coordinator_message(await ws.recv())
    assert (ack.type, ack.gpu_seconds) == ("ack", 120) and recorder.kinds()[-1] == "usage"
    await ws.close()


async def test_numbered_messages_are_recorded_once_and_in_order_even_when_one_cannot_be_recorded(gateway) -> None:
    gw, recorder, node = gateway
    ws = await _admitted(gw, node)
    lease = str(Pubkey.new_unique())

    def line(n: int) -> str:
        return encode(JobLog(simulated=True, lease=lease, stream="stdout", line=f"line {n}", origin="ab" * 8, n=n))

    async def answer():
        return parse_coordinator_message(await ws.recv())

    await ws.send(line(1))
    assert (await answer()).upto == 1
    failing = recorder.job_log

    async def database_down(node_key, message=None):
        raise OSError("connection refused")

    recorder.job_log = database_down
    await ws.send(line(2))
    error = await answer()
    assert error.type == "error" and error.resend_from == 2
    recorder.job_log = failing  # the database is back, but line 3 was sent before the worker heard
    await ws.send(line(3))
    await ws.send(line(2))  # the worker's resend, in order
    await ws.send(line(3))
    assert [(await answer()).upto, (await answer()).upto] == [2, 3]
    await ws.send(line(2))  # a repeat (its confirmation was lost, say): confirmed, not recorded again
    assert (await answer()).upto == 3
    assert [m.line for kind, _, m in recorder.events if kind == "job_log"] == ["line 1", "line 2", "line 3"]
    # the control: an unnumbered message (an older agent) is recorded as it comes, with no answer
    await ws.send(encode(JobLog(simulated=True, lease=lease, stream="stdout", line="old agent")))
    await _wait(lambda: recorder.kinds()[-1] == "job_log" and recorder.events[-1][2].line == "old agent")
    await ws.close()


async def test_a_replica_that_stops_leading_sends_a_worker_on_at_its_next_message(gateway) -> None:
    """Its step-down redirect aside: a session it still holds is closed with 4421 and the leader's
    URL at the worker's next message (a heartbeat at most), once a leader is known; with none known
    yet the session stays (the control), rather than reconnect in a loop."""
    gw, recorder, node = gateway
    ws = await _admitted(gw, node)
    leader = {"url": ""}

    async def leader_url() -> str:
        return leader["url"]

    gw.leading, gw.leader_url = (lambda: False), leader_url
    beat = encode(Heartbeat(simulated=True, healthy=True, gpus=[]))
    await ws.send(beat)  # no leader known: kept, and recorded
    await _wait(lambda: recorder.kinds()[-1] == "heartbeat")
    assert gw.online(node.pubkey())
    leader["url"] = "ws://leader.example:8910/worker"
    await ws.send(beat)
    with pytest.raises(ConnectionClosed) as closed:
        await asyncio.wait_for(ws.recv(), 10)
    assert closed.value.rcvd is not None
    assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (CLOSE_NOT_LEADER, leader["url"])
    assert recorder.kinds().count("heartbeat") == 1  # the follower recorded nothing more of it
