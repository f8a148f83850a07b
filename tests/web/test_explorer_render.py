"""The explorer's audit verdict and pager as rendered (no chain): a report whose recomputed figure differs from
the chain's shows the difference and never "checked"; an audit that could not run shows no verdict;
the honest report is the control."""

from __future__ import annotations

import html
import json

import httpx
from solders.pubkey import Pubkey
from solders.signature import Signature
from starlette.applications import Starlette

from coordinator.settings import Settings
from coordinator.web import templates
from coordinator.web.explorer import explorer_routes
from coordinator.web.explorer.common import audited
from coordinator.web.explorer.rule import FeeHistory
from coordinator.web.explorer.timeline import timeline
from coordinator.web.feed.tx import AMOUNT_FIELDS
from gpunet.amounts import IO
from gpunet.audit import ChainAuditReport, Check, EvidenceCheck
from gpunet.errors import GpunetError
from gpunet.idl import idl_json


def _verdict(report: ChainAuditReport | None, error: str | None) -> str:
    return str(templates.env.get_template("explorer_macros.html").module.audit(report, error, "--lease L"))  # type: ignore[attr-defined]


def _report(paid_on_chain: int, evidence: str = "matches") -> ChainAuditReport:
    sig = Signature.default()
    return ChainAuditReport(
        "lease L",
        3,
        [Check("deposited", 9_000_000, 9_000_000, (sig,)), Check("paid", 5_035_000, paid_on_chain, (sig,))],
        [EvidenceCheck(sig, Pubkey.default(), "MissedHeartbeats", "ab" * 32, evidence)],
    )


def test_a_differing_figure_is_shown_as_a_difference() -> None:
    honest = _verdict(_report(5_035_000), None)
    assert 'data-audit-ok="true"' in honest and "Every figure checked" in honest and "differs" not in honest
    tampered = _verdict(_report(5_035_001), None)
    assert 'data-audit-ok="false"' in tampered and "1 difference(s)" in tampered
    assert 'data-check="paid" data-from-events="5035000" data-on-chain="5035001"' in tampered
    assert "✗ differs" in tampered and "Every figure checked" not in tampered
    unproven = _verdict(_report(5_035_000, evidence="differs"), None)
    assert 'data-evidence-ok="false"' in unproven and "✗ differs" in unproven


async def test_an_audit_that_cannot_run_gives_no_verdict() -> None:
    async def unreachable() -> ChainAuditReport:
        raise GpunetError("no Lease account at L")

    report, error = await audited(unreachable())
    assert report is None and error == "GpunetError: no Lease account at L"
    shown = _verdict(report, error)
    assert 'data-audit-ok="unknown"' in shown and "No verdict" in shown and "checked" not in shown


def test_a_long_timeline_pages() -> None:
    macros = templates.env.get_template("explorer_macros.html").module
    assert str(macros.pager("/web/leases/L", 0, 200, 200, "events")).strip() == ""  # type: ignore[attr-defined]
    first = str(macros.pager("/web/leases/L", 0, 200, 450, "events"))  # type: ignore[attr-defined]
    assert "1 to 200 of 450 events" in first and 'href="/web/leases/L?offset=200#timeline"' in first
    assert 'rel="prev"' not in first
    last = str(macros.pager("/web/leases/L", 400, 200, 450, "events"))  # type: ignore[attr-defined]
    assert "401 to 450 of 450 events" in last and 'href="/web/leases/L?offset=200#timeline"' in last
    assert 'rel="next"' not in last


def test_unchecked_evidence_is_not_shown_as_matching() -> None:
    shown = _verdict(_report(5_035_000, evidence="unchecked"), None)
    assert 'data-evidence-ok="false"' in shown and "1 of 1 missing, different or unchecked" in shown
    assert "hashes to the value on chain" not in shown


def test_every_explorer_template_compiles() -> None:
    for name in ("lease.html", "provider.html", "node.html", "audit.html", "explorer_error.html", "rewards.html",
                 "reward_epoch.html"):  # fmt: skip
        templates.env.get_template(name)


def _lease_page(settled: dict[str, int]) -> str:
    """lease.html for a lease assigned to node N at 360 IO/GPU-hour with one settlement of it."""
    share = {"node": "N" * 32, "node_key": "K" * 32, "gpus": 1, "price_per_gpu_hour": 360 * IO, "epoch": 1}
    events = [
        {"id": 2, "signature": "S1", "block_time": 1, "name": "LeaseAssigned", "data": {"assignments": [share]}},
        {"id": 3, "signature": "S2", "block_time": 2, "name": "UsageSettled", "data": {**share, **settled}},
    ]
    rows = timeline(events, FeeHistory([(1, 500)]), {})
    lease = dict.fromkeys(("deposited", "paid", "fees", "fees_swept", "refunded", "donations", "started_at"), 0)
    lease |= {"lease": "L" * 32, "client": "C" * 32, "status": "active", "gpu_count": 1, "min_vram_gb": 80}
    lease |= {"duration_seconds": 60, "max_price_per_gpu_hour": 540 * IO}
    checked = [r.check.status for r in rows if r.check]
    return templates.env.get_template("lease.html").render(
        lease=lease, model="H100", region="any", shares=[], simulated=set(), rows=rows, offset=0, total=2,
        page_size=200, checks={s: checked.count(s) for s in ("checked", "mismatch", "unknown")}, escrow=None,
        escrow_error="not read", program="P", bundle_sha256="H",
    )  # fmt: skip


def test_a_tampered_settlement_row_is_shown_as_a_mismatch() -> None:
    honest = {"gpu_seconds": 12, "amount": 1_200_000, "fee": 60_000, "payout": 1_140_000, "escrow_left": 5 * IO}
    honest |= {"to_pool": 0, "income_epoch": 0}
    shown = _lease_page(honest)
    assert 'data-check="checked"' in shown and "✓ checked" in shown and "mismatch" not in shown
    assert "12 GPU-s" in shown and 'data-units="1200000"' in shown
    shown = _lease_page({**honest, "fee": 50_000, "payout": 1_150_000})  # a 4.2 % fee, not the 5 % in force
    assert 'data-check="mismatch"' in shown and "1 mismatch" in shown
    assert "✗ mismatch: fee 50000 (the rule: 60000); payout 1150000 (the rule: 1140000)" in shown


def test_a_pooled_supplier_s_settlement_shows_its_delegators_part() -> None:
    settled = {"gpu_seconds": 12, "amount": 1_200_000, "fee": 60_000, "payout": 1_140_000, "escrow_left": 5 * IO}
    shown = html.unescape(_lease_page({**settled, "to_pool": 380_000, "income_epoch": 7}))
    assert 'data-to-pool="380000"' in shown and "✓ checked" in shown
    assert "to the provider's delegators: their pool's income of staking epoch 7" in shown
    alone = html.unescape(_lease_page({**settled, "to_pool": 0, "income_epoch": 7}))  # the control: no pool
    assert 'data-to-pool="0"' in alone and "delegators" not in alone


def test_every_io_amount_of_the_events_is_shown_in_io() -> None:
    """The transaction page formats AMOUNT_FIELDS as IO: every integer field of the IDL's events is
    either one or named here as a count, a time, an epoch or an id (co-staking's amounts were once
    shown as bare integers)."""
    not_io = {
        "billable_until", "claimable_at", "deregistered_at", "eligible_shares", "epoch", "exit_epoch",
        "extra_seconds", "fault_at", "from_epoch", "genesis", "gpu_seconds", "income_epoch", "jail_ends_at",
        "lease_id", "receipt_gpu_seconds", "settle_deadline", "shares", "since_epoch", "started_at", "through",
        "through_epoch", "unbonding_ends_at", "valid_until", "withdrawable_at",
    }  # fmt: skip
    idl = json.loads(idl_json())
    types = {t["name"]: t for t in idl["types"]}
    integers = {
        f["name"]
        for e in idl["events"]
        for f in types[e["name"]]["type"]["fields"]
        if f["type"] in ("u64", "i64", "u128", "i128")
    }
    assert integers - not_io == set(AMOUNT_FIELDS) & integers


async def test_a_bad_address_or_offset_is_a_clear_400_page() -> None:
    # No database nor chain behind it: a malformed request is answered before either is asked.
    app = Starlette(routes=explorer_routes(None, None, Settings()))  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://web") as http:
        for path, said in (
            ("/web/leases/not-a-key", "'not-a-key' is not a lease address"),
            ("/web/leases/not-a-key/audit", "'not-a-key' is not a lease address"),
            (f"/web/leases/{Pubkey.default()}?offset=-1", "offset '-1' is not a whole number"),
            ("/web/providers/0OIl", "'0OIl' is not a provider address"),
            ("/web/providers/0OIl/audit", "'0OIl' is not a provider address"),
            ("/web/nodes/xxx", "'xxx' is not a node address"),
        ):
            answer = await http.get(path)
            assert answer.status_code == 400 and said in html.unescape(answer.text), (path, answer.status_code)
