"""The gpunet story as far as it exists: a local node, the program, the SDK, one cluster lease
from opening to settlement, a lost node, the close, and every token accounted for.

Run by `scripts/demo` (python -m gpunet.demo). The coordinator, PostgreSQL and the workers
join the story as their issues land; until then this process plays the attester and signs
the workers' usage reports with their node keys.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from anchorpy import Coder
from rich.console import Console
from rich.table import Table
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.signature import Signature

from gpunet import instructions as ix
from gpunet.client import send_and_confirm
from gpunet.events import decode_events
from gpunet.idl import load_idl
from gpunet.localnet import LocalnetError, LocalnetProcess
from gpunet.pda import lease_pda, lease_vault_pda, provider_pda
from gpunet.tokens import create_mint, create_token_account, mint_io, token_balance
from gpunet.usage import UsageReport

IO = 10**6
PERIOD = 2  # seconds of usage per report: short, so the story runs in seconds of wall time
console = Console()


def io(units: int) -> str:
    return f"{units / IO:,.6f} IO"


def short(sig: Signature) -> str:
    s = str(sig)
    return f"{s[:8]}…{s[-4:]}"


class Story:
    def __init__(self, client: AsyncClient) -> None:
        self.client = client
        self.coder = Coder(load_idl())
        self.paid: dict[str, int] = {}
        self.fees = 0

    async def wallet(self) -> Keypair:
        kp = Keypair()
        sig = (await self.client.request_airdrop(kp.pubkey(), 10 * 10**9)).value
        for _ in range(200):
            if (await self.client.get_signature_statuses([sig])).value[0] is not None:
                return kp
            await asyncio.sleep(0.05)
        raise TimeoutError("airdrop not confirmed")

    async def events(self, sig: Signature) -> list:
        tx = (await self.client.get_transaction(sig, commitment=Confirmed, max_supported_transaction_version=0)).value
        return decode_events(tx.transaction.meta.log_messages if tx else [])

    async def lease_state(self, lease: Pubkey):
        data = (await self.client.get_account_info(lease)).value.data
        return self.coder.accounts.decode(bytes(data))

    async def settle_period(self, period: int, lease: Pubkey, shares: dict[str, tuple[Keypair, Keypair, Pubkey]]) -> None:
        await asyncio.sleep(PERIOD)
        state = await self.lease_state(lease)
        by_node = {a.node_key: a for a in state.assignments[: state.node_count]}
        for name, (node_key, supplier, tokens) in shares.items():
            share = by_node[node_key.pubkey()]
            report = UsageReport(share.last_seq + 1, share.settled_until, share.settled_until + PERIOD, PERIOD * share.gpus)
            sig = await send_and_confirm(self.client, self.attester, ix.signed_settlement(
                self.attester.pubkey(), self.treasury, lease, node_key, supplier.pubkey(), tokens, report))
            settled = next(e for e in await self.events(sig) if e.name == "UsageSettled").data
            self.paid[name] = self.paid.get(name, 0) + settled.payout
            self.fees += settled.fee
            console.print(f"  period {period} {name}: seq {settled.seq}, {settled.gpu_seconds} GPU-s signed by the node"
                          f" → paid {io(settled.payout)}, fee {io(settled.fee)}  [dim]tx {short(sig)}[/]")

    async def run(self) -> bool:
        c = self.client
        console.rule("[bold]gpunet lease story[/] — program on gpunet-localnet, driven by the SDK")
        self.admin, self.attester = await self.wallet(), await self.wallet()
        mint = await create_mint(c, self.admin)
        self.treasury = await create_token_account(c, self.admin, mint, self.admin.pubkey())
        params = ix.ConfigParams(treasury=self.treasury, protocol_fee_bps=500, min_stake_per_gpu=100 * IO,
                                 unbonding_seconds=3_600, usage_period_seconds=60, jail_seconds=600,
                                 slash_bps=(1_000, 2_000, 5_000), slash_client_share_bps=5_000,
                                 attesters=[self.attester.pubkey()])
        await send_and_confirm(c, self.admin, [ix.initialize(self.admin.pubkey(), mint, params)])
        console.print(f"admin initialised: IO mint {mint}, fee 5%, min stake {io(100 * IO)} per GPU")

        console.print("\n[bold]Suppliers stake IO and register nodes[/]")
        suppliers: dict[str, tuple[Keypair, Keypair, Pubkey]] = {}
        for name, gpus, stake in (("ada", 4, 800), ("bob", 2, 400), ("cyd", 2, 400)):
            wallet, node_key = await self.wallet(), Keypair()
            tokens = await create_token_account(c, self.admin, mint, wallet.pubkey())
            await mint_io(c, self.admin, mint, tokens, 1_000 * IO)
            await send_and_confirm(c, wallet, [
                ix.register_provider(wallet.pubkey(), mint),
                ix.stake(wallet.pubkey(), tokens, stake * IO),
                ix.register_node(wallet.pubkey(), node_key.pubkey(), ix.NodeSpec(1, gpus, 80, 1, 2 * IO)),
            ], [node_key])
            suppliers[name] = (node_key, wallet, tokens)
            console.print(f"  {name}: {gpus}x H100 (simulated) at {io(2 * IO)}/GPU-hour, staked {io(stake * IO)}")

        console.print("\n[bold]A client opens a 4-GPU cluster lease for one hour[/] (max 3 IO/GPU-hour, fully escrowed)")
        dev = await self.wallet()
        dev_tokens = await create_token_account(c, self.admin, mint, dev.pubkey())
        await mint_io(c, self.admin, mint, dev_tokens, 1_000 * IO)
        terms = ix.LeaseTerms(ix.ANY, 24, 4, ix.ANY, 3 * IO, 3_600)
        await send_and_confirm(c, dev, [ix.open_lease(dev.pubkey(), dev_tokens, mint, 1, terms)])
        lease = lease_pda(dev.pubkey(), 1)
        console.print(f"  lease {lease}: escrow {io(await token_balance(c, lease_vault_pda(lease)))}")
        sig = await send_and_confirm(c, self.attester, [ix.assign_lease(self.attester.pubkey(), lease, [
            ix.Share(suppliers[n][0].pubkey(), suppliers[n][1].pubkey(), 2) for n in ("ada", "bob")])])
        console.print(f"  placed on ada (2 GPUs) and bob (2 GPUs)  [dim]tx {short(sig)}[/]")

        console.print("\n[bold]Nodes sign usage every period; the attester settles it on chain[/]")
        running = {n: suppliers[n] for n in ("ada", "bob")}
        for period in (1, 2, 3):
            await self.settle_period(period, lease, running)

        console.print("\n[bold]bob's node stops heartbeating: slashed, jailed, its share moved to cyd[/]")
        sig = await send_and_confirm(c, self.attester, [ix.slash_provider(
            self.attester.pubkey(), self.treasury, suppliers["bob"][0].pubkey(), suppliers["bob"][1].pubkey(),
            "MissedHeartbeats", bytes(32), victim=(lease, dev_tokens))])
        slash = next(e for e in await self.events(sig) if e.name == "ProviderSlashed").data
        console.print(f"  slashed {io(slash.amount)}: {io(slash.to_client)} to the client, {io(slash.to_treasury)}"
                      f" to the treasury  [dim]tx {short(sig)}[/]")
        sig = await send_and_confirm(c, self.attester, [ix.reassign_lease(
            self.attester.pubkey(), lease, suppliers["bob"][0].pubkey(),
            ix.Share(suppliers["cyd"][0].pubkey(), suppliers["cyd"][1].pubkey(), 2))])
        console.print(f"  reassigned bob → cyd  [dim]tx {short(sig)}[/]")
        running = {n: suppliers[n] for n in ("ada", "cyd")}
        for period in (4, 5):
            await self.settle_period(period, lease, running)

        console.print("\n[bold]The client closes the lease; the unspent escrow is refunded[/]")
        state = await self.lease_state(lease)
        sig = await send_and_confirm(c, dev, [ix.close_lease(
            dev.pubkey(), dev.pubkey(), dev_tokens, lease, [a.node for a in state.assignments[: state.node_count]])])
        closed = next(e for e in await self.events(sig) if e.name == "LeaseClosed").data
        console.print(f"  refund {io(closed.refund)}  [dim]tx {short(sig)}[/]")

        state = await self.lease_state(lease)
        table = Table(title="Summary")
        for column in ("supplier", "paid", "slashed"):
            table.add_column(column, justify="right" if column != "supplier" else "left")
        for name, (_, wallet, _) in suppliers.items():
            provider = self.coder.accounts.decode(bytes((await c.get_account_info(provider_pda(wallet.pubkey()))).value.data))
            table.add_row(name, io(self.paid.get(name, 0)), io(provider.slashed))
        console.print(table)
        balanced = state.deposited == state.paid + state.fees + state.refunded
        matches = state.paid == sum(self.paid.values()) and state.fees == self.fees
        console.print(f"client deposited {io(state.deposited)}; paid {io(state.paid)} + fees {io(state.fees)}"
                      f" + refunded {io(state.refunded)}")
        console.print(f"conservation (base units): {state.deposited} == {state.paid} + {state.fees} + {state.refunded}"
                      f" → {'[green]OK[/]' if balanced and matches else '[red]MISMATCH[/]'}")
        return balanced and matches


async def main() -> int:
    log = Path(tempfile.mkdtemp(prefix="gpunet-demo-")) / "localnet.log"
    try:
        with LocalnetProcess(log, slot_ms=100) as node:
            console.print(f"[dim]gpunet-localnet on {node.url} (log {log})[/]")
            async with AsyncClient(node.url, commitment=Confirmed) as client:
                ok = await Story(client).run()
    except LocalnetError as e:
        console.print(f"[red]demo: {e}[/]")
        return 2
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
