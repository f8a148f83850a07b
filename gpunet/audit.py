"""Audit from the chain alone: recompute a lease's or a provider's totals from the events of its
transactions and compare them with its account and its vault. Every difference names the
transactions the recomputed figure came from, so an explorer can check them one by one.

A slash puts only its evidence's SHA-256 on chain; given a coordinator's API, the audit also fetches
each slash's evidence (`GET /slashes/{signature}/evidence`) and checks that it hashes to the chain's
value. Those checks are reported apart from the payments' (`evidence_ok`, not `ok`)."""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
from solana.rpc.async_api import AsyncClient
from solders.pubkey import Pubkey
from solders.signature import Signature

from gpunet.accounts import fetch, resolve_provider
from gpunet.history import ChainTransaction, node_keys, transactions_of
from gpunet.jobs import CoordinatorError
from gpunet.json_input import NotJson, parse_json
from gpunet.pda import lease_vault_pda, stake_vault_pda
from gpunet.tokens import token_balance

__all__ = ["ChainAuditReport", "Check", "EvidenceCheck", "audit_lease", "audit_provider", "evidence_hash"]


def evidence_hash(evidence: dict[str, Any]) -> bytes:
    """SHA-256 of a slash's evidence as canonical JSON (sorted keys, no spaces): what goes on chain,
    while the evidence itself is kept in the coordinator's ledger for anyone to recompute."""
    return hashlib.sha256(json.dumps(evidence, sort_keys=True, separators=(",", ":")).encode()).digest()


@dataclass(frozen=True)
class Check:
    what: str
    from_events: int
    on_chain: int
    signatures: tuple[Signature, ...] = ()
    node: Pubkey | None = None  # the node account a per-node check is of

    @property
    def ok(self) -> bool:
        return self.from_events == self.on_chain


@dataclass(frozen=True)
class EvidenceCheck:
    """One slash's evidence against the hash on chain: "matches", "differs" (the evidence served
    hashes to something else), "missing" (the coordinator serves none) or "unchecked" (no coordinator
    was given)."""

    signature: Signature
    node: Pubkey
    fault: str
    on_chain: str  # the evidence hash in the slash, hex
    status: str
    served_hash: str | None = None  # what the served evidence hashes to, hex
    evidence: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return self.status in ("matches", "unchecked")


@dataclass
class ChainAuditReport:
    """What the chain alone says of a lease or a provider (`gpunet audit`); the coordinator's
    `LedgerAuditReport` (coordinator/audit.py) checks its own ledger against the chain."""

    subject: str  # "lease <address>" or "provider <address>"
    transactions: int = 0
    checks: list[Check] = field(default_factory=list)
    evidence: list[EvidenceCheck] = field(default_factory=list)  # one per slash among the transactions
    node_keys: dict[Pubkey, Pubkey] = field(default_factory=dict)  # node account -> node key, for the nodes named
    earned: int | None = None  # a provider's: the payouts of its UsageSettled events
    earned_from: tuple[Signature, ...] = ()

    @property
    def ok(self) -> bool:
        """The payments and stake: every figure recomputed from the events equals the chain's."""
        return all(c.ok for c in self.checks)

    @property
    def evidence_ok(self) -> bool:
        """No slash's evidence is missing or hashes to anything but what is on chain."""
        return all(e.ok for e in self.evidence)

    def differences(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]


class _Sums:
    """Sums of event fields, remembering which transactions contributed."""

    def __init__(self) -> None:
        self.total: dict[str, int] = defaultdict(int)
        self.sources: dict[str, list[Signature]] = defaultdict(list)
        self.moved: set[Pubkey] = set()  # nodes a share was reassigned from or to

    def add(self, what: str, amount: int, sig: Signature) -> None:
        self.total[what] += amount
        self.sources[what].append(sig)

    def check(self, what: str, on_chain: int, node: Pubkey | None = None) -> Check:
        return Check(what, self.total[what], on_chain, tuple(self.sources[what]), node)


def _lease_sums(lease: Pubkey, txs: list[ChainTransaction]) -> _Sums:
    sums = _Sums()
    for tx in txs:
        for ev in tx.events:
            d = ev.data
            if getattr(d, "lease", None) != lease:
                continue
            if ev.name == "LeaseOpened":
                sums.add("deposited", d.deposit, tx.signature)
            elif ev.name == "LeaseToppedUp":
                sums.add("deposited", d.amount, tx.signature)
            elif ev.name == "UsageSettled":
                sums.add("paid", d.payout, tx.signature)
                sums.add("fees", d.fee, tx.signature)
                sums.add(f"gpu_seconds {d.node}", d.gpu_seconds, tx.signature)
            elif ev.name == "FeesSwept":
                sums.add("fees_swept", d.amount, tx.signature)
            elif ev.name == "LeaseReassigned":
                sums.moved.update((d.from_node, d.assignment.node))
            elif ev.name in ("LeaseClosed", "LeaseFinalized"):
                sums.add("refunded", d.refund, tx.signature)
                if ev.name == "LeaseFinalized":
                    sums.add("donations", d.donations, tx.signature)
                    sums.add("fees_swept", d.fees_to_treasury, tx.signature)
    return sums


async def _served_evidence(coordinator: str, signature: Signature) -> list[dict[str, Any]]:
    """The evidence a coordinator serves for the slashes of one transaction, every page; [] when it has none."""
    url = f"{coordinator.rstrip('/')}/slashes/{signature}/evidence"
    items: list[dict[str, Any]] = []
    offset: Any = 0
    while offset is not None:
        try:
            async with httpx.AsyncClient(timeout=30) as http:
                response = await http.get(url, params={"offset": offset})
        except httpx.HTTPError as e:
            raise CoordinatorError(f"cannot reach the coordinator at {url}: {type(e).__name__}: {e}") from None
        if response.status_code == 404:
            return []
        try:
            body = parse_json(response.content)
        except NotJson:  # nested too deep included: an answer, not a crash
            body = {"error": response.text[:200]}
        if response.status_code >= 400 or not isinstance(body, dict) or not isinstance(body.get("items"), list):
            raise CoordinatorError(f"the coordinator refused ({response.status_code}): {body.get('error', body)}")
        items += body["items"]
        following = body.get("next_offset")
        if following is not None and (type(following) is not int or following <= offset):
            raise CoordinatorError(f"the coordinator's next page of {url} goes nowhere: {following!r}")
        offset = following
    return items


async def _check_evidence(
    txs: list[ChainTransaction], mine: Callable[[Any], bool], coordinator: str | None, report: ChainAuditReport
) -> None:
    """One EvidenceCheck per ProviderSlashed event that `mine(event data)` selects."""
    for tx in txs:
        slashes = [e.data for e in tx.events if e.name == "ProviderSlashed" and mine(e.data)]
        if not slashes:
            continue
        served = await _served_evidence(coordinator, tx.signature) if coordinator else []
        for d in slashes:
            on_chain = bytes(d.evidence_hash).hex()
            fault = type(d.fault).__name__
            if coordinator is None:
                report.evidence.append(EvidenceCheck(tx.signature, d.node, fault, on_chain, "unchecked"))
                continue
            found = [s["evidence"] for s in served if s.get("node") == str(d.node) and s.get("evidence") is not None]
            if not found:
                report.evidence.append(EvidenceCheck(tx.signature, d.node, fault, on_chain, "missing"))
                continue
            served_hash = evidence_hash(found[0]).hex()
            status = "matches" if served_hash == on_chain else "differs"
            report.evidence.append(EvidenceCheck(tx.signature, d.node, fault, on_chain, status, served_hash, found[0]))


async def audit_lease(client: AsyncClient, lease: Pubkey, coordinator: str | None = None) -> ChainAuditReport:
    """With `coordinator` (its API's URL), each slash with this lease as victim has its evidence checked."""
    account = await fetch(client, lease, "Lease")
    txs = await transactions_of(client, lease)
    sums = _lease_sums(lease, txs)
    report = ChainAuditReport(f"lease {lease}", len(txs))
    for what in ("deposited", "paid", "fees", "fees_swept", "refunded", "donations"):
        report.checks.append(sums.check(what, getattr(account, what)))
    # The vault keeps the escrow left and the fees not yet swept to the treasury.
    escrow_from_events = (
        sums.total["deposited"] - sums.total["paid"] - sums.total["fees_swept"] - sums.total["refunded"]
    )
    vault = lease_vault_pda(lease)
    vault_balance = await token_balance(client, vault) if (await client.get_account_info(vault)).value else 0
    # Anyone can send tokens to the vault: it must hold at least the escrow (the surplus goes to the
    # client at finalization, counted as donations).
    report.checks.append(
        Check(
            "lease vault covers the escrow and unswept fees",
            escrow_from_events,
            min(vault_balance, escrow_from_events),
            tuple(t.signature for t in txs if t.events),
        )
    )
    for share in list(account.assignments)[: account.node_count]:
        # A share's GPU-seconds restart when it is reassigned: check the shares that never moved.
        if share.node not in sums.moved:
            report.checks.append(sums.check(f"gpu_seconds {share.node}", share.gpu_seconds, share.node))
    await _check_evidence(txs, lambda d: d.lease == lease, coordinator, report)
    named = [c.node for c in report.checks if c.node] + [e.node for e in report.evidence]
    report.node_keys = await node_keys(client, named, txs)
    return report


# What moves a stake vault's balance, by event: in (the amount each brings) and out (its `amount`).
_VAULT_IN: dict[str, Callable[[Any], int]] = {
    "Staked": lambda d: d.amount,
    "Delegated": lambda d: d.amount,
    "UsageSettled": lambda d: d.to_pool,  # the delegators' part of a payout: the pool's income
    # a credit brings the reward in; the epoch's lease income it credits came with its settlements
    "RewardClaimed": lambda d: d.to_supplier + d.to_delegators - d.income,
}
_VAULT_OUT = ("UnstakeWithdrawn", "DelegationWithdrawn", "RewardsCollected", "PoolRewardsWithdrawn", "ProviderSlashed")


async def audit_provider(client: AsyncClient, key: Pubkey, coordinator: str | None = None) -> ChainAuditReport:
    """`key` is the supplier's wallet or its provider account (the subject says which was given);
    AccountError when it is neither. With `coordinator` (its API's URL), each of its slashes has its
    evidence checked."""
    resolved = await resolve_provider(client, key)
    provider, account = resolved.account, resolved.decoded
    txs = await transactions_of(client, provider)
    sums = _Sums()
    for tx in txs:
        for ev in tx.events:
            d = ev.data
            if getattr(d, "provider", None) != provider:
                continue
            if ev.name in _VAULT_IN:
                sums.add("vault in", _VAULT_IN[ev.name](d), tx.signature)
            if ev.name in _VAULT_OUT:
                sums.add("vault out", d.amount, tx.signature)
            if ev.name == "Staked":
                sums.add("own in", d.amount, tx.signature)
            elif ev.name == "UnstakeWithdrawn":
                sums.add("own out", d.amount, tx.signature)
            elif ev.name == "ProviderSlashed":
                sums.add("slashed", d.amount, tx.signature)
                sums.add("own out", d.from_own, tx.signature)
            elif ev.name == "UsageSettled":
                sums.add("earned", d.payout, tx.signature)  # its pool's part (`to_pool`) included
    report = ChainAuditReport(resolved.describe(), len(txs))
    report.checks.append(sums.check("slashed", account.slashed))
    # No account counts what the provider earned (a settlement writes no shared account): the events
    # alone say it (`earned`), and every settlement among them was checked against its lease above.
    report.earned = sums.total["earned"]
    report.earned_from = tuple(sums.sources["earned"])
    # The stake vault holds the supplier's own stake, its delegators', its pool's uncollected
    # rewards and lease income: every unit in came with an event, and so did every unit out.
    held = sums.total["vault in"] - sums.total["vault out"]
    sources = tuple(sums.sources["vault in"] + sums.sources["vault out"])
    report.checks.append(
        Check("stake vault balance", held, await token_balance(client, stake_vault_pda(provider)), sources)
    )
    own = sums.total["own in"] - sums.total["own out"]
    own_sources = tuple(sums.sources["own in"] + sums.sources["own out"])
    report.checks.append(Check("staked + unbonding", own, account.staked + account.unbonding, own_sources))
    await _check_evidence(txs, lambda d: d.provider == provider, coordinator, report)
    report.node_keys = await node_keys(client, [e.node for e in report.evidence], txs)
    return report
