"""Turning the workers' signed usage reports into on-chain settlements.

The chain is the source of truth for what is settled: before anything is sent, each report's
sequence number is compared with its share's `last_seq` on chain. A report at or below it was
settled already (by us before a restart, or it is a replay): it is acknowledged, never sent
again. A report beyond `last_seq + 1` waits for the ones before it, unless those were refused:
the program accepts any higher seq, so a refused report is skipped for good and never blocks
the node's later usage. So a coordinator that crashes at any point and is given the same reports
again settles each exactly once.

Reports are checked before they cost a transaction: the node's signature over the canonical
message, the period (not before what is settled, not longer than its span x GPUs, never past the
lease's end or its close), and the GPU-seconds against the online time the coordinator itself
observed (heartbeats). A closing lease takes reports until its settlement deadline. Accepted
reports are packed several to a transaction, each Ed25519 instruction directly before its
settle_usage, as the program requires.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
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

from coordinator.payers import FeePayers
from gpunet import instructions as ix
from gpunet.accounts import AccountError, fetch, fetch_config, lease_end
from gpunet.client import TransactionExpired, TransactionFailed, send_and_confirm
from gpunet.fees import MAX_COMPUTE_UNITS, Budget, with_budget
from gpunet.pda import node_pda
from gpunet.tokens import io_account
from gpunet.usage import UsageReport

__all__ = ["Outcome", "Settler", "SignedUsage", "Status"]

PACKET_BYTES = 1232  # the most a Solana transaction may take on the wire


@dataclass(frozen=True)
class SignedUsage:
    """One usage report as a worker sent it: the report and the node's signature over it."""

    lease: Pubkey
    node_key: Pubkey
    report: UsageReport
    signature: bytes


class Status(StrEnum):
    SETTLED = "settled"  # paid on chain by this call
    ALREADY_SETTLED = "already_settled"  # its seq is settled on chain already: acknowledge, never resend
    WAITING = "waiting"  # an earlier report of the share is missing; retry after it
    REFUSED = "refused"  # bad signature, over-claim, wrong lease or node, or the program refused it


@dataclass(frozen=True)
class Outcome:
    usage: SignedUsage
    status: Status
    reason: str = ""
    signature: Signature | None = None  # the settling transaction


ObservedSeconds = Callable[[SignedUsage], int | None]
"""Seconds the coordinator saw the node online during the report's period (None: not tracked)."""


class Settler:
    def __init__(self, client: AsyncClient, attester: Keypair, payers: FeePayers | None = None) -> None:
        self.client = client
        self.attester = attester
        self.payers = payers or FeePayers(client, attester)  # who pays each fee (coordinator.payers)
        self._authorities: dict[Pubkey, Pubkey] = {}  # node key -> provider wallet (never changes)

    async def settle(
        self,
        batch: Sequence[SignedUsage],
        observed: ObservedSeconds = lambda _: None,
        refused: Collection[tuple[Pubkey, Pubkey, int]] = (),
    ) -> list[Outcome]:
        """Checks every report against the chain and settles the good ones; one Outcome per report.
        `refused`: (lease, node key, seq) of reports refused before, which later ones need not wait for."""
        config = await fetch_config(self.client)
        outcomes: list[Outcome] = []
        ready: list[tuple[SignedUsage, list[Instruction]]] = []
        ordered = sorted(batch, key=lambda u: (bytes(u.lease), bytes(u.node_key), u.report.seq))
        leases: dict[Pubkey, Any] = {}
        next_seq: dict[tuple[Pubkey, Pubkey], int] = {}
        for usage in ordered:
            try:
                lease = leases.get(usage.lease) or await fetch(self.client, usage.lease, "Lease")
            except AccountError as e:
                outcomes.append(Outcome(usage, Status.REFUSED, str(e)))
                continue
            leases[usage.lease] = lease
            outcome = self._check(usage, lease, next_seq, observed(usage), refused)
            if outcome is not None:
                outcomes.append(outcome)
                continue
            next_seq[(usage.lease, usage.node_key)] = usage.report.seq + 1
            authority = await self._authority(usage.node_key)
            ready.append(
                (
                    usage,
                    [
                        usage.report.signed_instruction(usage.lease, usage.node_key, usage.signature),
                        ix.settle_usage(
                            self.attester.pubkey(),
                            config.treasury,
                            usage.lease,
                            usage.node_key,
                            authority,
                            io_account(authority, config.io_mint),
                            usage.report,
                        ),
                    ],
                )
            )
        for group in self._pack(ready):
            outcomes.extend(await self._send(group))
        return outcomes

    def _check(
        self,
        usage: SignedUsage,
        lease: Any,
        next_seq: dict,
        online: int | None,
        refused: Collection[tuple[Pubkey, Pubkey, int]],
    ) -> Outcome | None:
        r = usage.report
        key = (usage.lease, usage.node_key)

        def skip(reason: str) -> Outcome:
            """Refuses the node's own signed report; its later ones go on without it."""
            next_seq[key] = r.seq + 1
            return Outcome(usage, Status.REFUSED, reason)

        status = type(lease.status).__name__
        if status not in ("Active", "Closing"):
            return Outcome(usage, Status.REFUSED, f"lease {usage.lease} is {status.lower()}: nothing is billable")
        if status == "Closing" and time.time() > lease.settle_deadline:
            return Outcome(
                usage, Status.REFUSED, f"lease {usage.lease}'s settlement window ended at {lease.settle_deadline}"
            )
        share = next((a for a in list(lease.assignments)[: lease.node_count] if a.node_key == usage.node_key), None)
        if share is None:
            return Outcome(usage, Status.REFUSED, f"node {usage.node_key} has no share of lease {usage.lease}")
        if not r.verify(usage.lease, usage.node_key, usage.signature):
            return Outcome(usage, Status.REFUSED, "the signature is not the node's over this report")
        expected = next_seq.get(key, share.last_seq + 1)
        while expected < r.seq and (usage.lease, usage.node_key, expected) in refused:
            expected += 1
        if r.seq < expected:
            return Outcome(usage, Status.ALREADY_SETTLED, f"seq {r.seq} is settled on chain (last {share.last_seq})")
        if r.seq > expected:
            return Outcome(usage, Status.WAITING, f"seq {r.seq} waits for seq {expected}")
        span = r.period_end - r.period_start
        if r.period_start < share.settled_until or span <= 0:
            return skip(
                f"period {r.period_start}..{r.period_end} overlaps what is settled "
                f"(until {share.settled_until}) or is empty"
            )
        if status == "Closing" and r.period_end > lease.billable_until:
            return skip(f"period ends at {r.period_end}, after the lease's billing ended ({lease.billable_until})")
        if status == "Active" and r.period_end > (ends_at := lease_end(lease)):
            # a top-up may still move the end; if the lease closes instead, the report is refused then
            return Outcome(usage, Status.WAITING, f"period ends at {r.period_end}, after the lease's end ({ends_at})")
        cap = min(span, online if online is not None else span) * share.gpus
        if r.gpu_seconds > cap:
            return skip(f"{r.gpu_seconds} GPU-seconds claimed, at most {cap} observed ({share.gpus} GPUs)")
        return None

    async def _authority(self, node_key: Pubkey) -> Pubkey:
        if node_key not in self._authorities:
            node = await fetch(self.client, node_pda(node_key), "Node")
            self._authorities[node_key] = (await fetch(self.client, node.provider, "Provider")).authority
        return self._authorities[node_key]

    def _pack(
        self, ready: list[tuple[SignedUsage, list[Instruction]]]
    ) -> list[list[tuple[SignedUsage, list[Instruction]]]]:
        """Groups settlements into transactions that fit the packet size (a share's reports stay in order)."""
        groups: list[list[tuple[SignedUsage, list[Instruction]]]] = []
        for item in ready:
            if groups and self._size(groups[-1] + [item]) <= PACKET_BYTES:
                groups[-1].append(item)
            else:
                groups.append([item])
        return groups

    def _size(self, group: list[tuple[SignedUsage, list[Instruction]]]) -> int:
        """The transaction's size as sent: with its compute budget, a priority fee included (the largest form)."""
        instructions = with_budget([i for _, pair in group for i in pair], Budget(MAX_COMPUTE_UNITS, 1))
        message = Message.new_with_blockhash(instructions, self.payers.sizing_payer, Hash.default())
        return len(bytes(Transaction.new_unsigned(message)))

    async def _send(self, group: list[tuple[SignedUsage, list[Instruction]]]) -> list[Outcome]:
        instructions = [i for _, pair in group for i in pair]
        try:
            payer, cosigners = await self.payers.signing()
            sig = await send_and_confirm(self.client, payer, instructions, cosigners)
            return [Outcome(u, Status.SETTLED, signature=sig) for u, _ in group]
        except (TransactionFailed, TransactionExpired) as e:
            if len(group) == 1:
                return [Outcome(group[0][0], Status.REFUSED, str(e), getattr(e, "signature", None))]
        # One bad report refuses its whole transaction: settle the rest one by one (the program
        # takes a share's later reports without a refused one in between).
        outcomes: list[Outcome] = []
        for item in group:
            outcomes.extend(await self._send([item]))
        return outcomes
