"""The program's limits, as the IDL publishes them (its `#[constant]`s, see programs/gpunet/src/state).

The one place the SDK, the coordinator and the worker take these numbers from: a limit the
program changes reaches them with the regenerated IDL instead of through copies that drift.
"""

from __future__ import annotations

from gpunet.idl import idl_constants

__all__ = [
    "ANY",
    "BPS_DENOMINATOR",
    "DELEGATION_CAP_BPS",
    "MAX_ATTESTERS",
    "MAX_COHORTS",
    "MAX_COMMISSION_BPS",
    "MAX_DOWNTIME_TOLERANCE_SECONDS",
    "MAX_GPUS_PER_NODE",
    "MAX_LEASE_GPUS",
    "MAX_LEASE_NODES",
    "MAX_PROOF_LEN",
    "MAX_PROTOCOL_FEE_BPS",
    "MAX_VERIFICATION_SECONDS",
    "MAX_VERIFICATION_TIER",
    "MIN_DOWNTIME_TOLERANCE_SECONDS",
]


def _limit(name: str) -> int:
    value = idl_constants()[name]
    # A KeyError or this would mean the committed IDL and the program disagree (tests/test_idl.py).
    if not isinstance(value, int):
        raise TypeError(f"the IDL's {name} is {value!r}, not an integer")
    return value


ANY = _limit("ANY")
"""GPU model or region code meaning "any" in lease terms (never a node's model or region)."""
MAX_GPUS_PER_NODE = _limit("MAX_GPUS_PER_NODE")
"""The most GPUs one node may register."""
MAX_LEASE_NODES = _limit("MAX_LEASE_NODES")
"""The most nodes one lease may be placed on."""
MAX_LEASE_GPUS = _limit("MAX_LEASE_GPUS")
"""The most GPUs one lease may ask for (MAX_LEASE_NODES x MAX_GPUS_PER_NODE)."""
MAX_ATTESTERS = _limit("MAX_ATTESTERS")
"""The most attester keys the config may list."""
MAX_PROTOCOL_FEE_BPS = _limit("MAX_PROTOCOL_FEE_BPS")
"""The highest protocol fee, in basis points."""
BPS_DENOMINATOR = _limit("BPS_DENOMINATOR")
"""Basis points in a whole: the most any slash fraction or client share may be."""
MIN_DOWNTIME_TOLERANCE_SECONDS = _limit("MIN_DOWNTIME_TOLERANCE_SECONDS")
"""The least downtime tolerance a lease may choose (0 means the network's default)."""
MAX_DOWNTIME_TOLERANCE_SECONDS = _limit("MAX_DOWNTIME_TOLERANCE_SECONDS")
"""The most downtime tolerance a lease may choose."""
MAX_VERIFICATION_TIER = _limit("MAX_VERIFICATION_TIER")
"""The highest verification tier a node may be recorded at (and the config may require)."""
MAX_VERIFICATION_SECONDS = _limit("MAX_VERIFICATION_SECONDS")
"""The longest a recorded verification may be valid (and the most `max_verification_seconds` may be)."""
DELEGATION_CAP_BPS = _limit("DELEGATION_CAP_BPS")
"""A pool's delegated stake may reach this share of its provider's own active stake (1x)."""
MAX_COMMISSION_BPS = _limit("MAX_COMMISSION_BPS")
"""The most the staking config's commission bound may be, in basis points."""
MAX_COHORTS = _limit("MAX_COHORTS")
"""The most epochs of undelegated stake a pool may have unbonding at once."""
MAX_PROOF_LEN = _limit("MAX_PROOF_LEN")
"""The longest Merkle proof a reward claim may carry."""
