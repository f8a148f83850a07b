"""A transaction's gpunet events as plain JSON values, tolerant of foreign and malformed log lines."""

from __future__ import annotations

import base64
import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any

from solders.pubkey import Pubkey

from coordinator.indexer.borsh import event_decoder

__all__ = ["DecodedTransaction", "decode_transaction", "plain"]

_DATA = "Program data: "
_INVOKE = re.compile(r"^Program (\w+) invoke \[\d+\]$")
_RETURN = re.compile(r"^Program (\w+) (success|failed.*)$")


@dataclass
class DecodedTransaction:
    signature: str
    slot: int
    block_time: int | None
    failed: bool
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    lines_skipped: int = 0


def plain(value: Any) -> Any:
    """An anchorpy-decoded value as JSON: keys base58, byte arrays hex, enum variants by name."""
    if isinstance(value, Pubkey):
        return str(value)
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).hex()
    if isinstance(value, (list, tuple)):
        if value and all(type(x) is int and 0 <= x <= 255 for x in value) and len(value) == 32:
            return bytes(value).hex()
        return [plain(x) for x in value]
    if dataclasses.is_dataclass(value):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if hasattr(value, "_sumtype_constructor_names"):  # a borsh enum variant without fields
        return type(value).__name__
    raise TypeError(f"cannot turn {type(value).__name__} into JSON")


def decode_transaction(signature: str, tx: dict[str, Any], program_id: Pubkey) -> DecodedTransaction:
    """The events of one `getTransaction` result (any encoding: only its meta is read), in order.

    Like gpunet.events, only `Program data:` lines emitted while the gpunet program itself is
    executing count (so a CPI'd program cannot forge a gpunet event); each line is decoded on
    its own, so a malformed one is skipped and counted instead of losing the transaction.
    Data lines of other programs are skipped and counted too.
    """
    meta = tx.get("meta") or {}
    decoded = DecodedTransaction(signature, int(tx["slot"]), tx.get("blockTime"), meta.get("err") is not None)
    if decoded.failed:
        return decoded  # a failed transaction changed nothing, whatever it logged
    program = str(program_id)
    decoder = event_decoder()
    stack: list[str] = []
    for line in meta.get("logMessages") or []:
        if not isinstance(line, str):
            decoded.lines_skipped += 1
        elif m := _INVOKE.match(line):
            stack.append(m.group(1))
        elif _RETURN.match(line):
            if stack:
                stack.pop()
        elif line.startswith(_DATA):
            if not stack or stack[-1] != program:
                decoded.lines_skipped += 1
                continue
            try:
                event = decoder.decode(base64.b64decode(line[len(_DATA) :], validate=True))
            except ValueError:  # not base64 (binascii.Error), truncated, or a bad enum value
                event = None
            if event is None:
                decoded.lines_skipped += 1  # malformed, or not one of our events
                continue
            decoded.events.append(event)
    return decoded
