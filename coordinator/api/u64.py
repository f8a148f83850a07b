"""The API's one rule for big integers: every u64 is a JSON string of decimal digits
(gpunet.amounts.u64_json), so that a JavaScript client, whose numbers lose integers above 2**53,
never rounds an amount. That is each numeric(20, 0) column of the ledger (token amounts, lease ids,
epochs, GPU-seconds), each u64 field of an event's data (by the IDL), and each amount the coordinator
computes. Every other integer (slots, i64 unix times, u32/u16/u8 fields, counts, row ids) stays a
JSON number: all are far below 2**53."""

from __future__ import annotations

import json
from functools import cache
from typing import Any

from gpunet.amounts import u64_json
from gpunet.idl import idl_json

__all__ = ["event_data_json", "integers_as_text"]

_WIDE = ("u64", "u128")


@cache
def _idl_types() -> dict[str, dict[str, Any]]:
    return {t["name"]: t["type"] for t in json.loads(idl_json())["types"]}


def _typed(kind: Any, value: Any) -> Any:
    """`value` (as coordinator.indexer.decode.plain made it) with its u64s, by IDL type `kind`, as text."""
    if isinstance(kind, str):
        return u64_json(value) if kind in _WIDE and type(value) is int else value
    if "option" in kind:
        return None if value is None else _typed(kind["option"], value)
    if "vec" in kind or "array" in kind:  # a byte array is hex already: a string, left as it is
        inner = kind["vec"] if "vec" in kind else kind["array"][0]
        return [_typed(inner, v) for v in value] if isinstance(value, list) else value
    if "defined" in kind:
        found = _idl_types().get(kind["defined"]["name"], {})
        if found.get("kind") == "struct" and isinstance(value, dict):
            return _fields(found.get("fields", []), value)
    return value  # an enum variant's name


def _fields(fields: list[dict[str, Any]], value: dict[str, Any]) -> dict[str, Any]:
    types = {f["name"]: f["type"] for f in fields}
    return {k: _typed(types[k], v) if k in types else v for k, v in value.items()}


def event_data_json(name: str, data: dict[str, Any]) -> dict[str, Any]:
    """An indexed event's data as the API serves it: its u64 fields (nested ones too) as text."""
    found = _idl_types().get(name)
    return _fields(found.get("fields", []), data) if found and found.get("kind") == "struct" else data


def integers_as_text(value: Any) -> Any:
    """Every integer in `value` as text: for an audit difference's compared values, which may be any
    column, event or balance (their type is not known there, so the rule is the simplest one)."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list | tuple):
        return [integers_as_text(v) for v in value]
    if isinstance(value, dict):
        return {k: integers_as_text(v) for k, v in value.items()}
    return value
