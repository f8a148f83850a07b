"""Program errors by code: gpunet's own (from the IDL) and Anchor's built-in ones."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from typing import Any

from anchorpy.error import LangErrorMessage, _LangErrorCode

from gpunet.idl import load_idl

__all__ = ["ProgramError", "custom_error_code", "program_error"]


@dataclass(frozen=True)
class ProgramError:
    """A program error a transaction failed with: `code`, its `name` and a message a user can act on."""

    code: int
    name: str
    message: str

    def __str__(self) -> str:
        return f"{self.name} ({self.code}): {self.message}"


@cache
def _gpunet_errors() -> dict[int, ProgramError]:
    return {e.code: ProgramError(e.code, e.name, e.msg or e.name) for e in load_idl().errors or []}


def program_error(code: int) -> ProgramError | None:
    """The gpunet or Anchor error with this custom error code, if it is one."""
    if found := _gpunet_errors().get(code):
        return found
    try:
        lang = _LangErrorCode(code)
    except ValueError:
        return None
    return ProgramError(code, lang.name, LangErrorMessage.get(code, lang.name))


_CUSTOM_IN_LOG = re.compile(r"custom program error: (0x[0-9a-fA-F]+)")


def custom_error_code(err: Any) -> int | None:
    """The custom error code in a transaction error, as RPC JSON (`{"InstructionError": [i, {"Custom": n}]}`)
    or as a log line ("... custom program error: 0x1770"); None if it carries none."""
    if isinstance(err, str):
        match = _CUSTOM_IN_LOG.search(err)
        return int(match.group(1), 16) if match else None
    if isinstance(err, dict):
        inner = err.get("InstructionError")
        if isinstance(inner, list) and len(inner) == 2 and isinstance(inner[1], dict):
            custom = inner[1].get("Custom")
            return custom if isinstance(custom, int) else None
    return None
