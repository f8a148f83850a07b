"""gpunet's whole story with every real part, as `scripts/demo` shows it: gpunet-localnet with the
program, the coordinator (`gpunet coordinator run`: embedded PostgreSQL, indexer, gateway,
scheduler, settlement, API) and three `gpunet worker run` processes with simulated GPUs.

The admin initialises; three suppliers stake and register nodes (2, 2 and 4 GPUs); a client
opens a 4-GPU lease as a 2-node cluster and attaches a training job that checkpoints; usage is
settled every period; one worker is killed mid-lease, its provider is slashed and the job moves
and resumes from its checkpoint; the coordinator closes the lease at its end. The summary shows
every payment with its transaction, the conservation check and the audit.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from gpunet import instructions as ix
from gpunet.accounts import fetch
from gpunet.amounts import IO, format_io, parse_u64
from gpunet.audit import audit_lease, audit_provider
from gpunet.cli.links import Explorer, ExplorerError, explorer_for
from gpunet.demo import rewards_story
from gpunet.demo.processes import CoordinatorProcess, WorkerProcess
from gpunet.demo.rewards_story import RewardsResult
from gpunet.history import transactions_of
from gpunet.idl import PROGRAM_ID
from gpunet.jobs import CoordinatorError, job_view, seal_missing_checkpoint_key, submit_job
from gpunet.keys import create_keypair_file
from gpunet.localnet import LocalnetProcess, program_build
from gpunet.pda import lease_pda, node_pda, provider_pda
from gpunet.protocol import JobSpec
from gpunet.reach import ReachError, open_access
from gpunet.testbed import Market
from gpunet.tunnel import EXIT, AccessRequest, read_frame
from worker.simulate import SimulatedGpus

__all__ = ["Demo", "DemoResult"]

PRICE = 360 * IO  # per GPU-hour, every node: 0.1 IO per GPU-second, easy to follow
MAX_PRICE = 540 * IO
# Seconds between a worker's usage receipts sent, and between settlements: short, so the story takes a minute.
PERIOD = 3
SUPPLIERS = (("ada", 2), ("bob", 2), ("cyd", 4))
TRAIN = str(Path(__file__).with_name("train.py"))
CHECKPOINT_MIB = 32  # of random weights in each rank's checkpoint, restored and checked after the failover
WIDTH = 80  # the demo's output reads in an 80-column terminal: titles and the summary fit it
SECTIONS = (  # the titles of the story's sections, each drawn as a rule
    "1. The admin initialises gpunet",
    "2. Suppliers stake, register nodes, start workers; their GPUs are verified",
    "3. A client leases 4 H100s as a 2-node cluster and gives it a job",
    "4. The job runs; the nodes' signed usage receipts are settled on chain",
    "5. The lease ends: closed, last receipts settled, escrow refunded",
    "6. A token holder backs the suppliers; verified uptime earns rewards",
)


@dataclass
class Supplier:
    name: str
    gpus: int
    wallet: Keypair
    node_key: Keypair
    worker: WorkerProcess | None = None


@dataclass
class DemoResult:
    lease: Pubkey
    deposited: int = 0
    paid: int = 0
    fees: int = 0
    refunded: int = 0
    conserved: bool = False
    audits_ok: bool = False
    placed_on: list[str] = field(default_factory=list)
    killed: str = ""
    moved_to: str = ""
    resumed_from_step: int = 0
    checkpoint_bytes: int = 0  # the largest checkpoint the store held for the lease
    weights_verified: bool = False  # the resumed job found every byte of its checkpoint's weights
    events_on_chain: int = 0
    events_indexed_once: bool = False  # the coordinator's ledger holds every program event exactly once
    paid_by_supplier: dict[str, int] = field(default_factory=dict)
    slashed_by_supplier: dict[str, int] = field(default_factory=dict)
    to_client_by_supplier: dict[str, int] = field(default_factory=dict)  # each one's slash paid to the client
    compensated: int = 0  # the client's share of the slashes, as the lease account records it
    rewards: RewardsResult = field(default_factory=RewardsResult)

    @property
    def ok(self) -> bool:
        return (
            self.conserved
            and self.audits_ok
            and self.events_indexed_once
            and self.resumed_from_step > 0
            and self.weights_verified
            and self.rewards.paid > 0
            and self.rewards.collected > 0
            and self.rewards.audit_ok
        )


def short(value: object) -> str:
    s = str(value)
    return f"{s[:8]}…{s[-4:]}"


SUMMARY_COLUMNS = ("who", "GPU-s", "paid", "fees", "slashed", "to client", "refunded")


def summary_table(lease: Pubkey, rows: list[tuple[str, ...]]) -> Table:
    """What moved: one row per supplier (GPU-seconds, pay, fees, its slash and the client's share of
    it) and the client's (the slash paid to it, its refund). Fits WIDTH columns; the transactions
    are the next table's."""
    table = Table(title=f"lease {short(lease)}: what moved", box=box.SIMPLE_HEAVY, pad_edge=False, show_edge=False)
    for column in SUMMARY_COLUMNS:
        table.add_column(column, justify="left" if column == "who" else "right", no_wrap=True)
    for row in rows:
        table.add_row(*row)
    return table


def transactions_table(rows: list[tuple[str, str, str]]) -> Table:
    """Who, what, and the transaction that did it (short: the explorer has the rest)."""
    table = Table(title="the transactions", box=box.SIMPLE_HEAVY, pad_edge=False, show_edge=False)
    for column in ("who", "what", "transaction"):
        table.add_column(column, no_wrap=True)
    for row in rows:
        table.add_row(*row)
    return table


class Demo:
    def __init__(
        self,
        workdir: Path,
        console: Console | None = None,
        *,
        lease_seconds: int = 36,
        restart_coordinator: bool = False,
        keep_serving: bool = False,
    ) -> None:
        """`keep_serving`: after the story, everything stays up (the explorer and the wallet app on
        the coordinator's /web/) until Ctrl-C."""
        self.workdir, self.console = workdir, console or Console(soft_wrap=True)
        self.lease_seconds, self.restart_coordinator = lease_seconds, restart_coordinator
        self.keep_serving = keep_serving
        self.rpc_url: str | None = None  # the local node's, once started
        self.suppliers: list[Supplier] = []
        self.explorer: Explorer | None = None

    def say(self, text: str) -> None:
        self.console.print(text)

    def _tx(self, signature: object) -> str:
        """A transaction, short, linked to the explorer ($GPUNET_EXPLORER_URL, default gpunet's own on
        the coordinator's /web/) where the terminal draws links."""
        return self.explorer.link("tx", signature, short(signature)) if self.explorer else short(signature)

    def _section(self, number: int) -> None:
        self.console.rule(f"[bold]{SECTIONS[number - 1]}")

    async def run(self) -> DemoResult:
        node = LocalnetProcess(self.workdir / "localnet.log", slot_ms=100)
        with self.console.status("Starting gpunet-localnet…"):
            node.start()
        self.say(f"[dim]gpunet-localnet on {node.url} (gpunet program: {program_build()}); logs in {self.workdir}[/]")
        coordinator: CoordinatorProcess | None = None
        try:
            async with AsyncClient(node.url, commitment=Confirmed) as chain:
                self.chain, self.rpc_url = chain, node.url
                await self.initialise()
                coordinator = await self.start_coordinator(node)
                self._link_explorer(node, coordinator)
                await self.start_suppliers(coordinator)
                result = await self._lease(node, coordinator)
                if self.keep_serving:
                    await self._serve(coordinator, result.lease)
                else:
                    self.say(
                        "[dim]the explorer's page of this lease, while the demo runs (`scripts/demo --web` keeps it "
                        f"up after the story): {coordinator.api_url}/web/leases/{result.lease}[/]"
                    )
                return result
        finally:
            with self.console.status("Shutting down workers, coordinator and node…"):
                for s in self.suppliers:
                    if s.worker:
                        s.worker.stop()
                if coordinator:
                    coordinator.stop(timeout=60)
                node.stop()
            self.say("[dim]everything stopped cleanly[/]")

    def _link_explorer(self, node: LocalnetProcess, coordinator: CoordinatorProcess) -> None:
        """The demo's links: to gpunet's explorer on the coordinator (or $GPUNET_EXPLORER_URL's)."""
        template = os.environ.get("GPUNET_EXPLORER_URL") or f"{coordinator.api_url}/web/{{kind}}/{{id}}"
        try:
            self.explorer = explorer_for(template, node.url, "GPUNET_EXPLORER_URL")
        except ExplorerError as e:
            self.say(f"[yellow]{escape(str(e))}: no explorer links[/]")
            self.explorer = None

    async def _serve(self, coordinator: CoordinatorProcess, lease: Pubkey) -> None:
        self.say(
            f"[bold]the explorer stays up: this lease at {coordinator.api_url}/web/leases/{lease}, the network at "
            f"{coordinator.api_url}/web/, the wallet app at {coordinator.api_url}/web/app. Ctrl-C stops it all.[/]"
        )
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.Event().wait()

    async def initialise(self) -> None:
        self._section(1)
        self.market = await Market.create(
            self.chain,
            usage_period_seconds=PERIOD,
            min_stake_per_gpu=100 * IO,
            jail_seconds=600,
            min_verification_tier=ix.TIER_SIMULATED,  # leases only on nodes whose GPUs passed verification
        )
        self.admin, self.mint = self.market.admin, self.market.mint
        self.say(
            f"IO mint {self.mint}; fee 5%; min stake {format_io(100 * IO)}/GPU; usage period {PERIOD} s; "
            f"the coordinator's key {short(self.admin.pubkey())} is the attester; leases go only to "
            "nodes whose GPUs passed verification"
        )
        await rewards_story.start_staking(self.market)
        self.say(
            f"co-staking: {format_io(rewards_story.EMISSION)} of rewards per {rewards_story.EPOCH_SECONDS} s epoch "
            f"(a day on a real cluster), {format_io(10 * rewards_story.EMISSION)} funded"
        )

    async def start_coordinator(self, node: LocalnetProcess) -> CoordinatorProcess:
        attester = self.workdir / "attester.json"
        if not attester.exists():
            create_keypair_file(attester, self.admin)
        coordinator = CoordinatorProcess(
            self.workdir,
            node.url,
            node.ws_url,
            attester,
            heartbeat_seconds=0.5,
            lost_after_seconds=3,
            reconnect_grace_seconds=6,
            settle_seconds=1,
            settle_interval_seconds=PERIOD,  # production settles hourly: here every few seconds, to watch
            settle_min_amount=0,
            close_grace_seconds=5,
            poll_seconds=1,
            reward_sample_seconds=2,  # hourly on a real cluster
            rewards_every_seconds=3,
            reward_establishment_epochs=0,  # new nodes earn the full rate at once (7 epochs at half by default)
        )
        with self.console.status("Starting the coordinator (embedded PostgreSQL, indexer, gateway, API)…"):
            coordinator.start()
            await asyncio.to_thread(coordinator.wait_ready)
        self.say(f"coordinator API {coordinator.api_url}, worker gateway {coordinator.gateway_url}")
        return coordinator

    async def start_suppliers(self, coordinator: CoordinatorProcess) -> None:
        self._section(2)
        for name, gpus in SUPPLIERS:
            node_key = Keypair()
            inventory = SimulatedGpus.parse(f"H100:{gpus}:80", str(node_key.pubkey())).inventory()
            stake = (gpus + 1) * 100 * IO
            registered = await self.market.supplier(
                gpus, PRICE, stake, inventory_hash=inventory.hash(), node_key=node_key
            )
            supplier = Supplier(name, gpus, registered.wallet, node_key)
            keyfile = self.workdir / f"node-{name}.json"
            create_keypair_file(keyfile, node_key)
            supplier.worker = WorkerProcess(
                self.workdir,
                name,
                keyfile,
                f"H100:{gpus}:80",
                coordinator.gateway_url,
                coordinator.api_url,
                number=len(self.suppliers),
                rpc_url=self.rpc_url,
            )
            supplier.worker.start()
            self.suppliers.append(supplier)
            self.say(
                f"{name}: {gpus}x H100 80 GB [yellow](simulated)[/], {format_io(PRICE)}/GPU-hour, "
                f"staked {format_io(stake)}, node {short(node_key.pubkey())}"
            )
        with self.console.status("Waiting for the three workers to prove their node keys…"):
            await self._until(lambda: self._workers_online(coordinator, 3), 90, "three workers online")
        self.say("three workers connected and heartbeating (each labelled simulated)")
        with self.console.status("The coordinator challenges each GPU to prove H100 speed (simulated)…"):
            until = await self._until(self._verified, 120, "every node verified")
        self.say(
            f"every node's GPUs passed their challenges: verified on chain (tier 1, simulated) until "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(until))}; evidence: gpunet node verifications NODE"
        )
        self.holder = await rewards_story.open_pools(self.market, [s.wallet for s in self.suppliers])
        self.say(
            f"every supplier opened a pool ({rewards_story.COMMISSION_BPS // 100}% commission); a token holder "
            f"delegated {format_io(rewards_story.DELEGATED)} to each (gpunet stake delegate)"
        )

    async def _verified(self) -> int | None:
        """The earliest end of the suppliers' verifications, once every node is verified."""
        nodes = [await fetch(self.chain, node_pda(s.node_key.pubkey()), "Node") for s in self.suppliers]
        if all(n.verification_tier >= ix.TIER_SIMULATED and n.verified_until > time.time() for n in nodes):
            return min(int(n.verified_until) for n in nodes)
        return None

    async def _workers_online(self, coordinator: CoordinatorProcess, count: int) -> bool:
        async with httpx.AsyncClient(timeout=5) as http:
            items = (await http.get(f"{coordinator.api_url}/workers")).json()["items"]
        return sum(1 for w in items if w["online"] and w["simulated"]) >= count

    async def _lease(self, node: LocalnetProcess, coordinator: CoordinatorProcess) -> DemoResult:
        self._section(3)
        client = await self.market.client(100 * IO)
        lease = lease_pda(client.wallet.pubkey(), 1)
        result = DemoResult(lease)
        terms = ix.LeaseTerms(1, 80, 4, ix.ANY, MAX_PRICE, self.lease_seconds)
        opened = ix.open_lease(client.wallet.pubkey(), client.tokens, self.mint, 1, terms)
        await self.market.send(client.wallet, [opened])
        deposit = (await fetch(self.chain, lease, "Lease")).deposited
        self.say(
            f"lease {lease}: 4 GPUs for {self.lease_seconds} s at <= {format_io(MAX_PRICE)}/GPU-hour, "
            f"{format_io(deposit)} escrowed on chain"
        )
        spec = JobSpec(
            command=[sys.executable, TRAIN],
            env={"STEPS": "100000", "STEP_SECONDS": "0.1", "CHECKPOINT_MIB": str(CHECKPOINT_MIB)},
        )
        await self._until(lambda: self._submit(coordinator, client.wallet, lease, spec), 60, "the job accepted")
        view = await self._until(lambda: self._placed(coordinator, client.wallet, lease), 60, "the placement")
        names = {str(s.node_key.pubkey()): s.name for s in self.suppliers}
        result.placed_on = [names[k] for k in view["placement"]["nodes"]]
        self.say(
            f"placed by the coordinator on {' and '.join(result.placed_on)} (2 GPUs each, ranks 0 and 1)  "
            f"[dim]tx {short(view['placement']['signature'])}[/]"
        )
        sealed = await seal_missing_checkpoint_key(coordinator.api_url, self.chain, client.wallet, lease)
        self.say(
            f"the client sealed the lease's checkpoint key to {' and '.join(names[k] for k in sealed)}: "
            f"each rank's {CHECKPOINT_MIB} MiB checkpoint goes to the coordinator's store encrypted"
        )
        answer = await self._until(lambda: self._reach(coordinator, client.wallet, lease), 60, "the job reached")
        self.say(
            f"the client ran a command in rank 0's sandbox through the coordinator's relay, encrypted end to end "
            f"to {names[view['placement']['nodes'][0]]}'s key on chain (`gpunet lease exec`): {escape(answer)}"
        )

        self._section(4)
        await self._watch(coordinator, client.wallet, lease, result, names)
        await self._summary(lease, result, coordinator)
        await self._rewards(coordinator, result)
        return result

    async def _rewards(self, coordinator: CoordinatorProcess, result: DemoResult) -> None:
        self._section(6)
        with self.console.status("Waiting for an epoch the nodes were verified and online through to be credited…"):
            since = await rewards_story.earning_from(self.market, self.holder)
            epoch = await self._until(
                lambda: rewards_story.paid_epoch(coordinator.api_url, since), 120, "a rewarded epoch"
            )
        names = {str(provider_pda(s.wallet.pubkey())): s.name for s in self.suppliers}
        self.console.print(rewards_story.rewards_table(epoch, names))
        result.rewards.epoch, result.rewards.paid = epoch["epoch"], int(epoch["total"])
        result.rewards.collected = await rewards_story.collect(self.market, self.holder)
        self.say(
            f"the coordinator posted epoch {epoch['epoch']}'s root and cranked every pool's claim; the token holder "
            f"collected {format_io(result.rewards.collected)} (gpunet stake collect): its share of each pool's "
            "delegators' part, less the commission, for every epoch credited so far"
        )
        result.rewards.audit_ok = await rewards_story.audit(self.chain, coordinator.api_url, epoch["epoch"])
        self.say(
            f"gpunet rewards audit {epoch['epoch']}: the published inputs rebuild the chain's root → "
            f"{'[green]OK[/]' if result.rewards.audit_ok else '[red]DIFFERS[/]'}"
        )

    async def _reach(self, coordinator: CoordinatorProcess, client: Keypair, lease: Pubkey) -> str | None:
        """What one command prints inside the job of rank 0 (None: its job is not running yet)."""
        command = ["sh", "-c", 'echo "rank $RANK sees GPUs $CUDA_VISIBLE_DEVICES"']
        request = AccessRequest(kind="exec", lease=str(lease), command=command)
        try:
            access = await open_access(coordinator.api_url, self.chain, client, lease, request, direct=False)
        except ReachError as e:
            if "not running" in str(e) or "no job" in str(e) or "no data-plane link" in str(e):
                return None
            raise
        output = b""
        while (frame := await read_frame(access.channel)) is not None and frame[0] != EXIT:
            output += frame[1]
        await access.channel.close()
        return output.decode(errors="replace").strip()

    async def _submit(self, coordinator: CoordinatorProcess, client: Keypair, lease: Pubkey, spec: JobSpec) -> bool:
        try:
            await submit_job(coordinator.api_url, client, lease, spec, gpus_per_node=2)
        except CoordinatorError as e:
            if "not indexed" in str(e):
                return False
            raise
        return True

    async def _placed(self, coordinator: CoordinatorProcess, client: Keypair, lease: Pubkey) -> Any:
        view = await job_view(coordinator.api_url, client, lease)
        return view if view["placement"] and view["placement"]["state"] == "placed" else None

    async def _watch(
        self, coordinator: CoordinatorProcess, client: Keypair, lease: Pubkey, result: DemoResult, names: dict[str, str]
    ) -> None:
        by_node = {str(node_pda(s.node_key.pubkey())): s.name for s in self.suppliers}
        seen_settlements, seen_slashes, after_log = 0, 0, 0
        started = time.monotonic()
        with Progress(
            TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), console=self.console, transient=True
        ) as progress:
            bar = progress.add_task("lease running", total=self.lease_seconds + 15)
            async with httpx.AsyncClient(base_url=coordinator.api_url, timeout=10) as http:
                while True:
                    progress.update(bar, completed=time.monotonic() - started)
                    settlements = (await http.get("/settlements", params={"lease": str(lease), "limit": 500})).json()[
                        "items"
                    ]
                    for s in settlements[seen_settlements:]:
                        progress.console.print(
                            f"  {by_node.get(s['node'], '?')}: receipt for {s['receipt_gpu_seconds']} GPU-s "
                            f"signed by its node → {s['gpu_seconds']} more paid {format_io(parse_u64(s['payout']))}, "
                            f"fee {format_io(parse_u64(s['fee']))} kept for the treasury  "
                            f"[dim]tx {short(s['signature'])}[/]"
                        )
                    seen_settlements = len(settlements)
                    paid_nodes = [by_node.get(s["node"]) for s in settlements]
                    view = await job_view(coordinator.api_url, client, lease, after_log)
                    stored = (view.get("checkpoint") or {}).get("bytes", 0)
                    if stored >= CHECKPOINT_MIB << 20 > result.checkpoint_bytes:  # the first one of full size
                        progress.console.print(
                            f"  checkpoint in the coordinator's store: {stored / 2**20:.1f} MiB "
                            f"({view['checkpoint']['chunks']} encrypted chunks) from "
                            f"{names.get(view['checkpoint']['node_key'], '?')}"
                        )
                    result.checkpoint_bytes = max(result.checkpoint_bytes, stored)
                    if (
                        not result.killed
                        and all(paid_nodes.count(n) >= 2 for n in result.placed_on)
                        and result.checkpoint_bytes >= CHECKPOINT_MIB << 20
                    ):
                        victim = next(s for s in self.suppliers if s.name == result.placed_on[0])
                        assert victim.worker is not None
                        victim.worker.kill()
                        result.killed = victim.name
                        progress.console.print(
                            f"[bold red]  {victim.name}'s worker is killed (SIGKILL): its heartbeats stop[/]"
                        )
                    slashes = (await http.get("/slashes", params={"lease": str(lease)})).json()["items"]
                    for s in slashes[seen_slashes:]:
                        progress.console.print(
                            f"[yellow]  {by_node.get(s['node'], '?')} slashed {format_io(parse_u64(s['amount']))} "
                            f"for {s['fault']}: "
                            f"{format_io(parse_u64(s['to_client']))} to the client, "
                            f"{format_io(parse_u64(s['to_treasury']))} to the treasury "
                            f"(evidence {short(s['evidence_hash'])})  [dim]tx {short(s['signature'])}[/]"
                        )
                    seen_slashes = len(slashes)
                    # the client follows the lease: a node the lease moves to gets the key (its job waits till then)
                    for key in await seal_missing_checkpoint_key(coordinator.api_url, self.chain, client, lease, view):
                        progress.console.print(
                            f"  the client sealed the lease's checkpoint key to {names.get(key, '?')}"
                        )
                    for line in view["logs"]:
                        if "weights verified" in line["line"] and result.killed and not result.weights_verified:
                            who = names.get(line["node_key"], "?")
                            result.weights_verified = who not in result.placed_on
                            progress.console.print(
                                f"[green]  {who} restored the checkpoint from the store (every chunk's hash and tag "
                                f"checked); the job: {escape(line['line'].split(': ', 1)[-1])}[/]"
                            )
                        if "resumed from step" in line["line"] and not result.moved_to:
                            result.moved_to = names.get(line["node_key"], "?")
                            result.resumed_from_step = int(line["line"].rsplit(" ", 1)[-1])
                            progress.console.print(
                                f"[green]  the share moved to {result.moved_to}; the job resumed there "
                                f"from step {result.resumed_from_step} of its checkpoint[/]"
                            )
                            if self.restart_coordinator:
                                await self._restart(coordinator, progress)
                    if view["logs"]:
                        after_log = view["logs"][-1]["id"]
                    state = (await http.get(f"/leases/{lease}")).json()
                    if state.get("status") == "closed":
                        break
                    await asyncio.sleep(0.5)
        self._section(5)
        self.say(
            "the lease reached its end: the coordinator closed it (its nodes freed, billing stopped at the end), "
            "settled the last receipts and finalized it (the fees to the treasury, the rest of the escrow refunded)"
        )

    async def _restart(self, coordinator: CoordinatorProcess, progress: Progress) -> None:
        progress.console.print("[bold]  the coordinator is stopped and started again mid-lease[/]")
        await asyncio.to_thread(coordinator.stop, 60)
        coordinator.start()
        await asyncio.to_thread(coordinator.wait_ready)
        self.restart_coordinator = False

    async def _summary(self, lease: Pubkey, result: DemoResult, coordinator: CoordinatorProcess) -> None:
        account = await fetch(self.chain, lease, "Lease")
        result.deposited, result.paid, result.fees, result.refunded = (
            account.deposited,
            account.paid,
            account.fees,
            account.refunded,
        )
        txs = await transactions_of(self.chain, lease)
        result.compensated = account.compensated
        slashes = [
            (tx.signature, e.data)
            for tx in txs
            for e in tx.events
            if e.name == "ProviderSlashed" and str(e.data.lease) == str(lease)
        ]
        rows: list[tuple[str, ...]] = []
        transactions: list[tuple[str, str, str]] = []
        for s in self.suppliers:
            key = provider_pda(s.wallet.pubkey())
            settled = [
                (tx.signature, e.data)
                for tx in txs
                for e in tx.events
                if e.name == "UsageSettled" and str(e.data.provider) == str(key)
            ]
            slashed = (await fetch(self.chain, key, "Provider")).slashed
            mine = [(sig, d) for sig, d in slashes if str(d.provider) == str(key)]
            result.paid_by_supplier[s.name] = sum(d.payout for _, d in settled)
            result.slashed_by_supplier[s.name] = slashed
            result.to_client_by_supplier[s.name] = sum(d.to_client for _, d in mine)
            rows.append(
                (
                    s.name,
                    str(sum(d.gpu_seconds for _, d in settled)),
                    format_io(result.paid_by_supplier[s.name]),
                    format_io(sum(d.fee for _, d in settled)),
                    format_io(slashed) if slashed else "-",
                    format_io(result.to_client_by_supplier[s.name]) if mine else "-",
                    "",
                )
            )
            if settled:
                transactions.append((s.name, f"{len(settled)} settlements, the last", self._tx(settled[-1][0])))
            transactions += [(s.name, f"slashed {format_io(d.amount)}", self._tx(sig)) for sig, d in mine]

        def sig(name: str) -> str:
            return next((self._tx(tx.signature) for tx in txs for e in tx.events if e.name == name), "-")

        rows.append(("client", "", "", "", "", f"+{format_io(result.compensated)}", format_io(result.refunded)))
        transactions += [("client", "close", sig("LeaseClosed")), ("client", "finalize", sig("LeaseFinalized"))]
        self.console.print(summary_table(lease, rows))
        self.console.print(transactions_table(transactions))
        self.say(
            "the close refunded what the last usage could not cost; the finalization the rest, once the last "
            "receipts were settled; the slashed supplier's stake paid the client its share"
        )
        result.conserved = account.deposited == account.paid + account.fees + account.refunded
        self.say(
            f"conservation (base units): deposited {account.deposited} == paid {account.paid} + fees {account.fees} "
            f"+ refunded {account.refunded} → {'[green]OK[/]' if result.conserved else '[red]MISMATCH[/]'}"
        )
        chain_events = [
            (str(tx.signature), i, e.name)
            for tx in await transactions_of(self.chain, PROGRAM_ID)
            for i, e in enumerate(tx.events)
        ]
        # The coordinator goes on sending (reward roots, claims): the ledger must hold every event the
        # chain had, in its order, and may have newer ones after them.
        indexed: list[tuple[str, int, str]] = []
        async with httpx.AsyncClient(base_url=coordinator.api_url, timeout=30) as http:
            for _ in range(100):
                while True:
                    page = (await http.get("/events", params={"limit": 500, "offset": len(indexed)})).json()
                    indexed += [(e["signature"], e["event_index"], e["name"]) for e in page["items"]]
                    if page["next_offset"] is None:
                        break
                if len(indexed) >= len(chain_events):
                    break
                await asyncio.sleep(0.2)  # the indexer catching up
        result.events_on_chain = len(chain_events)
        result.events_indexed_once = indexed[: len(chain_events)] == chain_events and len(set(indexed)) == len(indexed)
        self.say(
            f"ledger: {len(indexed)} events indexed, {len(chain_events)} on chain, same order, none twice → "
            f"{'[green]OK[/]' if result.events_indexed_once else '[red]DIFFERENT[/]'}"
        )
        reports = [await audit_lease(self.chain, lease)] + [
            await audit_provider(self.chain, s.wallet.pubkey()) for s in self.suppliers
        ]
        async with httpx.AsyncClient(timeout=30) as http:
            ledger = (await http.get(f"{coordinator.api_url}/audit/leases/{lease}")).json()
        result.audits_ok = all(r.ok for r in reports) and bool(ledger.get("ok"))
        checks = sum(len(r.checks) for r in reports)
        self.say(
            f"audit: {checks} checks of the lease and the three providers against their transactions, and the "
            f"coordinator's ledger against the chain → {'[green]OK[/]' if result.audits_ok else '[red]DIFFERENCES[/]'}"
        )

    async def _until(self, check: Any, timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            if value := await check():
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out waiting for {what} (logs in {self.workdir})")
            await asyncio.sleep(0.3)
