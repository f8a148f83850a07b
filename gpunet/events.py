"""gpunet events, decoded from transaction logs (`Program data:` lines of the gpunet program only)."""

from __future__ import annotations

from functools import cache
from typing import Any

from anchorpy import Coder, Event, EventParser
from solders.pubkey import Pubkey

from gpunet.idl import PROGRAM_ID, load_idl

__all__ = ["EVENT_NAMES", "Event", "decode_events", "events_of_transaction"]

EVENT_NAMES: tuple[str, ...] = tuple(e.name for e in load_idl().events or ())
"""Every event the program emits, in the IDL's order."""


@cache
def _parser(program_id: Pubkey) -> EventParser:
    return EventParser(program_id, Coder(load_idl()))


def decode_events(logs: list[str], program_id: Pubkey = PROGRAM_ID) -> list[Event]:
    """The events the program emitted, in order. Lines of other programs (and CPIs into
    them) are ignored, so another program cannot forge a gpunet event by logging one."""
    if not logs:
        return []
    found: list[Event] = []
    _parser(program_id).parse_logs(list(logs), found.append)
    return found


def events_of_transaction(get_transaction_result: dict[str, Any], program_id: Pubkey = PROGRAM_ID) -> list[Event]:
    """The events of a `getTransaction` JSON result; none for a failed transaction."""
    meta = (get_transaction_result or {}).get("meta") or {}
    if meta.get("err") is not None:
        return []
    return decode_events(meta.get("logMessages") or [], program_id)
