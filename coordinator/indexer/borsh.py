"""The indexer's fast path for event bodies: borsh readers compiled from the committed IDL.

gpunet.events (anchorpy + construct) takes ~150 µs per event, which alone caps the indexer
below its 5,000 events/s target; these readers use struct.unpack_from and take a few µs. They
return exactly what `decode.plain` makes of the SDK's decoding (keys base58, 32-byte arrays
hex, enum variants by name); tests/coordinator/test_decode.py holds the two to that on every
event kind, and on truncated input both raise.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from functools import cache
from typing import Any

from solders.pubkey import Pubkey

from gpunet.idl import idl_json

__all__ = ["EventDecoder", "event_decoder"]

# A reader takes (buffer, offset) and returns (value, next offset); it raises on short input.
Reader = Callable[[bytes, int], tuple[Any, int]]

_SCALARS = {"u8": "<B", "u16": "<H", "u32": "<I", "u64": "<Q", "i8": "<b", "i16": "<h", "i32": "<i", "i64": "<q"}


class Truncated(ValueError):
    """The event data ends before its last field."""


def _scalar(fmt: str) -> Reader:
    s = struct.Struct(fmt)

    def read(buf: bytes, at: int) -> tuple[Any, int]:
        try:
            return s.unpack_from(buf, at)[0], at + s.size
        except struct.error:
            raise Truncated("event data too short") from None

    return read


def _pubkey(buf: bytes, at: int) -> tuple[Any, int]:
    if len(buf) < at + 32:
        raise Truncated("event data too short")
    return str(Pubkey.from_bytes(buf[at : at + 32])), at + 32


def _bool(buf: bytes, at: int) -> tuple[Any, int]:
    if len(buf) <= at:
        raise Truncated("event data too short")
    return buf[at] != 0, at + 1


def _as_plain_list(items: list[Any]) -> Any:
    # decode.plain's rule: a list of 32 byte-sized ints is a hash or key, shown as hex.
    if len(items) == 32 and all(type(x) is int and 0 <= x <= 255 for x in items):
        return bytes(items).hex()
    return items


def _sequence(item: Reader, fixed: int | None) -> Reader:
    count_reader = _scalar("<I")

    def read(buf: bytes, at: int) -> tuple[Any, int]:
        if fixed is None:
            n, at = count_reader(buf, at)
        else:
            n = fixed
        items = []
        for _ in range(n):
            value, at = item(buf, at)
            items.append(value)
        return _as_plain_list(items), at

    return read


def _option(item: Reader) -> Reader:
    def read(buf: bytes, at: int) -> tuple[Any, int]:
        if len(buf) <= at:
            raise Truncated("event data too short")
        if buf[at] == 0:
            return None, at + 1
        return item(buf, at + 1)

    return read


def _struct(fields: list[tuple[str, Reader]]) -> Reader:
    def read(buf: bytes, at: int) -> tuple[Any, int]:
        out = {}
        for name, reader in fields:
            out[name], at = reader(buf, at)
        return out, at

    return read


def _enum(variants: list[str]) -> Reader:
    def read(buf: bytes, at: int) -> tuple[Any, int]:
        if len(buf) <= at:
            raise Truncated("event data too short")
        if buf[at] >= len(variants):
            raise ValueError(f"no enum variant {buf[at]}")
        return variants[buf[at]], at + 1

    return read


class EventDecoder:
    def __init__(self, idl: dict[str, Any]) -> None:
        self._types = {t["name"]: t["type"] for t in idl.get("types", [])}
        self._compiled: dict[str, Reader] = {}
        self.events: dict[bytes, tuple[str, Reader]] = {
            bytes(e["discriminator"]): (e["name"], self._defined(e["name"])) for e in idl.get("events", [])
        }

    def _defined(self, name: str) -> Reader:
        if name not in self._compiled:
            ty = self._types[name]
            if ty["kind"] == "struct":
                self._compiled[name] = _struct([(f["name"], self._reader(f["type"])) for f in ty["fields"]])
            elif ty["kind"] == "enum":
                if any(v.get("fields") for v in ty["variants"]):
                    raise NotImplementedError(f"enum {name} has variants with fields")
                self._compiled[name] = _enum([v["name"] for v in ty["variants"]])
            else:
                raise NotImplementedError(f"IDL type kind {ty['kind']!r}")
        return self._compiled[name]

    def _reader(self, ty: Any) -> Reader:
        if isinstance(ty, str):
            if ty in _SCALARS:
                return _scalar(_SCALARS[ty])
            if ty == "pubkey":
                return _pubkey
            if ty == "bool":
                return _bool
            raise NotImplementedError(f"IDL type {ty!r}")
        if "defined" in ty:
            return self._defined(ty["defined"]["name"])
        if "array" in ty:
            return _sequence(self._reader(ty["array"][0]), int(ty["array"][1]))
        if "vec" in ty:
            return _sequence(self._reader(ty["vec"]), None)
        if "option" in ty:
            return _option(self._reader(ty["option"]))
        raise NotImplementedError(f"IDL type {ty!r}")

    def decode(self, data: bytes) -> tuple[str, dict[str, Any]] | None:
        """(event name, fields) of one `Program data:` payload; None when the discriminator is
        not one of ours. Raises ValueError on truncated or invalid data."""
        found = self.events.get(data[:8])
        if found is None:
            return None
        name, reader = found
        value, _ = reader(data, 8)
        return name, value


@cache
def event_decoder() -> EventDecoder:
    return EventDecoder(json.loads(idl_json()))
