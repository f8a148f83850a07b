"""Turning the workers' signed usage receipts into on-chain settlements.

A receipt is cumulative (the share's GPU-seconds since its assignment, through an instant), so
one settlement pays everything up to it and the chain is the source of truth for what is settled:
before anything is sent, each receipt is compared with its share on chain. One not above the
share's last settled receipt was settled already (by us before a restart, or it is a replay): it
is acknowledged, never sent again. So a coordinator that crashes at any point and is given the
same receipts again settles each second exactly once.

Receipts are checked before they cost a transaction: the node's signature over the canonical
message, the assignment epoch (a receipt of an earlier assignment of the node to the lease is
refused), the instant it runs through (after what is settled, never past the lease's end or its
close), the cumulative against wall time x GPUs since the assignment, and the increment against
the online time the coordinator itself observed (heartbeats) since the last settled receipt: of
the increment, only the seconds it saw the node online (and at most wall time x GPUs since the
last settled receipt) are accepted and paid; the rest is settled unpaid. A closing lease takes
receipts until its settlement deadline. Accepted receipts are packed several to a transaction,
each Ed25519 instruction directly before its settle_usage, as the program requires, and the
transactions are sent at once, a share's in order (`InFlight`: a bounded window). With a
fence (coordinator.leader), each transaction is first recorded as the leader's decision under the
check that its term still leads.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from solana.rpc.async_api import AsyncClient
from solders.hash import Hash
from solders.instruction import Instruction
from solders.keypair import Keypair
from solders.message import Message
from solders.pubkey import Pubkey
from solders.signature import Signature
from solders.transaction import Transaction

from coordinator.attester import Intend
from coordinator.payers import FeePayers
from gpunet import instructions as ix
from gpunet.accounts import AccountError, chain_clock, fetch, fetch_config, lease_end
from gpunet.client import InFlight, TransactionExpired, TransactionFailed
from gpunet.fees import MAX_COMPUTE_UNITS, Budget, with_budget
from gpunet.positions import epoch_at, fetch_staking
from gpunet.tokens import io_account
from gpunet.usage import Receipt

__all__ = ["Outcome", "Settler", "SignedUsage", "Status"]

PACKET_BYTES = 1232  # the most a Solana transaction may take on the wire

_Ready = tuple["SignedUsage", int, list[Instruction]]  # a receipt, the GPU-seconds accepted, its instructions


def _accepted(usage: SignedUsage, gpu_seconds: int) -> str:
    return f"{gpu_seconds} GPU-seconds paid, through {usage.receipt.through}"


@dataclass(frozen=True)
class SignedUsage:
    """One usage receipt as a worker sent it: the receipt and the node's signature over it."""

    lease: Pubkey
    node_key: Pubkey
    receipt: Receipt
    signature: bytes


class Status(StrEnum):
    SETTLED = "settled"  # settled on chain by this call
    ALREADY_SETTLED = "already_settled"  # not above what is settled on chain: acknowledge, never resend
    WAITING = "waiting"  # not settleable yet (runs past the lease's current end, or ahead of the clock)
    REFUSED = "refused"  # bad signature, over-claim, wrong lease, node or epoch, or the program refused it


@dataclass(frozen=True)
class Outcome:
    usage: SignedUsage
    status: Status
    reason: str = ""
    signature: Signature | None = None  # the settling transaction
    gpu_seconds: int = 0  # of the receipt's increment, paid for (settled only)


ObservedSeconds = Callable[[SignedUsage, int], int | None]
"""Seconds the coordinator saw the node online from an instant (the share's last settled receipt)
to the receipt's `through` (None: not tracked)."""


class Settler:
    def __init__(
        self,
        client: AsyncClient,
        attester: Keypair,
        payers: FeePayers | None = None,
        *,
        intend: Intend | None = None,
        sender: InFlight | None = None,
    ) -> None:
        self.client = client
        self.intend = intend
        self.attester = attester
        self.payers = payers or FeePayers(client, attester)  # who pays each fee (coordinator.payers)
        # The transactions out at once, the coordinator's other transactions' included (one window).
        self.sender = sender or InFlight(client)
        self._authorities: dict[Pubkey, Pubkey] = {}  # provider account -> its wallet (never changes)
        # Providers seen with a pool (a pool is never closed); the others are read again each batch.
        self._pooled: set[Pubkey] = set()

    async def settle(
        self, batch: Sequence[SignedUsage], observed: ObservedSeconds = lambda _u, _s: None
    ) -> list[Outcome]:
        """Checks every receipt against the chain and settles the good ones; one Outcome per receipt."""
        config = await fetch_config(self.client)
        # The chain's clock, not this one: the program refuses a receipt through a second its clock
        # has not reached (BadPeriod), so such a receipt waits for the chain instead.
        now = await chain_clock(self.client)
        income_epoch = _LazyEpoch(self.client, now)
        outcomes: list[Outcome] = []
        ready: list[tuple[SignedUsage, int, list[Instruction]]] = []
        ordered = sorted(batch, key=lambda u: (bytes(u.lease), bytes(u.node_key), u.receipt.epoch, u.receipt.through))
        leases: dict[Pubkey, Any] = {}
        # A share's receipts queued in this batch: the next one pays its increment over the last of them.
        queued: dict[tuple[Pubkey, Pubkey], tuple[int, int]] = {}  # -> (cumulative, through)
        for usage in ordered:
            try:
                lease = leases.get(usage.lease) or await fetch(self.client, usage.lease, "Lease")
            except AccountError as e:
                outcomes.append(Outcome(usage, Status.REFUSED, str(e)))
                continue
            leases[usage.lease] = lease
            key = (usage.lease, usage.node_key)
            checked = self._check(usage, lease, observed, queued.get(key), now)
            if isinstance(checked, Outcome):
                outcomes.append(checked)
                continue
            queued[key] = (usage.receipt.gpu_seconds, usage.receipt.through)
            # The provider the share was assigned to, not the node account's: the node may have been
            # released since, or its key registered again by another provider (the program refuses both).
            share = _share(lease, usage.node_key)
            assert share is not None  # _check refused the receipt otherwise
            authority = await self._authority(share.provider)
            # the delegators' part of a pooled provider's payout is its pool's income of this epoch
            pooled = await self._has_pool(share.provider)
            ready.append(
                (
                    usage,
                    checked,
                    [
                        usage.receipt.signed_instruction(usage.lease, usage.node_key, usage.signature),
                        ix.settle_usage(
                            self.attester.pubkey(),
                            usage.lease,
                            usage.node_key,
                            authority,
                            io_account(authority, config.io_mint),
                            usage.receipt,
                            checked,
                            await income_epoch.get() if pooled else None,
                        ),
                    ],
                )
            )
        outcomes.extend(await self._send_all(self._pack(ready)))
        return outcomes

    async def _send_all(self, groups: list[list[_Ready]]) -> list[Outcome]:
        """Sends the transactions at once, within the sender's window, but a share's receipts in
        order: a transaction holding a share waits for the one before it holding that share (the
        program takes a share's receipts only in order). Every transaction is seen to its end; then
        the first error, if any, is raised (a Fenced leader's, say)."""
        last: dict[tuple[Pubkey, Pubkey], asyncio.Task[list[Outcome]]] = {}
        tasks = []
        for group in groups:
            shares = {(u.lease, u.node_key) for u, _, _ in group}
            before = {last[s] for s in shares if s in last}
            task = asyncio.create_task(self._send_after(before, group))
            last.update(dict.fromkeys(shares, task))
            tasks.append(task)
        results = await asyncio.gather(*tasks, return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return [o for result in results if not isinstance(result, BaseException) for o in result]

    async def _send_after(self, before: set[asyncio.Task[list[Outcome]]], group: list[_Ready]) -> list[Outcome]:
        if before:
            await asyncio.wait(before)  # their outcomes are theirs; this one is judged on chain after them
        return await self._send(group)

    def _check(
        self, usage: SignedUsage, lease: Any, observed: ObservedSeconds, queued: tuple[int, int] | None, now: int
    ) -> Outcome | int:
        """The GPU-seconds of the receipt's increment to pay for, or why it is not settled now. `queued`:
        the share's last receipt queued before it in this batch (cumulative, through), if any; `now`:
        the chain's clock."""
        r = usage.receipt

        def refuse(reason: str) -> Outcome:
            return Outcome(usage, Status.REFUSED, reason)

        status = type(lease.status).__name__
        if status not in ("Active", "Closing"):
            return refuse(f"lease {usage.lease} is {status.lower()}: nothing is billable")
        if status == "Closing" and now > lease.settle_deadline:
            return refuse(f"lease {usage.lease}'s settlement window ended at {lease.settle_deadline}")
        share = _share(lease, usage.node_key)
        if share is None:
            return refuse(f"node {usage.node_key} has no share of lease {usage.lease}")
        if r.epoch != share.epoch:
            return refuse(f"the receipt is of assignment {r.epoch}, the node's share is assignment {share.epoch}")
        if not r.verify(usage.lease, usage.node_key, usage.signature):
            return refuse("the signature is not the node's over this receipt")
        settled, settled_until = queued or (share.receipt_gpu_seconds, share.settled_until)
        if r.gpu_seconds <= settled:
            return Outcome(
                usage, Status.ALREADY_SETTLED, f"{r.gpu_seconds} GPU-seconds are settled on chain (up to {settled})"
            )
        if r.through <= settled_until:
            return refuse(f"more GPU-seconds through {r.through}, not after what is settled ({settled_until})")
        if status == "Closing" and r.through > lease.billable_until:
            return refuse(f"runs through {r.through}, after the lease's billing ended ({lease.billable_until})")
        if status == "Active" and r.through > (ends_at := lease_end(lease)):
            # a top-up may still move the end; if the lease closes instead, the node's final receipt comes
            return Outcome(usage, Status.WAITING, f"runs through {r.through}, after the lease's end ({ends_at})")
        if r.through > now:
            return Outcome(usage, Status.WAITING, f"runs through {r.through}, ahead of the chain's clock ({now})")
        most = max(0, r.through - share.assigned_at) * share.gpus
        if r.gpu_seconds > most:
            return refuse(
                f"{r.gpu_seconds} GPU-seconds claimed, at most {most} since the assignment ({share.gpus} GPUs)"
            )
        increment = r.gpu_seconds - settled
        span = r.through - settled_until
        online = observed(usage, settled_until)
        return min(increment, min(span, online if online is not None else span) * share.gpus)

    async def _authority(self, provider: Pubkey) -> Pubkey:
        if provider not in self._authorities:
            await self._read_provider(provider)
        return self._authorities[provider]

    async def _has_pool(self, provider: Pubkey) -> bool:
        if provider not in self._pooled:
            await self._read_provider(provider)
        return provider in self._pooled

    async def _read_provider(self, provider: Pubkey) -> None:
        account = await fetch(self.client, provider, "Provider")
        self._authorities[provider] = account.authority
        if account.has_pool:
            self._pooled.add(provider)

    def _pack(self, ready: list[_Ready]) -> list[list[_Ready]]:
        """Groups settlements into transactions that fit the packet size."""
        groups: list[list[_Ready]] = []
        for item in ready:
            if groups and self._size(groups[-1] + [item]) <= PACKET_BYTES:
                groups[-1].append(item)
            else:
                groups.append([item])
        return groups

    def _size(self, group: list[_Ready]) -> int:
        """The transaction's size as sent: with its compute budget, a priority fee included (the largest form)."""
        instructions = with_budget([i for _, _, pair in group for i in pair], Budget(MAX_COMPUTE_UNITS, 1))
        message = Message.new_with_blockhash(instructions, self.payers.sizing_payer, Hash.default())
        return len(bytes(Transaction.new_unsigned(message)))

    async def _send(self, group: list[_Ready]) -> list[Outcome]:
        instructions = [i for _, _, pair in group for i in pair]
        if self.intend is not None:  # outside the try: a fenced settlement is no receipt's fault
            subject = " ".join(f"{u.lease}/{u.node_key}@{u.receipt.gpu_seconds}" for u, _, _ in group)
            await self.intend("settle", subject)
        try:
            payer, cosigners = await self.payers.signing()
            sig = await self.sender.send(payer, instructions, cosigners)
            return [Outcome(u, Status.SETTLED, _accepted(u, n), sig, n) for u, n, _ in group]
        except (TransactionFailed, TransactionExpired) as e:
            if len(group) == 1:
                return [Outcome(group[0][0], Status.REFUSED, str(e), getattr(e, "signature", None))]
        # One bad receipt refuses its whole transaction: settle the rest one by one.
        outcomes: list[Outcome] = []
        for item in group:
            outcomes.extend(await self._send([item]))
        return outcomes


def _share(lease: Any, node_key: Pubkey) -> Any | None:
    """The lease's share held by the node with `node_key`, if it holds one."""
    return next((a for a in list(lease.assignments)[: lease.node_count] if a.node_key == node_key), None)


class _LazyEpoch:
    """The staking epoch at the chain's clock, read once a batch and only when a pooled provider is
    settled (a cluster without co-staking has no staking account)."""

    def __init__(self, client: AsyncClient, now: int) -> None:
        self.client, self.now = client, now
        self._epoch: int | None = None

    async def get(self) -> int:
        if self._epoch is None:
            self._epoch = epoch_at(await fetch_staking(self.client), self.now)
        return self._epoch
