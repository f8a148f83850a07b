"""The gpunet program's Anchor IDL, generated from programs/gpunet (see scripts/idl)."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources

from anchorpy import Idl
from solders.pubkey import Pubkey

__all__ = ["IDL_RESOURCE", "PROGRAM_ID", "idl_constants", "idl_json", "load_idl"]

# Package data: gpunet/idl/gpunet.json, written by `scripts/idl`, checked by tests/test_idl.py.
IDL_RESOURCE = resources.files("gpunet").joinpath("idl", "gpunet.json")


@cache
def idl_json() -> str:
    """The committed IDL, as JSON text."""
    return IDL_RESOURCE.read_text(encoding="utf-8")


@cache
def load_idl() -> Idl:
    """The committed IDL, parsed by anchorpy3 (new Anchor 0.30+ format)."""
    return Idl.from_json(idl_json())


_INTEGER_TYPES = {"u8", "i8", "u16", "i16", "u32", "i32", "u64", "i64", "u128", "i128"}


@cache
def idl_constants() -> dict[str, int | str]:
    """The program's `#[constant]`s by name: integers as `int`, anything else as the IDL's text.
    `gpunet.limits` names the limits among them; read them there."""
    return {
        c["name"]: int(c["value"]) if c["type"] in _INTEGER_TYPES else c["value"]
        for c in json.loads(idl_json()).get("constants", [])
    }


PROGRAM_ID: Pubkey = Pubkey.from_string(json.loads(idl_json())["address"])
