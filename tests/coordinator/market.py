"""Real gpunet transactions through the SDK for the coordinator tests: a market with suppliers,
clients and leases, every program transaction's signature recorded in the order it landed."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from anchorpy import Coder
from solana.rpc.async_api import AsyncClient
from solders.instruction import Instruction
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.signature import Signature

from gpunet import instructions as ix
from gpunet.amounts import IO
from gpunet.client import send_and_confirm
from gpunet.idl import load_idl
from gpunet.pda import lease_pda, node_pda, provider_pda
from gpunet.testbed import funded_deployer
from gpunet.tokens import create_mint, create_token_account, mint_io
from gpunet.usage import UsageReport


@dataclass
class Supplier:
    wallet: Keypair
    node_key: Keypair
    tokens: Pubkey
    price: int  # per GPU-hour, as registered

    @property
    def provider(self) -> Pubkey:
        return provider_pda(self.wallet.pubkey())

    @property
    def node(self) -> Pubkey:
        return node_pda(self.node_key.pubkey())


@dataclass
class Client:
    wallet: Keypair
    tokens: Pubkey


async def airdropped(client: AsyncClient) -> Keypair:
    kp = Keypair()
    sig = (await client.request_airdrop(kp.pubkey(), 100 * 10**9)).value
    for _ in range(400):
        if (await client.get_signature_statuses([sig])).value[0] is not None:
            return kp
        await asyncio.sleep(0.05)
    raise TimeoutError("airdrop not confirmed")


class Market:
    def __init__(self, client: AsyncClient) -> None:
        self.client = client
        self.coder = Coder(load_idl())
        self.signatures: list[Signature] = []  # program transactions, in the order they landed

    async def send(self, payer: Keypair, ixs: list[Instruction], signers: list[Keypair] = ()) -> Signature:
        sig = await send_and_confirm(self.client, payer, ixs, list(signers))
        self.signatures.append(sig)
        return sig

    async def start(self) -> Market:
        self.admin, self.attester = await funded_deployer(self.client), await airdropped(self.client)
        self.mint = await create_mint(self.client, self.admin)
        self.treasury = await create_token_account(self.client, self.admin, self.mint, self.admin.pubkey())
        self.params = ix.ConfigParams(
            treasury=self.treasury, protocol_fee_bps=500, min_stake_per_gpu=10 * IO, unbonding_seconds=0,
            usage_period_seconds=60, jail_seconds=0, slash_bps=(1_000, 2_000, 5_000), slash_client_share_bps=5_000,
            attesters=[self.attester.pubkey()])
        await self.send(self.admin, [ix.initialize(self.admin.pubkey(), self.mint, self.params)])
        return self

    async def funded_tokens(self, owner: Keypair, amount: int = 10_000 * IO) -> Pubkey:
        tokens = await create_token_account(self.client, self.admin, self.mint, owner.pubkey())
        await mint_io(self.client, self.admin, self.mint, tokens, amount)
        return tokens

    async def supplier(self, gpus: int = 2, stake: int = 100 * IO, price: int = 2 * IO) -> Supplier:
        wallet, node_key = await airdropped(self.client), Keypair()
        s = Supplier(wallet, node_key, await self.funded_tokens(wallet), price)
        await self.send(wallet, [
            ix.register_provider(wallet.pubkey(), self.mint),
            ix.stake(wallet.pubkey(), s.tokens, stake),
            ix.register_node(wallet.pubkey(), node_key.pubkey(), ix.NodeSpec(1, gpus, 80, 1, price)),
        ], [node_key])
        return s

    async def new_client(self) -> Client:
        wallet = await airdropped(self.client)
        return Client(wallet, await self.funded_tokens(wallet))

    async def open_lease(self, c: Client, lease_id: int, gpus: int, seconds: int = 3_600) -> Pubkey:
        terms = ix.LeaseTerms(ix.ANY, 24, gpus, ix.ANY, 3 * IO, seconds)
        await self.send(c.wallet, [ix.open_lease(c.wallet.pubkey(), c.tokens, self.mint, lease_id, terms)])
        return lease_pda(c.wallet.pubkey(), lease_id)

    async def assign(self, lease: Pubkey, shares: list[tuple[Supplier, int]]) -> None:
        await self.send(self.attester, [ix.assign_lease(self.attester.pubkey(), lease, [
            ix.Share(s.node_key.pubkey(), s.wallet.pubkey(), gpus, s.price) for s, gpus in shares])])

    async def lease_state(self, lease: Pubkey):  # noqa: ANN201
        return self.coder.accounts.decode(bytes((await self.client.get_account_info(lease)).value.data))

    async def settle(self, lease: Pubkey, s: Supplier, seconds: int = 1) -> Signature:
        """Settles the next `seconds` of the share at full use, waiting for the chain clock if needed."""
        state = await self.lease_state(lease)
        share = next(a for a in state.assignments[: state.node_count] if a.node == s.node)
        report = UsageReport(share.last_seq + 1, share.settled_until, share.settled_until + seconds, seconds * share.gpus)
        for _ in range(100):
            try:
                return await self.send(self.attester, ix.signed_settlement(
                    self.attester.pubkey(), self.treasury, lease, s.node_key, s.wallet.pubkey(), s.tokens, report))
            except Exception as e:  # BadPeriod until the chain's clock passes the period's end
                if "BadPeriod" not in str(e):
                    raise
                await asyncio.sleep(0.25)
        raise TimeoutError("the chain clock never passed the period end")

    async def slash(self, s: Supplier, victim: tuple[Pubkey, Client] | None = None) -> None:
        await self.send(self.attester, [ix.slash_provider(
            self.attester.pubkey(), self.treasury, s.node_key.pubkey(), s.wallet.pubkey(), "MissedHeartbeats",
            bytes(range(32)), victim=(victim[0], victim[1].tokens) if victim else None)])

    async def close(self, c: Client, lease: Pubkey) -> None:
        """The client closes; the attester, with nothing more to settle, finalizes at once."""
        state = await self.lease_state(lease)
        await self.send(c.wallet, [ix.close_lease(c.wallet.pubkey(), c.wallet.pubkey(), c.tokens, lease,
                                                  [a.node for a in state.assignments[: state.node_count]])])
        await self.send(self.attester, [ix.finalize_lease(self.attester.pubkey(), c.wallet.pubkey(), c.tokens, lease)])

    async def story(self) -> dict[str, object]:
        """Every kind of gpunet event at least once; the accounts involved."""
        await self.send(self.admin, [ix.update_config(self.admin.pubkey(), self.params)])
        ada, bob, cyd = await self.supplier(gpus=2), await self.supplier(gpus=2), await self.supplier(gpus=2)
        await self.send(cyd.wallet, [ix.update_node(cyd.wallet.pubkey(), cyd.node_key.pubkey(), 2, 2 * IO, bytes([7] * 32))])
        dev = await self.new_client()
        lease = await self.open_lease(dev, 1, gpus=4)
        await self.assign(lease, [(ada, 2), (bob, 2)])
        await self.send(dev.wallet, [ix.top_up_lease(dev.wallet.pubkey(), dev.tokens, lease, 600)])
        await self.settle(lease, ada)
        await self.settle(lease, bob)
        await self.slash(bob, victim=(lease, dev))
        await self.send(self.attester, [ix.reassign_lease(self.attester.pubkey(), lease, bob.node_key.pubkey(),
                                                          ix.Share(cyd.node_key.pubkey(), cyd.wallet.pubkey(), 2, cyd.price))])
        await self.settle(lease, cyd)
        await self.settle(lease, ada)
        await self.close(dev, lease)
        for draining in (True, False):  # cyd's announced maintenance, and its end
            await self.send(cyd.wallet, [ix.set_node_draining(cyd.wallet.pubkey(), cyd.node_key.pubkey(), draining)])
        await self.send(bob.wallet, [ix.unjail_node(bob.wallet.pubkey(), bob.node_key.pubkey())])
        await self.send(bob.wallet, [ix.deregister_node(bob.wallet.pubkey(), bob.node_key.pubkey())])
        await self.send(bob.wallet, [ix.request_unstake(bob.wallet.pubkey(), 10 * IO)])
        await self.send(bob.wallet, [ix.withdraw_unstaked(bob.wallet.pubkey(), bob.tokens)])
        return {"lease": lease, "suppliers": [ada, bob, cyd], "client": dev}
