"""Times as people read them: a moment is a UTC date, a span is hours and minutes, never raw
seconds or unix timestamps (those stay in --json, for scripts)."""

from __future__ import annotations

import time
from datetime import UTC, datetime

__all__ = ["at", "span", "until"]


def at(unix: int) -> str:
    """1764554400 -> '2025-12-01 02:00:00 UTC'."""
    return datetime.fromtimestamp(unix, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def span(seconds: int | None) -> str:
    """A duration: '2d03h', '1h29m', '4m05s', '12s'; '-' for None. Two units are enough to act on."""
    if seconds is None:
        return "-"
    seconds = max(int(seconds), 0)
    days, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3_600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def until(unix: int, now: float | None = None) -> str:
    """A moment and how far off it is: '2025-12-01 02:00:00 UTC (in 1h29m)' or '(2m05s ago)'."""
    left = int(unix - (time.time() if now is None else now))
    return f"{at(unix)} ({'in ' + span(left) if left > 0 else span(-left) + ' ago' if left < 0 else 'now'})"
