"""A real gpunet on gpunet-localnet for the coordinator tests: config (admin = attester), suppliers
with 2-GPU H100 nodes, and a client's 4-GPU lease, all made through the SDK."""

from __future__ import annotations

import asyncio

from solana.rpc.async_api import AsyncClient
from solders.keypair import Keypair

from coordinator.settlement import SignedUsage
from gpunet import instructions as ix
from gpunet.accounts import fetch
from gpunet.amounts import IO
from gpunet.client import send_and_confirm
from gpunet.pda import lease_pda
from gpunet.testbed import Market
from gpunet.tokens import io_account, token_balance
from gpunet.usage import Receipt

PERIOD = 2


async def _chain_time(client: AsyncClient) -> int:
    return (await client.get_block_time((await client.get_slot()).value)).value


class Cluster:
    """An initialised gpunet with 2-GPU nodes; a client's 4-GPU lease, assigned to nodes 0 and 1 unless
    `assign=False` (admin = attester)."""

    PRICE = 3_600 * IO // 1000  # per GPU-hour, every node

    async def build(self, client: AsyncClient, nodes: int = 2, assign: bool = True, seconds: int = 3_600) -> Cluster:
        self.client = client
        market = await Market.create(client, usage_period_seconds=60, jail_seconds=60, unbonding_seconds=60)
        self.market, self.admin, self.mint = market, market.admin, market.mint
        self.nodes: list[tuple[Keypair, Keypair]] = []  # (supplier wallet, node key)
        for _ in range(nodes):
            s = await market.supplier(2, self.PRICE, 50 * IO)
            self.nodes.append((s.wallet, s.node_key))
        lessee = await market.client(100 * IO)
        self.lessee = lessee
        self.client_wallet, self.client_tokens = lessee.wallet, lessee.tokens
        self.lease = lease_pda(self.client_wallet.pubkey(), 1)
        await send_and_confirm(
            client,
            self.client_wallet,
            [
                ix.open_lease(
                    self.client_wallet.pubkey(),
                    self.client_tokens,
                    self.mint,
                    1,
                    ix.LeaseTerms(1, 80, 4, ix.ANY, 10 * IO, seconds),
                )
            ],
        )
        if assign:
            await send_and_confirm(
                client, self.admin, [ix.assign_lease(self.admin.pubkey(), self.lease, [self.share(0), self.share(1)])]
            )
            self.started = (await fetch(client, self.lease, "Lease")).started_at
        return self

    def share(self, node: int) -> ix.Share:
        supplier, node_key = self.nodes[node]
        return ix.Share(node_key.pubkey(), supplier.pubkey(), 2, self.PRICE)

    def receipt(
        self,
        node: int,
        tick: int,
        gpu_seconds: int | None = None,
        signer: Keypair | None = None,
        epoch: int | None = None,
        through: int | None = None,
    ) -> SignedUsage:
        """Node `node`'s receipt of full use of its 2 GPUs through `tick` periods after the assignment
        (its epoch: the node's place in the assignment, 1 or 2)."""
        node_key = self.nodes[node][1]
        through = self.started + tick * PERIOD if through is None else through
        gpu_seconds = (through - self.started) * 2 if gpu_seconds is None else gpu_seconds
        receipt = Receipt(node + 1 if epoch is None else epoch, gpu_seconds, through)
        return SignedUsage(self.lease, node_key.pubkey(), receipt, receipt.signature(self.lease, signer or node_key))

    async def wait_for_period(self, tick: int) -> None:
        while await _chain_time(self.client) < self.started + tick * PERIOD:
            await asyncio.sleep(0.2)

    async def now(self) -> int:
        """The chain's clock."""
        return await _chain_time(self.client)

    async def earned(self, node: int) -> int:
        return await token_balance(self.client, io_account(self.nodes[node][0].pubkey(), self.mint))
