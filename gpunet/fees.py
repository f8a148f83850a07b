"""What a transaction bids to land on a busy cluster: a compute-unit limit from its own simulation
(plus a margin, so the leader schedules it for what it uses rather than the 200,000-per-instruction
default) and a priority fee from what recent transactions paid to write the same accounts
(`getRecentPrioritizationFees`: a percentile, capped). Every gpunet transaction is sent through
`gpunet.client.send_and_confirm`, which applies this.

Settings: `GPUNET_PRIORITY_FEE_PERCENTILE` (default 75) and `GPUNET_PRIORITY_FEE_MAX` (micro-lamports
per compute unit, default 1,000,000: at most 0.2 SOL for a transaction of 200,000 CU); 0 as the
maximum turns priority fees off.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from solana.rpc.async_api import AsyncClient
from solders.compute_budget import set_compute_unit_limit, set_compute_unit_price
from solders.instruction import Instruction
from solders.pubkey import Pubkey

from gpunet.errors import GpunetError
from gpunet.json_input import parse_json

__all__ = ["MAX_COMPUTE_UNITS", "Budget", "FeeError", "FeePolicy", "recent_fees", "with_budget"]

MAX_COMPUTE_UNITS = 1_400_000  # a transaction's ceiling (and what a simulation runs under)
_MARGIN_UNITS = 1_000  # over the simulated use, beyond the proportional margin


class FeeError(GpunetError, ValueError):
    """A fee setting that is not a number in its range."""


@dataclass(frozen=True)
class FeePolicy:
    percentile: float = 75.0  # of the recent slots' fees for the accounts the transaction writes
    max_micro_lamports: int = 1_000_000  # per compute unit: the most it bids (0: no priority fee)
    margin: float = 1.2  # compute-unit limit = simulated use x margin + 1,000

    @classmethod
    def from_env(cls) -> FeePolicy:
        try:
            percentile = float(os.environ.get("GPUNET_PRIORITY_FEE_PERCENTILE", "75"))
            cap = int(os.environ.get("GPUNET_PRIORITY_FEE_MAX", "1000000"))
        except ValueError as e:
            raise FeeError(f"GPUNET_PRIORITY_FEE_PERCENTILE / GPUNET_PRIORITY_FEE_MAX: {e}") from None
        if not 0 <= percentile <= 100 or cap < 0:
            raise FeeError("GPUNET_PRIORITY_FEE_PERCENTILE must be 0..100 and GPUNET_PRIORITY_FEE_MAX >= 0")
        return cls(percentile, cap)

    def price(self, recent: Sequence[int]) -> int:
        """Micro-lamports per CU to bid: the percentile of `recent` (nearest rank), capped."""
        if not recent or self.max_micro_lamports == 0:
            return 0
        ordered = sorted(recent)
        rank = max(1, math.ceil(self.percentile / 100 * len(ordered)))
        return min(ordered[rank - 1], self.max_micro_lamports)

    def limit(self, simulated_units: int) -> int:
        return min(MAX_COMPUTE_UNITS, math.ceil(simulated_units * self.margin) + _MARGIN_UNITS)


@dataclass(frozen=True)
class Budget:
    """What one transaction bid: its compute-unit limit and price."""

    compute_units: int
    micro_lamports_per_unit: int

    @property
    def priority_fee_lamports(self) -> int:
        """The most the priority fee costs (the price times the limit, rounded up), on top of the base fee."""
        return -(-self.compute_units * self.micro_lamports_per_unit // 1_000_000)


def with_budget(instructions: Sequence[Instruction], budget: Budget | None = None) -> list[Instruction]:
    """The instructions behind the ComputeBudget ones (a price only when there is one). Without a
    budget: the ceiling, for a simulation (and for sizing a transaction: the same bytes)."""
    budget = budget or Budget(MAX_COMPUTE_UNITS, 0)
    head = [set_compute_unit_limit(budget.compute_units)]
    if budget.micro_lamports_per_unit:
        head.append(set_compute_unit_price(budget.micro_lamports_per_unit))
    return [*head, *instructions]


class _Request:
    """A JSON-RPC body solana-py's provider can send (it has no typed getRecentPrioritizationFees)."""

    def __init__(self, method: str, params: list[object]) -> None:
        self.body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})

    def to_json(self) -> str:
        return self.body


async def recent_fees(client: AsyncClient, writable: Sequence[Pubkey]) -> list[int]:
    """The prioritization fees of recent slots for transactions writing these accounts."""
    # solana-py has no call (nor a typed body) for this method: its provider sends our own JSON body
    provider: Any = client._provider
    raw = await provider.make_request_unparsed(_Request("getRecentPrioritizationFees", [[str(a) for a in writable]]))
    answer = parse_json(raw)  # NotJson, never RecursionError, for an RPC node's malformed answer
    if not isinstance(answer, dict) or "error" in answer or not isinstance(answer.get("result"), list):
        return []  # a node without the method: no priority fee rather than no transaction
    return [int(entry.get("prioritizationFee", 0)) for entry in answer["result"] if isinstance(entry, dict)]
