"""Auditing an epoch's rewards, and claiming from them, with what a coordinator publishes: the
epoch's inputs (GET /rewards/epochs/{epoch}) are rebuilt into a tree here, whose root must be the
one posted on chain; a claim is built only from a tree that passed that check."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from solana.rpc.async_api import AsyncClient
from solders.pubkey import Pubkey

from gpunet.accounts import AccountError, fetch, fetch_config
from gpunet.jobs import CoordinatorError, _call
from gpunet.pda import reward_root_pda
from gpunet.reward_epoch import EpochInputs, epoch_tree
from gpunet.rewards import RewardLeaf, RewardTree

__all__ = ["EpochAudit", "audit_epoch", "published_epoch", "verified_claim"]


async def published_epoch(coordinator: str, epoch: int) -> tuple[dict[str, Any], EpochInputs]:
    """What the coordinator publishes of `epoch`, and its inputs (CoordinatorError if malformed)."""
    body = await _call("GET", f"{coordinator.rstrip('/')}/rewards/epochs/{epoch}")
    try:
        inputs = EpochInputs.from_json(body["inputs"])
    except (KeyError, TypeError, ValueError) as e:
        raise CoordinatorError(f"the coordinator's inputs for epoch {epoch} are malformed: {e}") from None
    if inputs.epoch != epoch:
        raise CoordinatorError(f"asked for epoch {epoch}, the coordinator answered with epoch {inputs.epoch}")
    return body, inputs


@dataclass
class EpochAudit:
    epoch: int
    tree: RewardTree  # rebuilt from the published inputs
    chain_root: bytes | None  # None: no root on chain (not posted, vetoed, or expired and closed)
    chain_total: int | None
    chain_leaves: int | None
    published_root: str
    differences: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.differences


async def audit_epoch(client: AsyncClient, coordinator: str, epoch: int) -> EpochAudit:
    """Rebuilds `epoch`'s tree from the published inputs and compares it with the chain's root and
    with what the coordinator says it posted."""
    body, inputs = await published_epoch(coordinator, epoch)
    tree = epoch_tree(inputs, (await fetch_config(client)).io_mint)
    try:
        root = await fetch(client, reward_root_pda(epoch), "RewardRoot")
    except AccountError:
        root = None
    audit = EpochAudit(
        epoch,
        tree,
        bytes(root.root) if root else None,
        root.total if root else None,
        root.leaves if root else None,
        str(body.get("root")),
    )
    if root is None:
        audit.differences.append(f"epoch {epoch} has no reward root on chain (not posted yet, vetoed, or expired)")
    else:
        if audit.chain_root != tree.root:
            audit.differences.append(
                f"the chain's root {audit.chain_root.hex() if audit.chain_root else ''} is not the one the "
                f"published inputs build ({tree.root.hex()}): the root was built from other inputs"
            )
        if (audit.chain_total, audit.chain_leaves) != (tree.total, len(tree.leaves)):
            audit.differences.append(
                f"the chain's root claims {audit.chain_total} over {audit.chain_leaves} leaves; the inputs give "
                f"{tree.total} over {len(tree.leaves)}"
            )
    if audit.published_root != tree.root.hex():
        audit.differences.append(f"the coordinator says it built root {audit.published_root}, not {tree.root.hex()}")
    return audit


async def verified_claim(
    client: AsyncClient, coordinator: str, epoch: int, provider: Pubkey
) -> tuple[RewardLeaf, list[bytes]]:
    """The provider's leaf of `epoch` and its proof, from a tree whose root is the chain's."""
    audit = await audit_epoch(client, coordinator, epoch)
    if not audit.ok:
        raise CoordinatorError(
            f"epoch {epoch}'s published inputs do not build the chain's root; not claiming from them "
            f"(run `gpunet rewards audit {epoch}`): {audit.differences[0]}"
        )
    try:
        index = audit.tree.index(provider)
    except KeyError:
        raise CoordinatorError(f"epoch {epoch}'s reward tree has no leaf for provider {provider}") from None
    return audit.tree.leaves[index], audit.tree.proof(index)
