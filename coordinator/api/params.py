"""Query and path parameters: parsed and checked, or a 400 that says what is wrong."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from solders.pubkey import Pubkey
from solders.signature import Signature

from gpunet.amounts import AmountError, parse_u64, u64_json
from gpunet.catalog import GPU_MODELS, REGIONS, CatalogError, gpu_model, region
from gpunet.limits import ANY

__all__ = [
    "PUBKEY_SCHEMA",
    "SIGNATURE_SCHEMA",
    "U64_SCHEMA",
    "BadRequest",
    "Param",
    "parse_pubkey",
    "parse_query",
    "parse_signature",
]

_MAX_I64 = 2**63 - 1
# Custom formats: no regex says "base58 of exactly 32 (64) bytes", so the formats name it.
PUBKEY_SCHEMA = {"type": "string", "format": "base58-pubkey", "description": "base58 of a 32-byte public key"}
SIGNATURE_SCHEMA = {"type": "string", "format": "base58-signature", "description": "base58 of a 64-byte signature"}
# Every u64 the API takes or gives: decimal digits in a string (JavaScript rounds integers above 2**53).
U64_SCHEMA = {"type": "string", "pattern": "^[0-9]+$", "maxLength": 20, "format": "u64"}


class BadRequest(Exception):
    """A request parameter is missing, unknown or malformed; the message says which and why."""


@dataclass(frozen=True)
class Param:
    name: str
    kind: str  # "pubkey", "signature", "integer", "u64", "boolean", "choice", "gpu_model" or "region"
    column: str | None = None  # the SQL filter it becomes; None for paging
    op: str = "="
    minimum: int = 0
    maximum: int = _MAX_I64
    choices: tuple[str, ...] = ()
    default: Any = None
    description: str = ""
    required: bool = False  # a request without it is refused (400), and the OpenAPI document says so

    def schema(self) -> dict[str, Any]:
        """Its OpenAPI schema."""
        if self.kind == "integer":
            return {
                "type": "integer",
                "minimum": self.minimum,
                "maximum": self.maximum,
                **({"default": self.default} if self.default is not None else {}),
            }
        if self.kind == "u64":  # a string of digits, as the answers give u64s (coordinator.api.u64)
            return {**U64_SCHEMA, **({"default": u64_json(self.default)} if self.default is not None else {})}
        if self.kind == "boolean":
            return {"type": "boolean"}
        if self.kind == "choice":
            return {"type": "string", "enum": list(self.choices)}
        if self.kind == "signature":
            return SIGNATURE_SCHEMA
        if self.kind in _CATALOG:
            # a name (case-insensitive) or its catalog code; "any" or 0 for any
            names = [m.name for m in GPU_MODELS] if self.kind == "gpu_model" else list(REGIONS.values())
            return {"type": "string", "examples": [*names, "any"], "default": "any"}
        return PUBKEY_SCHEMA


def parse_pubkey(name: str, raw: str) -> str:
    try:
        return str(Pubkey.from_string(raw))
    except ValueError:
        raise BadRequest(f"{name}: {raw[:60]!r} is not a base58 public key") from None


def parse_signature(name: str, raw: str) -> str:
    try:
        return str(Signature.from_string(raw))
    except ValueError:
        raise BadRequest(f"{name}: {raw[:100]!r} is not a base58 transaction signature") from None


def _catalog_code(kind: str, name: str, raw: str) -> int:
    """A GPU model's or region's catalog code from its name or code; "any" (or 0) is ANY."""
    if raw.strip().lower() in ("any", str(ANY)):
        return ANY
    try:
        return gpu_model(raw.strip()).code if kind == "gpu_model" else region(raw.strip())
    except CatalogError as e:
        raise BadRequest(f"{name}: {e}") from None


_CATALOG = ("gpu_model", "region")


def _parse(p: Param, raw: str) -> Any:
    if p.kind in _CATALOG:
        return _catalog_code(p.kind, p.name, raw)
    if p.kind == "pubkey":
        return parse_pubkey(p.name, raw)
    if p.kind == "signature":
        return parse_signature(p.name, raw)
    if p.kind == "integer":
        try:
            value = int(raw, 10)
        except ValueError:
            raise BadRequest(f"{p.name}: {raw[:40]!r} is not an integer") from None
        if not p.minimum <= value <= p.maximum:
            raise BadRequest(f"{p.name}: {value} is out of range [{p.minimum}, {p.maximum}]")
        return value
    if p.kind == "u64":
        try:
            value = parse_u64(raw, p.name)
        except AmountError as e:
            raise BadRequest(str(e)) from None
        if value < p.minimum:
            raise BadRequest(f"{p.name}: {value} is less than {p.minimum}")
        return value
    if p.kind == "boolean":
        if raw not in ("true", "false"):
            raise BadRequest(f"{p.name}: expected true or false, got {raw[:40]!r}")
        return raw == "true"
    if raw not in p.choices:
        raise BadRequest(f"{p.name}: {raw[:40]!r} is not one of {', '.join(p.choices)}")
    return raw


def parse_query(query: Mapping[str, str] | Any, params: Iterable[Param]) -> dict[str, Any]:
    """The values of `params` in `query` (defaults filled in); unknown or repeated names are refused."""
    known = {p.name: p for p in params}
    values: dict[str, Any] = {p.name: p.default for p in known.values() if p.default is not None}
    seen: set[str] = set()
    for name, raw in query.multi_items() if hasattr(query, "multi_items") else query.items():
        if name not in known:
            raise BadRequest(f"unknown parameter {name[:40]!r}; expected one of {', '.join(sorted(known))}")
        if name in seen:
            raise BadRequest(f"{name}: given more than once")
        seen.add(name)
        values[name] = _parse(known[name], raw)
    for p in known.values():
        if p.required and p.name not in values:
            raise BadRequest(f"{p.name} is required")
    return values
