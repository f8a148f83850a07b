"""Structured logs (gpunet.logs). Units: both renderers give the same event and fields (JSON: one
object per line with timestamp, level, logger; human: the same names in a line of text), a
library's stdlib record goes through the same renderer with the bound context, a traceback stays in
one JSON line, a binding ends with its `@scoped` function, and a format that is not one is refused.
With real parts (gpunet-localnet, embedded PostgreSQL, the coordinator in this process,
`gpunet worker run` processes): placing a real lease, the coordinator's lines parse as JSON and
carry the lease bound around its placement and dispatch; the workers' lines (JSON on a pipe, as a
service manager reads them) carry their node from context; a worker run with --log-format human
writes the same events."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gpunet import logs

from .conftest import eventually
from .world import World, live_settings, running, running_lease, start_worker

# "2026-01-01T00:00:00.000000Z [info     ] lease.placed    [gpunet.coordinator.placement] lease=... nodes=..."
HUMAN = re.compile(r"^(\S+) \[(\w+)\s*\] (.+?)\s+\[([\w.]+)\](.*)$")


def _json_lines(text: str) -> list[dict]:
    """Every JSON line (a worker's log file also holds the lines its CLI prints for a person)."""
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def _human_lines(text: str) -> list[tuple[str, str, str, str]]:
    """(level, event, logger, fields) of each event line (a traceback's lines are not events)."""
    return [(m[2], m[3], m[4], m[5]) for line in text.splitlines() if (m := HUMAN.match(line))]


def _capture(level: int = logging.INFO) -> tuple[io.StringIO, io.StringIO, list[logging.Handler]]:
    """Both renderers on the root logger at once (added beside pytest's own handlers, not replacing them)."""
    as_json, as_text = io.StringIO(), io.StringIO()
    handlers = [logs.handler("json", as_json), logs.handler("human", as_text)]
    for h in handlers:
        logging.getLogger().addHandler(h)
    return as_json, as_text, handlers


def _release(handlers: list[logging.Handler]) -> None:
    for h in handlers:
        logging.getLogger().removeHandler(h)


async def test_both_formats_carry_the_same_events_and_fields_and_the_context_ends_with_its_function(caplog) -> None:
    caplog.set_level(logging.INFO)
    as_json, as_text, handlers = _capture()
    log = logs.get_logger("gpunet.test")

    @logs.scoped
    async def place(lease: str) -> None:
        logs.bind(lease=lease)
        log.info("lease.placed", nodes=["N1", "N2"], tx="SIG")
        logging.getLogger("websockets.client").warning("connection %s lost", "abc")  # a library's record
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            log.exception("coordinator.loop_failed", loop="placement")

    try:
        await place("LEASE1")
        log.info("coordinator.started", gateway="ws://x", unset=None)  # after the function: no lease
    finally:
        _release(handlers)

    lines = _json_lines(as_json.getvalue())
    assert [line["event"] for line in lines] == [
        "lease.placed",
        "connection abc lost",
        "coordinator.loop_failed",
        "coordinator.started",
    ]
    placed, foreign, failed, started = lines
    assert list(placed)[:4] == ["timestamp", "level", "logger", "event"]
    assert placed["level"] == "info" and placed["logger"] == "gpunet.test"
    assert placed["lease"] == "LEASE1" and placed["nodes"] == ["N1", "N2"] and placed["tx"] == "SIG"
    assert foreign["logger"] == "websockets.client" and foreign["level"] == "warning"
    assert foreign["lease"] == "LEASE1", "a library's line inside the work carries its context"
    assert failed["level"] == "error" and "RuntimeError: boom" in failed["exception"]
    assert failed["lease"] == "LEASE1" and failed["loop"] == "placement"
    assert "lease" not in started, "the binding ended with its function"
    assert "unset" not in started and started["gateway"] == "ws://x"  # a field without a value is left out

    human = _human_lines(as_text.getvalue())
    assert [(level, event) for level, event, _, _ in human] == [(line["level"], line["event"]) for line in lines]
    assert "lease=LEASE1" in human[0][3] and "tx=SIG" in human[0][3] and human[0][2] == "gpunet.test"
    assert "lease=" not in human[3][3]
    assert "RuntimeError: boom" in as_text.getvalue()  # the traceback under its line
    # Without a handler of ours (a library user, pytest): plain stdlib records whose message is the event.
    ours = [r.msg for r in caplog.records if isinstance(r.msg, dict)]
    assert ours[0]["event"] == "lease.placed" and ours[0]["lease"] == "LEASE1"


def test_the_format_comes_from_the_flag_then_the_environment_then_the_terminal(monkeypatch) -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv(logs.ENV, raising=False)
    assert logs.resolve_format(None, Tty()) == "human"
    assert logs.resolve_format(None, io.StringIO()) == "json"  # a pipe, a file, a service manager
    monkeypatch.setenv(logs.ENV, "human")
    assert logs.resolve_format(None, io.StringIO()) == "human"
    assert logs.resolve_format("JSON", Tty()) == "json"  # the flag wins
    with pytest.raises(ValueError, match="--log-format 'xml': expected one of json, human"):
        logs.resolve_format("xml")
    monkeypatch.setenv(logs.ENV, "yaml")
    with pytest.raises(ValueError, match="GPUNET_LOG_FORMAT 'yaml'"):
        logs.resolve_format(None)


def test_a_worker_with_a_bad_log_format_is_refused_before_it_starts(tmp_path) -> None:
    gpunet = Path(sys.executable).with_name("gpunet")
    out = subprocess.run(
        [str(gpunet), "worker", "run", "--log-format", "xml", "--simulate-gpus", "H100:1:80"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "COLUMNS": "200"},
    )
    assert out.returncode == 2, out.stderr
    assert "--log-format 'xml': expected one of json, human" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.timeout(300)
async def test_a_real_placement_logs_its_lease_and_the_workers_their_node(
    node, chain, pool, database_url, tmp_path, spawned, caplog
) -> None:
    caplog.set_level(logging.INFO)
    world = await World().build(chain, tmp_path)
    settings = live_settings(
        node,
        database_url,
        settle_seconds=1,
    )
    api = f"http://127.0.0.1:{settings.api_port}"
    as_json, as_text, handlers = _capture()
    keys = world.node_keys()
    formats = ["json", "", "human"]  # "": none given, stdout a file: JSON
    try:
        async with running(settings, pool, world.admin) as coordinator:
            workers = [
                start_worker(
                    world,
                    i,
                    coordinator.gateway.url,
                    tmp_path / f"worker{i}.log",
                    env={"GPUNET_LOG_FORMAT": fmt} if fmt else {},
                )
                for i, fmt in enumerate(formats)
            ]
            spawned.extend(workers)

            async def connected() -> bool:
                return len(coordinator.gateway.sessions) == 3

            await eventually(connected, what="3 worker sessions")
            lease, placed = await running_lease(world, api, chain, 120)
            for proc in workers:
                proc.terminate()
            for proc in workers:
                await asyncio.to_thread(proc.wait, 30)
    finally:
        _release(handlers)

    lines = _json_lines(as_json.getvalue())
    assert lines and all({"timestamp", "level", "logger", "event"} <= set(line) for line in lines)
    [placement] = [line for line in lines if line["event"] == "lease.placed"]
    # The lease comes from the context bound around its placement (the event names only nodes and tx).
    assert placement["lease"] == str(lease) and sorted(placement["nodes"]) == sorted(placed) and placement["tx"]
    dispatched = [line for line in lines if line["event"] == "job.dispatched"]
    assert {line["node"] for line in dispatched} == set(placed)
    assert all(line["lease"] == str(lease) for line in dispatched)
    connects = [line for line in lines if line["event"] == "worker.connected"]
    assert sorted(line["node"] for line in connects) == sorted(keys)
    # The human renderer saw the same events, in the same order, with the same fields.
    # (gpunet's events: a library's free-text message could hold brackets the line's pattern would misread)
    human = _human_lines(as_text.getvalue())
    ours = [line["event"] for line in lines if line["logger"].startswith("gpunet.")]
    assert len(ours) >= 10 and [event for _, event, logger, _ in human if logger.startswith("gpunet.")] == ours
    [placed_text] = [fields for _, event, _, fields in human if event == "lease.placed"]
    assert f"lease={lease}" in placed_text and f"tx={placement['tx']}" in placed_text

    for i, fmt in enumerate(formats):
        text = (tmp_path / f"worker{i}.log").read_text()
        if fmt == "human":
            events = [(event, fields) for _, event, _, fields in _human_lines(text)]
            assert any(e == "session.welcome" and f"node={keys[i]}" in f for e, f in events), text[-2000:]
            if keys[i] in placed:
                assert any(e == "job.started" and f"lease={lease}" in f for e, f in events)
            continue
        worker_lines = _json_lines(text)
        assert worker_lines, text[-2000:]
        # The session's lines name no node themselves: it is the agent's context.
        [welcome, *_] = [line for line in worker_lines if line["event"] == "session.welcome"]
        assert welcome["node"] == keys[i] and welcome["logger"] == "gpunet.worker.session"
        assert all(line["node"] == keys[i] for line in worker_lines if line["logger"].startswith("gpunet."))
        if keys[i] in placed:
            [started] = [line for line in worker_lines if line["event"] == "job.started"]
            assert started["lease"] == str(lease)
