"""IO amounts: exact conversion between what people type ("12.5") and integer base units."""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from gpunet.errors import GpunetError
from gpunet.tokens import IO_DECIMALS

__all__ = [
    "IO",
    "U64_MAX",
    "AmountError",
    "SettlementSplit",
    "escrow_for",
    "format_io",
    "parse_io",
    "parse_u64",
    "settle",
    "u64_json",
    "usage_cost",
]

IO = 10**IO_DECIMALS
"""Base units in one IO."""
U64_MAX = 2**64 - 1
# The coordinator's API serves every u64 as a string of decimal digits: JavaScript's numbers lose
# integers above 2**53, and an amount must never be rounded on its way to a page or a wallet.
_U64_TEXT = re.compile(r"[0-9]{1,20}")


class AmountError(GpunetError, ValueError):
    """An amount that is not a positive IO quantity with at most IO_DECIMALS decimals."""


def parse_io(text: str, *, allow_zero: bool = False) -> int:
    """'12.5' -> 12_500_000 base units, exactly; refuses negatives, NaN, too many decimals, > u64."""
    try:
        value = Decimal(text.strip())
    except (InvalidOperation, AttributeError):
        raise AmountError(f"{text!r} is not an amount of IO (for example 12.5)") from None
    if not value.is_finite():
        raise AmountError(f"{text!r} is not an amount of IO (for example 12.5)")
    units = value * IO
    if units != units.to_integral_value():
        raise AmountError(f"{text!r} has more than {IO_DECIMALS} decimals (1 base unit = {Decimal(1) / IO} IO)")
    if units < 0 or (units == 0 and not allow_zero):
        raise AmountError(f"the amount must be {'zero or more' if allow_zero else 'more than zero'}, got {text!r}")
    if units > U64_MAX:
        raise AmountError(f"{text!r} is more IO than a token account can hold")
    return int(units)


def format_io(units: int) -> str:
    """12_500_000 -> '12.5 IO' (exact: no float on the way)."""
    whole, frac = divmod(abs(units), IO)
    text = f"{whole:,}" + (f".{frac:0{IO_DECIMALS}d}".rstrip("0") if frac else "")
    return f"{'-' if units < 0 else ''}{text} IO"


def escrow_for(price_per_gpu_hour: int, gpus: int, seconds: int) -> int:
    """The escrow the program takes for `gpus` GPUs over `seconds` at a price, rounded up
    (programs/gpunet/src/math.rs escrow_for)."""
    return -(-(price_per_gpu_hour * gpus * seconds) // 3600)


def u64_json(value: int) -> str:
    """A u64 as the API serves it: its decimal digits (ValueError outside 0..U64_MAX)."""
    if type(value) is not int or not 0 <= value <= U64_MAX:
        raise ValueError(f"{value!r} is not a u64")
    return str(value)


def parse_u64(value: Any, what: str = "amount") -> int:
    """A u64 the API sent (`u64_json`): a string of decimal digits within u64, nothing else (not
    a JSON number, which may have been rounded on the way, nor a sign, spaces or other digits)."""
    if not isinstance(value, str) or not _U64_TEXT.fullmatch(value) or int(value) > U64_MAX:
        raise AmountError(f"{what}: expected a u64 as a string of decimal digits, got {str(value)[:40]!r}")
    return int(value)


SECONDS_PER_HOUR = 3_600
BPS_DENOMINATOR = 10_000


def usage_cost(price_per_gpu_hour: int, gpu_seconds: int) -> int:
    """What `gpu_seconds` cost at a price, rounded down (programs/gpunet/src/math.rs usage_cost)."""
    return price_per_gpu_hour * gpu_seconds // SECONDS_PER_HOUR


@dataclass(frozen=True)
class SettlementSplit:
    """How one settlement splits: payout + fee == amount."""

    amount: int
    payout: int
    fee: int


def settle(price_per_gpu_hour: int, settled: int, gpu_seconds: int, fee_bps: int, escrow_left: int) -> SettlementSplit:
    """The program's rule for one settlement (math.rs settle): `gpu_seconds` more on top of the
    share's `settled` GPU-seconds cost the cumulative total's cost less what was paid (so rounding
    never gains or loses a unit however usage is split), capped by the escrow left; the protocol fee
    (`fee_bps` of it) rounds up, so splitting usage into tiny reports cannot avoid it."""
    if not 0 <= fee_bps <= BPS_DENOMINATOR:
        raise AmountError(f"a fee of {fee_bps} bps is not in 0..{BPS_DENOMINATOR}")
    if min(price_per_gpu_hour, settled, gpu_seconds, escrow_left) < 0:
        raise AmountError("a settlement's price, GPU-seconds and escrow are never negative")
    cost = usage_cost(price_per_gpu_hour, settled + gpu_seconds) - usage_cost(price_per_gpu_hour, settled)
    amount = min(cost, escrow_left)
    fee = -(-amount * fee_bps // BPS_DENOMINATOR)
    return SettlementSplit(amount, amount - fee, fee)
