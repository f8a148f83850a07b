"""`gpunet lease watch --auto-top-up MAX_IO`: a real `gpunet` process follows a lease on the local
node and tops it up to keep its runway, never past the cap; a lease with runway enough is left alone,
and a top-up the chain refuses is reported once, not tried again. Each watch ends when the test
closes its lease (the watch follows a lease until it stops running)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gpunet.amounts import IO, escrow_for
from gpunet.cli.common import Exit

from .conftest import Gpunet

GPUNET = Path(sys.executable).with_name("gpunet")
WAIT_SECONDS = 120.0  # the most a condition may take on a loaded machine (the tests wait on conditions)


class Watch:
    """`gpunet lease watch ... --json` as its own process: its stdout's JSON lines, as they come."""

    def __init__(self, g: Gpunet, lease: str, *args: str, wallet: str = "client") -> None:
        argv = [str(GPUNET), "lease", "watch", lease, "--every", "1s", *args, "--json"]
        argv += ["--url", g.node.url, "--keypair", str(g.key(wallet))]
        self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: list[dict[str, Any]] = []
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self._changed:
                self.lines.append(json.loads(line))
                self._changed.notify_all()

    def events(self, name: str) -> list[dict[str, Any]]:
        return [line for line in self.lines if line["event"] == name]

    def wait(self, found: Callable[[list[dict[str, Any]]], Any], what: str) -> Any:
        """Waits until `found(lines)` is truthy and returns it."""
        deadline = time.monotonic() + WAIT_SECONDS
        with self._changed:
            while not (result := found(self.lines)):
                if self.process.poll() is not None and not self._reader.is_alive():
                    stderr = self.process.stderr.read() if self.process.stderr else ""
                    pytest.fail(f"the watch exited ({self.process.returncode}) before {what}: {stderr}")
                if time.monotonic() > deadline:
                    pytest.fail(f"no {what} within {WAIT_SECONDS:.0f} s; the watch printed {self.lines}")
                self._changed.wait(0.5)
        return result

    def samples_after(self, checks: int, more: int) -> None:
        """Waits until the watch has read the lease `more` times after its read number `checks`."""
        self.wait(lambda lines: any(x["event"] == "lease" and x["checks"] >= checks + more for x in lines),
                  f"{more} reads after read {checks}")  # fmt: skip

    def ended(self) -> int:
        """Waits for the watch to end; its exit code."""
        self.wait(lambda lines: any(x["event"] == "ended" for x in lines), "the end of the watch")
        return self.process.wait(timeout=WAIT_SECONDS)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self._reader.join(timeout=5)
        for pipe in (self.process.stdout, self.process.stderr):
            if pipe is not None:
                pipe.close()


@pytest.fixture
def watches() -> Iterator[list[Watch]]:
    started: list[Watch] = []
    yield started
    for w in started:
        w.stop()


def _placed_lease(g: Gpunet, lease_id: int, duration: str, gpus: int = 1) -> str:
    """A lease of `gpus` H100s at most 2 IO per GPU-hour, placed on node1 at 2 IO (so it is running)."""
    lease = g.json(
        "lease", "open", "--gpu", "H100", "--count", str(gpus), "--max-price", "2", "--duration", duration,
        "--lease-id", str(lease_id), wallet="client",
    )["lease"]  # fmt: skip
    g.assign(lease, gpus, 2 * IO)
    return lease


def _deposited(g: Gpunet, lease: str) -> int:
    return g.json("lease", "show", lease)["deposited"]


def _chain_time(g: Gpunet) -> int:
    return g.node.call("getBlockTime", [g.node.call("getSlot")["result"]])["result"]


def test_a_lease_under_its_runway_is_topped_up_to_keep_it(market, watches) -> None:
    g = market
    lease = _placed_lease(g, 1, "1h")
    before = _deposited(g, lease)
    w = Watch(g, lease, "--auto-top-up", "10", "--runway", "2h")
    watches.append(w)

    [top_up] = w.wait(lambda _: w.events("top_up"), "a top-up")
    # the time left was under an hour: the top-up brings it to 1.5 x the 2 h runway
    assert 2 * 3600 <= top_up["extra_seconds"] <= 2 * 3600 + 60
    assert top_up["amount"] == escrow_for(2 * IO, 1, top_up["extra_seconds"])
    assert _deposited(g, lease) == before + top_up["amount"]
    shown = g.json("lease", "show", lease)
    assert shown["duration_seconds"] == 3600 + top_up["extra_seconds"]
    assert shown["seconds_to_end"] > 2 * 3600, "the lease now runs past the runway"

    w.samples_after(top_up["checks"], 2)  # its runway is kept now: no further top-up
    g("lease", "close", lease, wallet="client")
    assert w.ended() == 0
    assert len(w.events("top_up")) == 1 and not w.events("cap_reached")
    assert w.events("ended")[0]["topped_up"] == top_up["amount"]


def test_a_lease_with_runway_enough_is_not_topped_up(market, watches) -> None:
    g = market
    lease = _placed_lease(g, 2, "3h")
    before, sent = _deposited(g, lease), g.signatures_of("client")
    w = Watch(g, lease, "--auto-top-up", "10", "--runway", "1h")
    watches.append(w)

    w.samples_after(0, 3)
    assert not w.events("top_up") and not w.events("top_up_failed")
    assert _deposited(g, lease) == before and g.signatures_of("client") == sent, "nothing was sent"
    first = w.events("lease")[0]
    assert first["status"] == "Active" and 3 * 3600 - 60 < first["time_left_seconds"] <= 3 * 3600

    g("lease", "close", lease, wallet="client")
    assert w.ended() == 0
    assert w.events("ended")[0]["status"] == "Closing"


def test_a_lease_burning_fast_runs_into_the_cap_and_is_topped_up_no_further(market, watches) -> None:
    """The attack-ish case: a short runway on a short lease wants a top-up every few seconds; the
    watch tops up until the cap leaves no room, says so, and never sends more than the cap in all."""
    g = market
    lease = _placed_lease(g, 3, "12s")
    before = _deposited(g, lease)
    cap = 10_000  # base units: two 6-second top-ups at 2 IO per GPU-hour (3,334 each) and part of a third
    w = Watch(g, lease, "--auto-top-up", "0.01", "--runway", "10s")
    watches.append(w)

    [capped] = w.wait(lambda _: w.events("cap_reached"), "the cap")
    top_ups = w.events("top_up")
    assert len(top_ups) >= 2, "the lease was topped up more than once before the cap"
    spent = sum(t["amount"] for t in top_ups)
    assert spent <= cap and capped["topped_up"] == spent and capped["cap"] == cap
    assert all(t["amount"] == escrow_for(2 * IO, 1, t["extra_seconds"]) for t in top_ups)
    assert _deposited(g, lease) == before + spent, "the chain holds exactly what the watch says it sent"

    w.samples_after(capped["checks"], 3)  # the lease keeps burning under its runway: no further top-up
    assert w.events("top_up") == top_ups and len(w.events("cap_reached")) == 1
    assert _deposited(g, lease) == before + spent

    g("lease", "close", lease, wallet="client")
    assert w.ended() == 0


def test_a_top_up_the_chain_refuses_is_reported_once_and_not_retried(market, watches) -> None:
    """A lease past its end can only be closed: the program refuses to extend it (LeaseExpired)."""
    g = market
    lease = _placed_lease(g, 4, "2s")
    ends_at = g.json("lease", "show", lease)["ends_at"]
    deadline = time.monotonic() + WAIT_SECONDS
    while _chain_time(g) <= ends_at:  # the chain's clock, which the program judges by
        assert time.monotonic() < deadline, "the chain's clock never passed the lease's end"
        time.sleep(0.2)
    before, sent = _deposited(g, lease), g.signatures_of("client")
    w = Watch(g, lease, "--auto-top-up", "10", "--runway", "1h")
    watches.append(w)

    [failed] = w.wait(lambda _: w.events("top_up_failed"), "the refusal")
    assert "LeaseExpired" in failed["error"] or "expired" in failed["error"].lower(), failed
    w.samples_after(failed["checks"], 3)  # three more reads of a lease still under its runway
    assert len(w.events("top_up_failed")) == 1 and not w.events("top_up")
    assert _deposited(g, lease) == before and g.signatures_of("client") == sent

    g("lease", "close", lease, wallet="client")
    assert w.ended() == Exit.REFUSED, "the watch's exit says a top-up failed"


def test_watch_refuses_bad_input_before_reading_anything(market) -> None:
    g = market
    lease = _placed_lease(g, 5, "1h")
    refused = g("lease", "watch", lease, "--auto-top-up", "0", wallet="client", expect=Exit.BAD_INPUT)
    assert "more than zero" in refused.stderr
    refused = g("lease", "watch", lease, "--auto-top-up", "1.0000001", wallet="client", expect=Exit.BAD_INPUT)
    assert "decimals" in refused.stderr
    refused = g("lease", "watch", lease, "--runway", "soon", wallet="client", expect=Exit.BAD_INPUT)
    assert "not a duration" in refused.stderr
    stranger = g("lease", "watch", lease, "--auto-top-up", "5", wallet="supplier", expect=Exit.BAD_INPUT)
    assert "only the lease's client can top it up" in stranger.stderr


def test_the_top_up_plan_is_exact_and_never_passes_the_cap() -> None:
    from gpunet.cli.lease_watch import TopUp, plan_top_up

    assert plan_top_up(3600, 3600, 2 * IO, 1, 0, 10 * IO) is None, "a runway kept needs nothing"
    # 40 min left of a 1 h runway: up to 1.5 h, 50 min more, at 2 IO/h x 2 GPUs
    assert plan_top_up(2400, 3600, 2 * IO, 2, 0, 10 * IO) == TopUp(3000, escrow_for(2 * IO, 2, 3000), False)
    # 1.000003 IO left under the cap at 4 IO/h: 900 s fit (1 IO), 901 would not (1.001112 IO)
    assert plan_top_up(0, 3600, 2 * IO, 2, 9 * IO - 3, 10 * IO) == TopUp(900, IO, True)
    assert escrow_for(2 * IO, 2, 901) > IO + 3
    assert plan_top_up(0, 3600, 2 * IO, 2, 10 * IO, 10 * IO) == TopUp(0, 0, True), "a spent cap buys nothing"
    # rounding up never crosses the cap: 1 base unit left buys the seconds whose escrow rounds to 1
    assert plan_top_up(0, 3600, 3 * IO, 1, 10 * IO - 1, 10 * IO) == TopUp(0, 0, True)
    assert plan_top_up(0, 3600, 3_600, 1, 0, 1) == TopUp(1, 1, True)
