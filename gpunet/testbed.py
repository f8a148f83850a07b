"""A gpunet market on a local cluster in a few calls: the admin's initialisation, suppliers with
registered nodes, funded clients. Used by the demo, the benchmarks and the tests, so they all
set up the chain the same way (IO in each wallet's associated token account, as the CLI does)."""

from __future__ import annotations

from dataclasses import dataclass

from solana.rpc.async_api import AsyncClient
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from gpunet import instructions as ix
from gpunet.amounts import IO
from gpunet.client import send_and_confirm
from gpunet.localnet import localnet_deployer
from gpunet.tokens import create_mint, ensure_io_account, mint_io

__all__ = ["Market", "Supplier", "funded_deployer", "funded_wallet"]

SOL = 10**9


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
    wallet: Keypair
    node_key: Keypair
    gpus: int


class Market:
    """An initialised gpunet whose admin holds the IO mint and is the (only) attester."""

    def __init__(self, chain: AsyncClient, admin: Keypair, mint: Pubkey) -> None:
        self.chain, self.admin, self.mint = chain, admin, mint

    @classmethod
    async def create(cls, chain: AsyncClient, *, admin: Keypair | None = None, usage_period_seconds: int = 3,
                     min_stake_per_gpu: int = 10 * IO, jail_seconds: int = 3_600, unbonding_seconds: int = 3_600,
                     protocol_fee_bps: int = 500) -> Market:
        admin = admin or await funded_deployer(chain)
        mint = await create_mint(chain, admin)
        treasury = await ensure_io_account(chain, admin, admin.pubkey(), mint)
        await send_and_confirm(chain, admin, [ix.initialize(admin.pubkey(), mint, ix.ConfigParams(
            treasury=treasury, protocol_fee_bps=protocol_fee_bps, min_stake_per_gpu=min_stake_per_gpu,
            unbonding_seconds=unbonding_seconds, usage_period_seconds=usage_period_seconds, jail_seconds=jail_seconds,
            slash_bps=(1_000, 2_000, 5_000), slash_client_share_bps=5_000, attesters=[admin.pubkey()]))])
        return cls(chain, admin, mint)

    async def fund(self, owner: Pubkey, amount: int) -> Pubkey:
        """Mints `amount` IO base units to the owner's IO account (created when missing)."""
        account = await ensure_io_account(self.chain, self.admin, owner, self.mint)
        await mint_io(self.chain, self.admin, self.mint, account, amount)
        return account

    async def supplier(self, gpus: int, price_per_gpu_hour: int, stake: int, *, vram_gb: int = 80, region: int = 1,
                       inventory_hash: bytes = bytes(32), node_key: Keypair | None = None) -> Supplier:
        """A provider that stakes `stake` and registers one H100 node of `gpus` GPUs."""
        wallet, node_key = await funded_wallet(self.chain), node_key or Keypair()
        tokens = await self.fund(wallet.pubkey(), stake + 100 * IO)
        await send_and_confirm(self.chain, wallet, [
            ix.register_provider(wallet.pubkey(), self.mint), ix.stake(wallet.pubkey(), tokens, stake),
            ix.register_node(wallet.pubkey(), node_key.pubkey(),
                             ix.NodeSpec(1, gpus, vram_gb, region, price_per_gpu_hour, inventory_hash))], [node_key])
        return Supplier(wallet, node_key, gpus)

    async def client(self, io: int) -> tuple[Keypair, Pubkey]:
        """A funded client wallet and its IO account holding `io` base units."""
        wallet = await funded_wallet(self.chain, 100)
        return wallet, await self.fund(wallet.pubkey(), io)
