"""One epoch's rewards from its published inputs: the coordinator builds the tree it posts with this,
and `gpunet rewards audit` rebuilds it with this from what the API published.

Eligibility is the coordinator's observations, never a node's word: a node earns for each uptime
sample (taken every hour by default) at which the coordinator saw it online by its heartbeats, with
a verification valid at that instant at least at the reward tier, and not jailed. Verification
already refuses a GPU identity claimed by two nodes (both stay unverified), so one physical GPU earns
once. A sample is a weight of `gpus * model multiplier`, at the establishment rate while the node is
new (the Helium lesson: spoofed supply must wait out a low-reward period before it pays).

The epoch's emission is split over the weights of the providers that opened a pool (a claim credits
a pool, so only they can receive it); each provider's part is split between the supplier's own stake
and its delegators' by their stake, delegated stake counted up to the cap it counts as collateral.
Every pool gets a leaf, a zero one when it earned nothing: pools are credited epoch by epoch, and a
zero leaf lets the next epoch be claimed at once instead of after the claim window. All amounts are
floored; the remainder stays in the reward vault.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from solders.pubkey import Pubkey

from gpunet.catalog import GPU_MODELS
from gpunet.limits import BPS_DENOMINATOR, DELEGATION_CAP_BPS
from gpunet.rewards import RewardLeaf, RewardTree

__all__ = ["DEFAULT_MULTIPLIERS", "EpochInputs", "NodeUptime", "PoolStake", "epoch_leaves", "epoch_tree"]

U64 = 2**64
_H100_TFLOPS = 989
DEFAULT_MULTIPLIERS = {m.code: round(BPS_DENOMINATOR * m.fp16_tflops / _H100_TFLOPS) for m in GPU_MODELS}
"""Per-model multiplier in basis points: the model's peak FP16 tensor throughput against an H100's
(an hour of a T4 is worth less than an hour of a B200). A model not listed earns nothing."""


@dataclass(frozen=True)
class NodeUptime:
    """One node's epoch: the samples at which it was seen online and verified (`eligible_samples`)."""

    node: str  # the node account
    provider: str  # its provider account
    gpu_model: int
    gpus: int
    eligible_samples: int
    established: bool  # registered long enough before the epoch to earn the full rate


@dataclass(frozen=True)
class PoolStake:
    """A provider with an open pool, and its stake when the epoch's tree was built."""

    provider: str
    own_stake: int  # active own stake
    delegated: int  # active delegated stake


@dataclass(frozen=True)
class EpochInputs:
    epoch: int
    emission: int
    samples: int  # uptime samples the coordinator took in the epoch (its own stalls took none)
    reward_tier: int  # the least verification tier that earns
    establishment_bps: int  # the rate of a node not yet established
    multipliers: dict[int, int]  # gpu_model -> basis points
    nodes: list[NodeUptime] = field(default_factory=list)
    pools: list[PoolStake] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """JSON with every IO amount as a decimal string (JavaScript rounds integers above 2**53)."""
        values = asdict(self)
        values["emission"] = str(self.emission)
        values["multipliers"] = {str(k): v for k, v in sorted(self.multipliers.items())}
        values["pools"] = [
            {**p, "own_stake": str(p["own_stake"]), "delegated": str(p["delegated"])} for p in values["pools"]
        ]
        return values

    @classmethod
    def from_json(cls, data: Any) -> EpochInputs:
        """Refuses anything malformed (ValueError saying what): the inputs come from an API."""
        try:
            inputs = cls(
                epoch=_int(data["epoch"], "epoch"),
                emission=_amount(data["emission"], "emission"),
                samples=_int(data["samples"], "samples"),
                reward_tier=_int(data["reward_tier"], "reward_tier"),
                establishment_bps=_int(data["establishment_bps"], "establishment_bps", BPS_DENOMINATOR + 1),
                multipliers={
                    _int(int(k), "gpu model"): _int(v, "multiplier") for k, v in dict(data["multipliers"]).items()
                },
                nodes=[NodeUptime(**{k: n[k] for k in NodeUptime.__dataclass_fields__}) for n in data["nodes"]],
                pools=[
                    PoolStake(p["provider"], _amount(p["own_stake"], "own stake"), _amount(p["delegated"], "delegated"))
                    for p in data["pools"]
                ],
            )
        except (KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"malformed epoch inputs: {e!r}") from None
        for n in inputs.nodes:
            Pubkey.from_string(n.node), Pubkey.from_string(n.provider)
            for name in ("gpu_model", "gpus", "eligible_samples"):
                _int(getattr(n, name), f"node {name}")
            if n.eligible_samples > inputs.samples or not isinstance(n.established, bool):
                raise ValueError(f"node {n.node}: eligible samples above the epoch's, or a non-boolean established")
        for p in inputs.pools:
            Pubkey.from_string(p.provider)
        if len({p.provider for p in inputs.pools}) != len(inputs.pools):
            raise ValueError("a provider's pool is listed twice")
        return inputs

    def canonical(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))


def _int(value: Any, what: str, below: int = U64) -> int:
    if type(value) is not int or not 0 <= value < below:
        raise ValueError(f"{what} must be an integer in 0..{below - 1}, got {value!r}")
    return value


def _amount(value: Any, what: str) -> int:
    """An IO amount given as a decimal string."""
    if not isinstance(value, str) or not (value.isascii() and value.isdigit()) or len(value) > 20:
        raise ValueError(f"{what} must be a decimal string of IO base units, got {value!r}")
    return _int(int(value), what)


def _weight(node: NodeUptime, inputs: EpochInputs) -> int:
    rate = BPS_DENOMINATOR if node.established else inputs.establishment_bps
    return node.eligible_samples * node.gpus * inputs.multipliers.get(node.gpu_model, 0) * rate


def epoch_leaves(inputs: EpochInputs) -> list[RewardLeaf]:
    """Every pool's leaf, in provider order (the tree's order)."""
    pools = {p.provider: p for p in inputs.pools}
    weights = dict.fromkeys(pools, 0)
    for node in inputs.nodes:
        if node.provider in weights:
            weights[node.provider] += _weight(node, inputs)
    total = sum(weights.values())
    leaves = []
    for provider in sorted(pools, key=lambda p: bytes(Pubkey.from_string(p))):
        reward = inputs.emission * weights[provider] // total if total else 0
        pool = pools[provider]
        counted = min(pool.delegated, pool.own_stake * DELEGATION_CAP_BPS // BPS_DENOMINATOR)
        stake = pool.own_stake + counted
        delegators = reward * counted // stake if stake else 0
        leaves.append(RewardLeaf(inputs.epoch, Pubkey.from_string(provider), reward - delegators, delegators))
    return leaves


def epoch_tree(inputs: EpochInputs, mint: Pubkey) -> RewardTree:
    return RewardTree(epoch_leaves(inputs), mint)
