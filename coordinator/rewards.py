"""Rewards: the coordinator samples the uptime it observes, builds each ended epoch's reward tree
from those samples (gpunet.reward_epoch), posts its root as an attester, and cranks every pool's
claim once the root's timelock has passed.

- **Samples.** At each multiple of `reward_sample_seconds` the leader records the nodes it sees
  online by their heartbeats, with the verification tier valid then and whether they are jailed.
  A blind coordinator (its own stall, a database outage: Fleet.judging) takes no sample, so its
  outages are nobody's downtime; an instant is sampled once, whichever replica leads.
- **Roots.** Once an epoch has ended (by the chain's clock) and while it can still be posted, its
  inputs (every sample count, the stake of every open pool, the multipliers) are stored, then its
  root is posted: every ended epoch of the claim window gets one, a zero one when no sample was
  taken in it (a pool is credited epoch by epoch, so a missing root would hold up its next ones).
  What is stored is what the API publishes: `gpunet rewards audit` rebuilds the
  tree from it and compares with the chain.
- **Claims.** Anyone may crank a claim; the coordinator does for every leaf, in epoch order (a pool
  is credited epoch by epoch), paying the fee and the claim's reward-index rent.
"""

from __future__ import annotations

import time
from typing import Any

import asyncpg
from solana.rpc.async_api import AsyncClient
from solders.pubkey import Pubkey

from coordinator.attester import Attester
from coordinator.db import rewards as db
from coordinator.fleet import Fleet
from coordinator.settings import Settings
from gpunet.accounts import AccountError, chain_clock, fetch, fetch_config, fetch_many, program_accounts
from gpunet.instructions import TIER_GPU, TIER_SIMULATED
from gpunet.logs import get_logger
from gpunet.pda import pool_pda, reward_root_pda, staking_pda
from gpunet.positions import epoch_at, epoch_start, schedule_at
from gpunet.reward_epoch import DEFAULT_MULTIPLIERS, EpochInputs, NodeUptime, PoolStake, epoch_leaves
from gpunet.rewards import RewardTree

__all__ = ["Rewards"]

log = get_logger("coordinator.rewards")


class Rewards:
    def __init__(
        self, settings: Settings, pool: asyncpg.Pool, chain: AsyncClient, fleet: Fleet, attester: Attester
    ) -> None:
        self.settings, self.pool, self.chain, self.fleet, self.attester = settings, pool, chain, fleet, attester
        self.tier = TIER_SIMULATED if settings.accept_simulated else TIER_GPU
        self._sampled = -1  # the last instant this term sampled

    # --- samples

    async def sample(self) -> None:
        """Records this sample instant's uptime, once (late by over half a period: skipped)."""
        period = self.settings.reward_sample_seconds
        now = time.time()
        at = int(now // period * period)
        if at == self._sampled or now - at > period / 2 or not self.fleet.judging():
            return  # sampled already (by this term: another replica's is refused by the database), late, or blind
        async with self.pool.acquire() as conn:
            rows = await db.registered_nodes(conn)
            online = [
                (r["node_key"], r["verification_tier"] if r["verified_until"] > at else 0, r["jailed"])
                for r in rows
                if (seen := self.fleet.nodes.get(Pubkey.from_string(r["node_key"]))) is not None
                and seen.connected
                and not self.fleet.silent(Pubkey.from_string(r["node_key"]))
            ]
            if await db.record_sample(conn, at, online):
                log.info("rewards.sampled", at=at, online=len(online))
        self._sampled = at

    # --- roots and claims

    async def step(self) -> None:
        try:
            config = await fetch(self.chain, staking_pda(), "Staking")
        except AccountError:
            return  # no staking config on this cluster: nothing to reward
        now_epoch = epoch_at(config, await chain_clock(self.chain))
        first = max(0, now_epoch - config.claim_epochs)
        for epoch in range(first, now_epoch):  # oldest first: pools are credited epoch by epoch
            async with self.pool.acquire() as conn:
                row = await db.epoch(conn, epoch)
            if row is None:
                if (await self.chain.get_account_info(reward_root_pda(epoch))).value is not None:
                    log.warning("rewards.foreign_root", epoch=epoch, reason="a root this ledger did not build")
                    continue
                # Every ended epoch gets a root, a zero one when nothing was sampled (this coordinator
                # was not running): a pool cannot be credited for an epoch until the one before is.
                await self.post(config, epoch)
            elif not row["posted"]:  # stored, and its root not known to have landed: send it (again)
                await self.send_root(EpochInputs.from_json(row["inputs"]))
            elif not row["credited"]:
                await self.crank(epoch, EpochInputs.from_json(row["inputs"]))

    async def inputs(self, config: Any, epoch: int) -> EpochInputs:
        """The epoch's inputs: its samples from the database, the open pools' stake from the chain."""
        start = epoch_start(config, epoch)
        end = start + config.epoch_seconds
        established_by = start - self.settings.reward_establishment_epochs * config.epoch_seconds
        pools = [p for _, p in await program_accounts(self.chain, "Pool") if p.opened_epoch < epoch]
        providers = await fetch_many(self.chain, [p.provider for p in pools], "Provider")
        stakes = [PoolStake(str(p.provider), a.staked, a.delegated) for p, a in zip(pools, providers, strict=True)]
        async with self.pool.acquire() as conn:
            taken, rows = await db.eligible_samples(conn, start, end, self.tier)
            firsts = await db.node_firsts(conn, [r["node"] for r in rows])
        nodes = [
            NodeUptime(
                r["node"],
                r["provider"],
                r["gpu_model"],
                r["gpu_count"],
                r["eligible"],
                firsts.get(r["node"], end) <= established_by,
            )
            for r in rows
        ]
        return EpochInputs(
            epoch=epoch,
            emission=schedule_at(config.emission, epoch) or 0,
            samples=taken,
            reward_tier=self.tier,
            establishment_bps=self.settings.reward_establishment_bps,
            multipliers=DEFAULT_MULTIPLIERS,
            nodes=nodes,
            pools=stakes,
        )

    async def post(self, config: Any, epoch: int) -> None:
        """Stores the epoch's inputs and tree, then sends its root: what was sent can always be shown."""
        inputs = await self.inputs(config, epoch)
        tree = RewardTree(epoch_leaves(inputs), (await fetch_config(self.chain)).io_mint)
        async with self.pool.acquire() as conn:
            await db.record_epoch(conn, inputs, tree.root, tree.total, len(tree.leaves))
        await self.send_root(inputs)

    async def send_root(self, inputs: EpochInputs) -> None:
        """Posts the root of the stored inputs (an earlier attempt that landed is recognised)."""
        tree = RewardTree(epoch_leaves(inputs), (await fetch_config(self.chain)).io_mint)
        epoch = inputs.epoch
        try:
            posted = await fetch(self.chain, reward_root_pda(epoch), "RewardRoot")
        except AccountError:
            sig = await self.attester.post_reward_root(epoch, tree.root, tree.total, len(tree.leaves))
        else:  # an earlier attempt landed (its answer lost), or the root is not this ledger's
            if bytes(posted.root) != tree.root:
                log.error("rewards.other_root", epoch=epoch, chain=bytes(posted.root).hex(), ours=tree.root.hex())
                return
            sig = None
        async with self.pool.acquire() as conn:
            await db.set_posted(conn, epoch, str(sig) if sig else "landed")
        log.info("rewards.root_posted", epoch=epoch, total=tree.total, leaves=len(tree.leaves), tx=sig)

    async def crank(self, epoch: int, inputs: EpochInputs) -> None:
        """Claims every leaf whose pool is due for `epoch`; marks the epoch credited when none is left."""
        mint = (await fetch_config(self.chain)).io_mint
        tree = RewardTree(epoch_leaves(inputs), mint)
        root = await fetch(self.chain, reward_root_pda(epoch), "RewardRoot")
        if await chain_clock(self.chain) < root.claimable_at:
            return
        left = 0
        pools = await fetch_many(self.chain, [pool_pda(leaf.provider) for leaf in tree.leaves], "Pool")
        for i, (leaf, pool) in enumerate(zip(tree.leaves, pools, strict=True)):
            if pool.credited_through >= epoch:
                continue
            if pool.credited_through + 1 < epoch:
                left += 1  # an earlier epoch of this pool is not credited yet: its turn comes first
                continue
            await self.attester.claim_reward(leaf, tree.proof(i))
        if left == 0:
            async with self.pool.acquire() as conn:
                await db.set_credited(conn, epoch)
