"""A gpunet market on a local cluster in a few calls: the admin's initialisation, suppliers with
registered nodes, funded clients, and a lease's life (open, assign, settle, slash, close). Used by
the demo, the benchmarks and the tests, so they all set up the chain the same way (IO in each
wallet's associated token account, as the CLI does). Every gpunet transaction the market sends goes
through `Market.send`, which records its signature: tests hold an indexer to what was sent."""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

from solana.rpc.async_api import AsyncClient
from solders.instruction import Instruction
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.signature import Signature

from gpunet import instructions as ix
from gpunet import staking
from gpunet.accounts import chain_clock, fetch
from gpunet.amounts import IO
from gpunet.client import TransactionFailed, send_and_confirm
from gpunet.localnet import localnet_deployer
from gpunet.pda import lease_pda, node_pda, provider_pda, staking_pda
from gpunet.positions import epoch_at
from gpunet.rewards import RewardLeaf, RewardTree
from gpunet.tokens import create_mint, ensure_io_account, mint_io
from gpunet.usage import Receipt

__all__ = ["Client", "Market", "Supplier", "at_most", "funded_deployer", "funded_wallet"]

_T = TypeVar("_T")
SOL = 10**9
# What a supplier keeps beside its stake, and a client holds unless told: room for more stakes and leases.
SPARE_IO = 10_000 * IO


async def at_most(n: int, jobs: Sequence[Awaitable[_T]]) -> list[_T]:
    """The jobs' results, in order, with at most `n` of them running at once (a set-up of many
    accounts against a node that confirms late)."""
    gate = asyncio.Semaphore(n)

    async def one(job: Awaitable[_T]) -> _T:
        async with gate:
            return await job

    return await asyncio.gather(*(one(j) for j in jobs))


async def funded_wallet(chain: AsyncClient, sol: int = 10, keypair: Keypair | None = None) -> Keypair:
    """A new keypair (or `keypair`) with `sol` SOL from the cluster's faucet (local clusters)."""
    kp = keypair or Keypair()
    await chain.confirm_transaction((await chain.request_airdrop(kp.pubkey(), sol * SOL)).value)
    return kp


async def funded_deployer(chain: AsyncClient, sol: int = 100) -> Keypair:
    """The local node's program upgrade authority (the only key that may initialise gpunet), funded."""
    return await funded_wallet(chain, sol, localnet_deployer())


@dataclass(frozen=True)
class Supplier:
    """A provider that staked and registered one H100 node."""

    wallet: Keypair
    node_key: Keypair
    tokens: Pubkey  # the wallet's IO account
    gpus: int
    price: int  # per GPU-hour, as registered

    @property
    def provider(self) -> Pubkey:
        return provider_pda(self.wallet.pubkey())

    @property
    def node(self) -> Pubkey:
        return node_pda(self.node_key.pubkey())

    def share(self, gpus: int) -> ix.Share:
        """`gpus` of this node in a lease, at the registered price."""
        return ix.Share(self.node_key.pubkey(), self.wallet.pubkey(), gpus, self.price)


@dataclass(frozen=True)
class Client:
    wallet: Keypair
    tokens: Pubkey  # the wallet's IO account


class Market:
    """An initialised gpunet whose admin holds the IO mint and whose one attester is the admin unless
    another key was given."""

    def __init__(
        self, chain: AsyncClient, admin: Keypair, attester: Keypair, mint: Pubkey, params: ix.ConfigParams
    ) -> None:
        self.chain, self.admin, self.attester, self.mint, self.params = chain, admin, attester, mint, params
        self.treasury = params.treasury
        self.signatures: list[Signature] = []  # of every transaction `send` sent, in the order they landed

    @classmethod
    async def create(
        cls,
        chain: AsyncClient,
        *,
        admin: Keypair | None = None,
        attester: Keypair | None = None,
        usage_period_seconds: int = 3,
        min_stake_per_gpu: int = 10 * IO,
        jail_seconds: int = 3_600,
        unbonding_seconds: int = 3_600,
        protocol_fee_bps: int = 500,
        min_verification_tier: int = ix.TIER_UNVERIFIED,
    ) -> Market:
        admin = admin or await funded_deployer(chain)
        attester = attester or admin
        mint = await create_mint(chain, admin)
        params = ix.ConfigParams(
            treasury=await ensure_io_account(chain, admin, admin.pubkey(), mint),
            protocol_fee_bps=protocol_fee_bps,
            min_stake_per_gpu=min_stake_per_gpu,
            unbonding_seconds=unbonding_seconds,
            usage_period_seconds=usage_period_seconds,
            jail_seconds=jail_seconds,
            slash_bps=(1_000, 2_000, 5_000),
            slash_client_share_bps=5_000,
            attesters=[attester.pubkey()],
            min_verification_tier=min_verification_tier,
        )
        market = cls(chain, admin, attester, mint, params)
        await market.send(admin, [ix.initialize(admin.pubkey(), mint, params)])
        return market

    async def send(self, payer: Keypair, ixs: Sequence[Instruction], signers: Sequence[Keypair] = ()) -> Signature:
        """Sends and confirms one transaction and records its signature."""
        sig = await send_and_confirm(self.chain, payer, ixs, signers)
        self.signatures.append(sig)
        return sig

    async def fund(self, owner: Pubkey, amount: int) -> Pubkey:
        """Mints `amount` IO base units to the owner's IO account (created when missing)."""
        account = await ensure_io_account(self.chain, self.admin, owner, self.mint)
        await mint_io(self.chain, self.admin, self.mint, account, amount)
        return account

    async def supplier(
        self,
        gpus: int = 2,
        price_per_gpu_hour: int = 2 * IO,
        stake: int = 100 * IO,
        *,
        inventory_hash: bytes = bytes(32),
        node_key: Keypair | None = None,
    ) -> Supplier:
        """A provider that stakes `stake` and registers one H100 node of `gpus` GPUs, in one transaction."""
        wallet, node_key = await funded_wallet(self.chain), node_key or Keypair()
        tokens = await self.fund(wallet.pubkey(), stake + SPARE_IO)
        await self.send(
            wallet,
            [
                ix.register_provider(wallet.pubkey(), self.mint),
                ix.stake(wallet.pubkey(), tokens, stake),
                ix.register_node(
                    wallet.pubkey(), node_key.pubkey(), ix.NodeSpec(1, gpus, 80, 1, price_per_gpu_hour, inventory_hash)
                ),
            ],
            [node_key],
        )
        return Supplier(wallet, node_key, tokens, gpus, price_per_gpu_hour)

    async def client(self, io: int = SPARE_IO) -> Client:
        """A funded client wallet and its IO account holding `io` base units."""
        wallet = await funded_wallet(self.chain, 100)
        return Client(wallet, await self.fund(wallet.pubkey(), io))

    async def open_lease(self, c: Client, lease_id: int, gpus: int, seconds: int = 3_600) -> Pubkey:
        """Any GPU model with 24 GB or more, anywhere, at 3 IO per GPU-hour at most."""
        terms = ix.LeaseTerms(ix.ANY, 24, gpus, ix.ANY, 3 * IO, seconds)
        await self.send(c.wallet, [ix.open_lease(c.wallet.pubkey(), c.tokens, self.mint, lease_id, terms)])
        return lease_pda(c.wallet.pubkey(), lease_id)

    async def assign(self, lease: Pubkey, shares: list[tuple[Supplier, int]]) -> None:
        await self.send(
            self.attester, [ix.assign_lease(self.attester.pubkey(), lease, [s.share(gpus) for s, gpus in shares])]
        )

    async def settle(self, lease: Pubkey, s: Supplier, seconds: int = 1) -> Signature:
        """Settles the share's receipt for `seconds` more of full use, waiting for the chain clock if needed."""
        state = await fetch(self.chain, lease, "Lease")
        share = next(a for a in state.assignments[: state.node_count] if a.node == s.node)
        more = seconds * share.gpus
        receipt = Receipt(share.epoch, share.receipt_gpu_seconds + more, share.settled_until + seconds)
        income_epoch = None  # the delegators' part of a pooled provider's payout: income of the epoch now
        if (await fetch(self.chain, s.provider, "Provider")).has_pool:
            income_epoch = epoch_at(await fetch(self.chain, staking_pda(), "Staking"), await chain_clock(self.chain))
        settlement = ix.signed_settlement(
            self.attester.pubkey(),
            lease,
            s.node_key,
            s.wallet.pubkey(),
            s.tokens,
            receipt,
            more,
            income_epoch,
        )
        return await self.send_when_clock_allows(self.attester, settlement, "BadPeriod")

    async def send_when_clock_allows(self, payer: Keypair, ixs: Sequence[Instruction], error: str) -> Signature:
        """Sends, again every 0.25 s while the program refuses with `error` (one that the chain's clock
        passing a moment ends: a receipt's period, a root's timelock)."""
        for _ in range(100):
            try:
                return await self.send(payer, ixs)
            except TransactionFailed as e:
                if e.program_error is None or e.program_error.name != error:
                    raise
                await asyncio.sleep(0.25)
        raise TimeoutError(f"the chain's clock never got past {error}")

    async def slash(
        self, s: Supplier, victim: tuple[Pubkey, Client] | None = None, evidence_hash: bytes = bytes(range(32))
    ) -> Signature:
        """Slashes `s` for missed heartbeats; `victim`: the lease and client that get the client share."""
        return await self.send(
            self.attester,
            [
                ix.slash_provider(
                    self.attester.pubkey(),
                    self.treasury,
                    s.node_key.pubkey(),
                    s.wallet.pubkey(),
                    "MissedHeartbeats",
                    evidence_hash,
                    victim=(victim[0], victim[1].tokens) if victim else None,
                )
            ],
        )

    async def verify(self, s: Supplier, tier: int = ix.TIER_SIMULATED, seconds: int = 3_600) -> Signature:
        """The attester records `s`'s node verified at `tier` for `seconds` from now (the local node's
        clock follows the wall clock), for its registered inventory."""
        node = await fetch(self.chain, s.node, "Node")
        evidence = hashlib.sha256(b"testbed verification " + bytes(s.node)).digest()
        return await self.send(
            self.attester,
            [
                ix.record_verification(
                    self.attester.pubkey(),
                    s.node_key.pubkey(),
                    tier,
                    int(time.time()) + seconds,
                    evidence,
                    bytes(node.spec.inventory_hash),
                )
            ],
        )

    async def close_lease(self, c: Client, lease: Pubkey) -> None:
        """The client closes its lease, naming the nodes of its shares as the chain has them."""
        state = await fetch(self.chain, lease, "Lease")
        nodes = [a.node for a in state.assignments[: state.node_count]]
        await self.send(c.wallet, [ix.close_lease(c.wallet.pubkey(), c.wallet.pubkey(), c.tokens, lease, nodes)])

    async def close(self, c: Client, lease: Pubkey) -> None:
        """The client closes; the attester, with nothing more to settle, finalizes at once."""
        await self.close_lease(c, lease)
        await self.send(
            self.attester,
            [ix.finalize_lease(self.attester.pubkey(), self.treasury, c.wallet.pubkey(), c.tokens, lease)],
        )

    async def every_event_kind(self) -> dict[str, object]:
        """Every kind of gpunet event at least once; the accounts involved. Needs a market created with
        `jail_seconds=0` and `unbonding_seconds=0` (the slashed supplier unjails and withdraws at once);
        it sets a 1 s settlement window (a deregistered node's stake stays bonded at least that long)."""
        self.params = replace(self.params, settle_window_seconds=1)
        await self.send(self.admin, [ix.update_config(self.admin.pubkey(), self.params)])
        ada, bob, cyd = await self.supplier(), await self.supplier(), await self.supplier()
        await self.send(
            cyd.wallet, [ix.update_node(cyd.wallet.pubkey(), cyd.node_key.pubkey(), 2, 2 * IO, bytes([7] * 32))]
        )
        await self.verify(ada)
        dev = await self.client()
        lease = await self.open_lease(dev, 1, gpus=4)
        await self.assign(lease, [(ada, 2), (bob, 2)])
        await self.send(dev.wallet, [ix.top_up_lease(dev.wallet.pubkey(), dev.tokens, lease, 600)])
        await self.settle(lease, ada)
        await self.settle(lease, bob)
        await self.slash(bob, victim=(lease, dev))
        await self.send(
            self.attester, [ix.reassign_lease(self.attester.pubkey(), lease, bob.node_key.pubkey(), cyd.share(2))]
        )
        await self.settle(lease, cyd)
        await self.settle(lease, ada)
        await self.send(dev.wallet, [ix.sweep_fees(dev.wallet.pubkey(), self.treasury, lease)])  # anyone may
        await self.close(dev, lease)
        for draining in (True, False):  # cyd's announced maintenance, and its end
            await self.send(cyd.wallet, [ix.set_node_draining(cyd.wallet.pubkey(), cyd.node_key.pubkey(), draining)])
        await self.send(bob.wallet, [ix.unjail_node(bob.wallet.pubkey(), bob.node_key.pubkey())])
        await self.send(bob.wallet, [ix.deregister_node(bob.wallet.pubkey(), bob.node_key.pubkey())])
        await asyncio.sleep(1.5)  # the bond stays for the 1 s settlement window (no unbonding)
        await self.send(bob.wallet, [ix.release_node(bob.wallet.pubkey(), bob.node_key.pubkey())])
        await self.send(bob.wallet, [ix.request_unstake(bob.wallet.pubkey(), 10 * IO)])
        await self.send(bob.wallet, [ix.withdraw_unstaked(bob.wallet.pubkey(), bob.tokens)])
        delegator = await self.co_staking(ada, cyd)
        return {"lease": lease, "suppliers": [ada, bob, cyd], "client": dev, "delegator": delegator}

    async def staking_epoch(self) -> int:
        """The staking epoch now, by the local node's clock (which follows the wall clock)."""
        return epoch_at(await fetch(self.chain, staking_pda(), "Staking"), int(time.time()))

    async def wait_epoch(self, epoch: int) -> None:
        """Sleeps until a moment into staking epoch `epoch` (the node's clock lags the wall clock by
        up to a second: its timestamps are whole seconds of the last slot)."""
        staking = await fetch(self.chain, staking_pda(), "Staking")
        await asyncio.sleep(max(0.0, staking.genesis + epoch * staking.epoch_seconds + 1.2 - time.time()))

    async def co_staking(self, ada: Supplier, cyd: Supplier) -> Client:
        """Every co-staking and reward event, on 5 s epochs: the staking config and its funding; ada's
        and cyd's pools; a delegator's position in ada's, rewarded for epoch 1, collected, unbonded
        and withdrawn; a vetoed root, an expired one, and cyd's unrewarded epoch skipped. Returns the
        delegator."""
        admin, attester = self.admin, self.attester
        params = staking.StakingParams(100 * IO, epoch_seconds=5, root_timelock_seconds=1, claim_epochs=1)
        funds = await self.fund(admin.pubkey(), 1_000 * IO)
        fan = await self.client(io=20 * IO)
        await self.send(
            admin,
            [
                staking.configure_staking(admin.pubkey(), self.mint, params),
                staking.fund_rewards(admin.pubkey(), funds, 1_000 * IO),
            ],
        )
        for s, commission in ((ada, 1_000), (cyd, 0)):
            await self.send(s.wallet, [staking.open_pool(s.wallet.pubkey(), s.provider, commission)])
        await self.send(ada.wallet, [staking.set_commission(ada.wallet.pubkey(), ada.provider, 500)])  # a cut: at once
        await self.send(fan.wallet, [staking.delegate(fan.wallet.pubkey(), fan.tokens, ada.provider, 0, 10 * IO)])

        await self.wait_epoch(1)  # epoch 0's root: posted, vetoed, posted again and left to expire
        for amount in (IO, 2 * IO):  # the first vetoed (an identical repost would be the same transaction)
            stale = RewardTree([RewardLeaf(0, cyd.provider, amount, 0)], self.mint)
            await self.send(attester, [staking.post_reward_root(attester.pubkey(), 0, stale.root, stale.total, 1)])
            if amount == IO:
                await self.send(admin, [staking.veto_reward_root(admin.pubkey(), 0, attester.pubkey())])

        # Epoch 2: the delegator leaves (its position still earned epoch 1), and epoch 1's root, once
        # past its timelock, credits ada's pool; what must land within the epoch goes first.
        await self.wait_epoch(2)
        tree = RewardTree([RewardLeaf(1, ada.provider, 5 * IO, 3 * IO)], self.mint)
        await self.send(attester, [staking.post_reward_root(attester.pubkey(), 1, tree.root, tree.total, 1)])
        await self.send(fan.wallet, [staking.undelegate(fan.wallet.pubkey(), ada.provider, 0, 2)])
        claim = staking.claim_reward(fan.wallet.pubkey(), tree.leaves[0], tree.proof(0))
        await self.send_when_clock_allows(fan.wallet, [claim], "RootTimelocked")
        await self.send(fan.wallet, [staking.expire_reward_root(0, attester.pubkey())])
        await self.send(fan.wallet, [staking.collect_rewards(fan.wallet.pubkey(), fan.tokens, ada.provider, 0)])
        await self.send(ada.wallet, [staking.withdraw_pool_rewards(ada.wallet.pubkey(), ada.provider, ada.tokens)])

        await self.wait_epoch(3)  # cyd's epoch 1 had no leaf: skipped; the delegator's cohort has matured
        await self.send(fan.wallet, [staking.skip_reward_epoch(fan.wallet.pubkey(), cyd.provider, 1)])
        await self.send(fan.wallet, [staking.withdraw_delegation(fan.wallet.pubkey(), fan.tokens, ada.provider, 0, 2)])
        return fan
