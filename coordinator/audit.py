"""Proving the ledger against the chain, for one lease or one provider.

Three checks, each difference naming the transactions involved:
1. every indexed event of the subject is the event the chain's transaction carries;
2. the derived rows equal what the indexed events fold to (projection.Ledger);
3. the folded totals equal the on-chain account, and the vault holds what the account says
   it must (lease: deposited - paid - fees - refunded; provider: staked + unbonding).
A transaction of the subject the chain has but the ledger lacks is reported too.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from functools import cache
from typing import Any

import asyncpg
from anchorpy import Coder
from solders.pubkey import Pubkey

from coordinator.db import chain as ledger
from coordinator.db.chain import plain_row
from coordinator.db.connection import Connection
from coordinator.indexer.decode import decode_transaction, plain
from coordinator.indexer.projection import IndexedEvent, Ledger
from coordinator.indexer.rpc import ChainRpc
from gpunet.accounts import discriminator
from gpunet.idl import load_idl
from gpunet.pda import lease_vault_pda, pool_pda, provider_pda, stake_vault_pda

__all__ = ["Difference", "LedgerAuditReport", "NotFound", "audit_lease", "audit_provider", "resolve_provider"]


class NotFound(Exception):
    """Nothing to audit: neither the ledger nor the chain knows the subject (never a failed audit)."""


@dataclass
class Difference:
    check: str  # "event", "row", "account", "vault" or "unindexed"
    what: str
    indexed: Any
    chain: Any
    signatures: list[str]


@dataclass
class LedgerAuditReport:
    """The coordinator's ledger checked against the chain (`/audit/...`); the SDK's chain-only
    audit is `gpunet.audit.ChainAuditReport`."""

    subject: str
    kind: str
    events: int
    differences: list[Difference] = field(default_factory=list)
    given: str | None = None  # a provider named by "wallet" or by "provider account"

    @property
    def ok(self) -> bool:
        return not self.differences

    def to_json(self) -> dict[str, Any]:
        return {
            "subject": self.subject,
            "kind": self.kind,
            "ok": self.ok,
            **({"given": self.given} if self.given else {}),
            "events": self.events,
            "differences": [asdict(d) for d in self.differences],
        }


# Which events move each audited field, to name the transactions behind a difference.
_FIELD_EVENTS = {
    "deposited": ("LeaseOpened", "LeaseToppedUp"),
    "paid": ("UsageSettled",),
    "fees": ("UsageSettled",),
    "fees_swept": ("FeesSwept", "LeaseFinalized"),
    "refunded": ("LeaseClosed", "LeaseFinalized"),
    "donations": ("LeaseFinalized",),
    "status": ("LeaseOpened", "LeaseAssigned", "LeaseClosed", "LeaseFinalized"),
    "started_at": ("LeaseAssigned",),
    "staked": ("Staked", "UnstakeRequested", "ProviderSlashed"),
    "unbonding": ("UnstakeRequested", "UnstakeWithdrawn", "ProviderSlashed"),
    "slashed": ("ProviderSlashed",),
    "earned": ("UsageSettled",),
    "bonded": ("NodeRegistered", "NodeReleased"),
    "node_count": ("NodeRegistered", "NodeReleased"),
    "authority": ("ProviderRegistered",),
}


def _signatures(events: list[IndexedEvent], names: tuple[str, ...] | None = None) -> list[str]:
    return list(dict.fromkeys(e.signature for e in events if names is None or e.name in names))


async def _indexed_events(conn: Connection, key: str, subject: str) -> list[IndexedEvent]:
    rows = await ledger.indexed_events(conn, key, subject)
    return [
        IndexedEvent(r["signature"], r["event_index"], r["slot"], r["block_time"], r["name"], json.loads(r["data"]))
        for r in rows
    ]


async def _check_events(rpc: ChainRpc, program: Pubkey, events: list[IndexedEvent], report: LedgerAuditReport) -> None:
    signatures = _signatures(events)
    chain = {}
    for i in range(0, len(signatures), 200):
        batch = signatures[i : i + 200]
        for signature, tx in zip(batch, await rpc.transactions(batch), strict=True):
            chain[signature] = decode_transaction(signature, tx, program).events if tx else None
    for e in events:
        found = chain.get(e.signature)
        if found is None:
            report.differences.append(Difference("event", f"{e.name} #{e.event_index}", e.data, None, [e.signature]))
        elif e.event_index >= len(found) or found[e.event_index] != (e.name, e.data):
            on_chain = found[e.event_index] if e.event_index < len(found) else None
            report.differences.append(
                Difference(
                    "event",
                    f"{e.name} #{e.event_index}",
                    {e.name: e.data},
                    dict([on_chain]) if on_chain else None,
                    [e.signature],
                )
            )


async def _check_unindexed(
    conn: Connection, rpc: ChainRpc, program: Pubkey, address: str, key: str, report: LedgerAuditReport
) -> None:
    listed = [s["signature"] for s in await rpc.signatures_since(address, None) if s.get("err") is None]
    known = await ledger.known_signatures(conn, listed)
    missing = [s for s in listed if s not in known]
    for signature, tx in zip(missing, await rpc.transactions(missing) if missing else [], strict=True):
        events = decode_transaction(signature, tx, program).events if tx else []
        for name, data in events:
            if data.get(key) == address:
                report.differences.append(Difference("unindexed", name, None, data, [signature]))


def _compare_rows(
    report: LedgerAuditReport,
    what: str,
    indexed: dict[str, Any] | None,
    folded: dict[str, Any] | None,
    signatures: list[str],
) -> None:
    if indexed is None or folded is None:
        if indexed != folded:
            report.differences.append(Difference("row", what, indexed, folded, signatures))
        return
    for column, value in folded.items():
        if column != "signature" and indexed.get(column) != value:
            report.differences.append(Difference("row", f"{what}.{column}", indexed.get(column), value, signatures))


def _compare_appended(
    report: LedgerAuditReport, table: str, indexed: list[asyncpg.Record], folded: list[dict[str, Any]]
) -> None:
    by_key = {(r["signature"], r["event_index"]): plain_row(r) for r in indexed}
    for row in folded:
        key = (row["signature"], row["event_index"])
        _compare_rows(report, f"{table}[{key[0][:8]}…#{key[1]}]", by_key.pop(key, None), row, [key[0]])
    for key, row in by_key.items():
        report.differences.append(Difference("row", f"{table}[{key[0][:8]}…#{key[1]}]", row, None, [key[0]]))


def _compare_account(
    report: LedgerAuditReport, what: str, folded: dict[str, Any], account: dict[str, Any], events: list[IndexedEvent]
) -> None:
    for column, chain_value in account.items():
        if folded.get(column) != chain_value:
            names = _FIELD_EVENTS.get(column)
            report.differences.append(
                Difference("account", f"{what}.{column}", folded.get(column), chain_value, _signatures(events, names))
            )


@cache
def _coder() -> Coder:
    return Coder(load_idl())


async def _account(
    rpc: ChainRpc, program: Pubkey, address: str, kind: str, report: LedgerAuditReport, events: list[IndexedEvent]
) -> dict[str, Any] | None:
    """The on-chain account decoded; None (with a difference when it should be one) otherwise."""
    found = await rpc.account(address)
    decoded = None
    if found is not None and found[0] == str(program):
        try:
            decoded = _coder().accounts.decode(found[1])
        except Exception:  # another account type's discriminator, or truncated data
            decoded = None
    if decoded is None or type(decoded).__name__ != kind:
        if found is not None or events:
            report.differences.append(
                Difference(
                    "account",
                    kind.lower(),
                    f"a gpunet {kind} account",
                    "not one" if found else None,
                    _signatures(events),
                )
            )
        return None
    return plain(decoded)


async def resolve_provider(conn: Connection, rpc: ChainRpc, program: Pubkey, key: str) -> tuple[str, str]:
    """(the provider account, "provider account" or "wallet"): `key` is a provider account when the
    chain holds a gpunet Provider there or the ledger indexed one, else a wallet whose provider (its
    PDA) the chain or the ledger knows. NotFound when it is neither."""

    async def is_provider(address: str) -> bool:
        found = await rpc.account(address)
        if found is not None and found[0] == str(program) and found[1][:8] == discriminator("Provider"):
            return True
        return await ledger.row(conn, "providers", "provider", address) is not None

    if await is_provider(key):
        return key, "provider account"
    pda = str(provider_pda(Pubkey.from_string(key), program))
    if await is_provider(pda):
        return pda, "wallet"
    raise NotFound(
        f"{key} is neither a provider account nor the wallet of a registered provider "
        f"(no Provider at it or at its provider address {pda}, on chain or in the ledger)"
    )


async def audit_lease(conn: Connection, rpc: ChainRpc, program: Pubkey, lease: str) -> LedgerAuditReport:
    """NotFound when neither the ledger nor the chain knows the lease."""
    events = await _indexed_events(conn, "lease", lease)
    if not events and await rpc.account(lease) is None and await ledger.row(conn, "leases", "lease", lease) is None:
        raise NotFound(f"no lease {lease}: neither the ledger nor the chain has it")
    report = LedgerAuditReport(lease, "lease", len(events))
    await _check_events(rpc, program, events, report)
    await _check_unindexed(conn, rpc, program, lease, "lease", report)

    folded = Ledger()
    for e in events:
        folded.apply(e)
    row = await ledger.row(conn, "leases", "lease", lease)
    _compare_rows(report, "lease", plain_row(row) if row else None, folded.leases.get(lease), _signatures(events))
    for r in await ledger.rows(conn, "assignments", "lease", lease):
        key = (lease, r["node"])
        _compare_rows(
            report,
            f"assignment[{r['node']}]",
            plain_row(r),
            folded.assignments.get(key),
            _signatures([e for e in events if r["node"] in json.dumps(e.data)]),
        )
    _compare_appended(report, "settlements", await ledger.rows(conn, "settlements", "lease", lease), folded.settlements)

    account = await _account(rpc, program, lease, "Lease", report, events)
    mine = folded.leases.get(lease)
    if account is None:
        return report
    if mine is None:
        report.differences.append(Difference("account", "lease", None, account, []))
        return report
    _compare_account(
        report,
        "lease",
        mine,
        {
            "deposited": account["deposited"],
            "paid": account["paid"],
            "fees": account["fees"],
            "fees_swept": account["fees_swept"],
            "refunded": account["refunded"],
            "status": account["status"].lower(),
            "started_at": account["started_at"],
            "donations": account["donations"],
            "downtime_tolerance_seconds": account["downtime_tolerance_seconds"],
            "nodes": [a["node"] for a in account["assignments"][: account["node_count"]]],
        },
        events,
    )
    for a in account["assignments"][: account["node_count"]]:
        share = folded.assignments.get((lease, a["node"])) or {}
        _compare_account(
            report,
            f"assignment[{a['node']}]",
            share,
            {k: a[k] for k in ("gpus", "epoch", "assigned_at", "settled_until", "receipt_gpu_seconds", "gpu_seconds")},
            [e for e in events if e.name in ("LeaseAssigned", "LeaseReassigned", "UsageSettled")],
        )
    # The chain's own conservation: the vault holds the unspent escrow and the fees not yet swept to
    # the treasury (closed: gone), plus whatever was sent to it from outside, which the escrow never
    # counts (it goes to the client at finalization).
    expected = account["deposited"] - account["paid"] - account["refunded"] - account["fees_swept"]
    balance = await rpc.token_balance(str(lease_vault_pda(Pubkey.from_string(lease), program)))
    if (balance or 0) < expected:
        report.differences.append(
            Difference(
                "vault",
                "lease vault balance (at least the escrow and unswept fees)",
                expected,
                balance,
                _signatures(events),
            )
        )
    return report


async def audit_provider(conn: Connection, rpc: ChainRpc, program: Pubkey, key: str) -> LedgerAuditReport:
    """`key` is the supplier's wallet or its provider account (the report's `given` says which);
    NotFound when it is neither."""
    provider, given = await resolve_provider(conn, rpc, program, key)
    events = await _indexed_events(conn, "provider", provider)
    report = LedgerAuditReport(provider, "provider", len(events), given=given)
    await _check_events(rpc, program, events, report)
    await _check_unindexed(conn, rpc, program, provider, "provider", report)

    folded = Ledger()
    for e in events:
        folded.apply(e)
    row = await ledger.row(conn, "providers", "provider", provider)
    _compare_rows(
        report, "provider", plain_row(row) if row else None, folded.providers.get(provider), _signatures(events)
    )
    for table in ("stake_changes", "settlements", "slashes"):
        _compare_appended(
            report,
            table,
            await ledger.rows(conn, table, "provider", provider),
            getattr(folded, table),
        )

    account = await _account(rpc, program, provider, "Provider", report, events)
    mine = folded.providers.get(provider)
    if account is None:
        return report
    if mine is None:
        report.differences.append(Difference("account", "provider", None, account, []))
        return report
    _compare_account(
        report,
        "provider",
        mine,
        {
            k: account[k]
            for k in (
                "authority",
                "staked",
                "bonded",
                "unbonding",
                "unbonding_ends_at",
                "slashed",
                "node_count",
            )
        },
        events,
    )
    # The vault holds the supplier's own stake, its delegators' (active and unbonding), the pool's
    # uncollected rewards and its lease income not yet credited: by the accounts' books, never by
    # what was sent to it.
    expected = account["staked"] + account["unbonding"] + account["delegated"] + account["delegated_unbonding"]
    if account["has_pool"]:
        pool = await _account(rpc, program, str(pool_pda(Pubkey.from_string(provider), program)), "Pool", report, [])
        expected += pool["provider_rewards"] + pool["delegator_rewards"] + pool["income_pending"] if pool else 0
    balance = await rpc.token_balance(str(stake_vault_pda(Pubkey.from_string(provider), program)))
    if balance != expected:
        report.differences.append(Difference("vault", "stake vault balance", expected, balance, _signatures(events)))
    return report
