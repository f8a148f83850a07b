"""JSON that comes from outside the process (a worker's message, a request's body, a peer's answer),
parsed with a bounded nesting depth. The standard library's parser recurses once per level and
raises RecursionError (no ValueError) on input nested a few thousand deep, which every caller would
have to know to catch; this parser (pydantic-core's, the same the protocol's models validate with)
refuses anything nested deeper than its limit with a ValueError like any other malformed text."""

from __future__ import annotations

from typing import Any

from pydantic_core import from_json

from gpunet.errors import GpunetError

__all__ = ["NotJson", "parse_json"]


class NotJson(GpunetError, ValueError):
    """The text is not JSON (malformed, not UTF-8, or nested too deep); the message says where."""


def parse_json(raw: str | bytes) -> Any:
    """The value `raw` holds, or NotJson."""
    try:
        # as UTF-8 bytes: a str that cannot be (a lone surrogate) is refused here like bad bytes
        return from_json(raw.encode() if isinstance(raw, str) else raw)
    except ValueError as e:  # pydantic-core's own message: what and where ("recursion limit exceeded at line 1 ...")
        raise NotJson(str(e)) from None
