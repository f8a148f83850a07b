"""gpunet.client.InFlight's window, unit by unit: never more outstanding than the window, halved on
the RPC's 429 (the request retried, once a round trip cut) and on a confirmation over twice the
usual, grown back by confirmations at the usual pace, the same code path for a lone
send_and_confirm (window 1), and one blockhash read a slot for every transaction going out. The
chain side (1,000 settlements in flight against a node that confirms late, a pass killed in flight,
a leader deposed in flight) is tests/coordinator/test_in_flight.py."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import httpx
import pytest
from solana.exceptions import SolanaRpcException
from solders.hash import Hash
from solders.keypair import Keypair

from gpunet import client as client_module
from gpunet.client import InFlight


class Counting(InFlight):
    """InFlight whose transactions take `seconds` each and never touch an RPC (the window alone)."""

    def __init__(self, window: int, seconds: float = 0.05) -> None:
        super().__init__(None, window=window)  # type: ignore[arg-type]  # no RPC is called
        self.seconds, self.peak = seconds, 0

    async def _send(self, *args, **kwargs):  # type: ignore[override]
        self.peak = max(self.peak, self.outstanding)
        await asyncio.sleep(self.seconds)


def _rpc_error(cause: Exception) -> SolanaRpcException:
    """The error solana-py raises for a failed request (its provider wraps the transport's error)."""
    try:
        raise SolanaRpcException(cause, _rpc_error, None, object()) from cause
    except SolanaRpcException as e:
        return e


def _throttle() -> SolanaRpcException:
    request = httpx.Request("POST", "http://rpc.invalid")
    return _rpc_error(httpx.HTTPStatusError("429", request=request, response=httpx.Response(429, request=request)))


async def test_never_more_outstanding_than_the_window() -> None:
    sender = Counting(window=8)
    await asyncio.gather(*(sender.send(Keypair(), []) for _ in range(40)))
    assert sender.peak == 8
    assert sender.outstanding == 0


async def test_a_lone_send_is_a_window_of_one() -> None:
    sender = Counting(window=1)
    await asyncio.gather(*(sender.send(Keypair(), []) for _ in range(5)))
    assert sender.peak == 1


def test_a_window_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        InFlight(None, window=0)  # type: ignore[arg-type]


async def test_a_429_halves_the_window_once_a_round_trip_and_the_request_is_retried() -> None:
    sender = InFlight(None, window=64)  # type: ignore[arg-type]
    answers = [_throttle(), _throttle(), "ok"]

    async def call() -> str:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert await sender._rpc(call) == "ok"
    assert sender.window == 32, "two refusals in one round trip: one cut"
    control = InFlight(None, window=64)  # type: ignore[arg-type]

    async def fails() -> str:
        raise _rpc_error(httpx.ConnectError("connection refused"))

    with pytest.raises(SolanaRpcException):
        await control._rpc(fails)  # another transport error: raised as it was, the window kept
    assert control.window == 64


def test_a_slow_confirmation_cuts_the_window_and_usual_ones_grow_it_back() -> None:
    sender = InFlight(None, window=16)  # type: ignore[arg-type]
    for _ in range(5):
        sender._took(0.5)  # the usual
    assert sender.window == 16
    sender._last_cut = float("-inf")
    sender._took(2.0)  # over twice the usual
    assert sender.window == 8
    for _ in range(8 * 16):
        sender._took(0.5)
    assert sender.window == 16, "one more a window's worth of confirmations: back to the ceiling"
    sender._took(0.5)
    assert sender.window == 16, "never past the window it was given"


def test_a_cluster_that_stays_slower_stops_counting_as_congested() -> None:
    sender = InFlight(None, window=16)  # type: ignore[arg-type]
    sender._took(0.1)
    for _ in range(2_000):
        sender._last_cut = float("-inf")
        sender._took(1.0)  # ten times the first: cut at first, then the usual catches up
    assert sender.usual is not None and sender.usual > 0.45
    for _ in range(16 * 16):
        sender._took(1.0)
    assert sender.window == 16


async def test_the_blockhash_is_read_once_a_slot_for_every_transaction_going_out() -> None:
    class Chain:
        reads = 0

        async def get_latest_blockhash(self, commitment):
            self.reads += 1
            await asyncio.sleep(0.01)
            return SimpleNamespace(value=SimpleNamespace(blockhash=Hash.new_unique(), last_valid_block_height=150))

    chain = Chain()
    sender = InFlight(chain, window=8)  # type: ignore[arg-type]
    got = await asyncio.gather(*(sender._blockhash(None) for _ in range(20)))
    assert chain.reads == 1 and len({g.blockhash for g in got}) == 1, "twenty sends in a slot: one read"
    again = await sender._blockhash(got[0].blockhash)  # an attempt expired under it: never reused
    assert chain.reads == 2 and again.blockhash != got[0].blockhash
    sender._latest = (sender._latest[0] - 1.0, sender._latest[1])  # a slot and more later
    assert (await sender._blockhash(None)).blockhash != again.blockhash and chain.reads == 3


async def test_an_rpc_throttling_past_the_patience_is_treated_as_down(monkeypatch) -> None:
    monkeypatch.setattr(client_module, "THROTTLED_PATIENCE_SECONDS", 0.3)
    sender = InFlight(None, window=4)  # type: ignore[arg-type]
    calls = 0

    async def always_throttled() -> str:
        nonlocal calls
        calls += 1
        raise _throttle()

    with pytest.raises(SolanaRpcException):
        await sender._rpc(always_throttled)
    assert 2 <= calls <= 6, "retried with growing pauses, then given up"
