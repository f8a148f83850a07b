"""The coordinator's attester transactions on gpunet-localnet: assign, reassign and slash, each
retried after a lost reply without ever applying twice."""

from __future__ import annotations

import asyncio
import json
import logging

import httpx
import pytest
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solders.signature import Signature

from coordinator.attester import Attester, evidence_hash
from gpunet.accounts import fetch
from gpunet.client import InFlight, TransactionFailed
from gpunet.events import events_of_transaction
from gpunet.pda import node_pda

from .chain import Cluster


@pytest.fixture
async def three_nodes(node):
    async with AsyncClient(node.url, commitment=Confirmed) as client:
        yield await Cluster().build(client, nodes=3, assign=False)


def _lose_first_reply(monkeypatch) -> list[int]:
    """The first send lands on chain but its reply is lost (as when the RPC connection drops)."""
    real, calls = InFlight.send, []

    async def flaky(self, *args, **kwargs):
        calls.append(1)
        sig = await real(self, *args, **kwargs)
        if len(calls) == 1:
            raise httpx.ReadTimeout("reply lost")
        return sig

    monkeypatch.setattr(InFlight, "send", flaky)
    return calls


async def test_assign_retried_after_a_lost_reply_lands_once(three_nodes, monkeypatch) -> None:
    c = three_nodes
    calls = _lose_first_reply(monkeypatch)
    assert await Attester(c.client, c.admin, backoff_s=0.01).assign(c.lease, [c.share(0), c.share(1)]) is None
    assert len(calls) == 1  # the chain showed it landed: nothing resent
    lease = await fetch(c.client, c.lease, "Lease")
    assert type(lease.status).__name__ == "Active"
    assert [a.node_key for a in list(lease.assignments)[: lease.node_count]] == [
        c.share(0).node_key,
        c.share(1).node_key,
    ]
    for n in (0, 1):
        assert (await fetch(c.client, node_pda(c.share(n).node_key), "Node")).gpus_leased == 2


async def test_slash_with_evidence_then_reassign(three_nodes) -> None:
    c = three_nodes
    attester = Attester(c.client, c.admin)
    await attester.assign(c.lease, [c.share(0), c.share(1)])
    assigned = await c.now()
    while await c.now() < assigned + 2:  # the client's part is capped by the share's worth over its time held
        await asyncio.sleep(0.2)
    # The failover order: slash while the lost node still holds its share (the client's part of
    # the slash is paid to this lease's client), then move the share.
    evidence = {"node": str(c.share(0).node_key), "lease": str(c.lease), "last_heartbeat": 100, "lost_at": 111}
    slashed = await attester.slash(c.share(0).node_key, "MissedHeartbeats", evidence, lease=c.lease)
    tx = await c.client.get_transaction(slashed, commitment=Confirmed, max_supported_transaction_version=0)
    [event] = [e for e in events_of_transaction(json.loads(tx.value.to_json())) if e.name == "ProviderSlashed"]
    assert bytes(event.data.evidence_hash) == evidence_hash(evidence) and event.data.to_client > 0
    assert (await fetch(c.client, node_pda(c.share(0).node_key), "Node")).jailed
    # Another fault of the jailed node (its verification, say) sends nothing: one slash per jailing.
    provider = (await fetch(c.client, node_pda(c.share(0).node_key), "Node")).provider
    slashed_once = (await fetch(c.client, provider, "Provider")).slashed
    assert slashed_once > 0
    assert await attester.slash(c.share(0).node_key, "FailedVerification", evidence) is None
    assert (await fetch(c.client, provider, "Provider")).slashed == slashed_once

    sig = await attester.reassign(c.lease, c.share(0).node_key, c.share(2))
    lease = await fetch(c.client, c.lease, "Lease")
    assert {a.node_key for a in list(lease.assignments)[: lease.node_count]} == {
        c.share(1).node_key,
        c.share(2).node_key,
    }
    assert sig is not None

    # A jailed node cannot be given a share again: the program's refusal is not retried.
    with pytest.raises(TransactionFailed):
        await attester.reassign(c.lease, c.share(1).node_key, c.share(0))


async def test_a_slash_logs_one_warning_naming_it_also_when_its_reply_was_lost(three_nodes, monkeypatch, caplog):
    # A slash moves a supplier's stake: the operator's log names it in one line (lease, node,
    # provider, fault, the exact amount, its transaction), also when the attester never saw the
    # reply and found the landed slash on chain. The controls: an assignment and a slash skipped
    # (the node is jailed already) log none.
    caplog.set_level(logging.INFO)
    c = three_nodes
    attester = Attester(c.client, c.admin, backoff_s=0.01)

    def slash_lines() -> list[logging.LogRecord]:
        return [r for r in caplog.records if isinstance(r.msg, dict) and r.msg["event"] == "slash.landed"]

    await attester.assign(c.lease, [c.share(0), c.share(1)])
    assert slash_lines() == []
    for n, lose_reply in ((0, False), (1, True)):
        node_key = c.share(n).node_key
        provider = (await fetch(c.client, node_pda(node_key), "Node")).provider
        before = (await fetch(c.client, provider, "Provider")).slashed
        if lose_reply:
            calls = _lose_first_reply(monkeypatch)
        evidence = {"node": str(node_key), "lease": str(c.lease), "lost_at": 111 + n}
        sig = await attester.slash(node_key, "MissedHeartbeats", evidence, lease=c.lease)
        assert (sig is None) == lose_reply and (not lose_reply or calls == [1])
        amount = (await fetch(c.client, provider, "Provider")).slashed - before
        assert amount > 0
        [line] = slash_lines()[n:]
        assert line.levelno == logging.WARNING
        fields = {k: line.msg[k] for k in ("lease", "node", "provider", "wallet", "fault")}
        assert {k: str(v) for k, v in fields.items()} == {
            "lease": str(c.lease),
            "node": str(node_key),
            "provider": str(provider),
            "wallet": str(c.nodes[n][0].pubkey()),
            "fault": "MissedHeartbeats",
        }
        assert line.msg["amount"] == amount == line.msg["to_treasury"] + line.msg["to_client"]
        assert line.msg["evidence_hash"] == evidence_hash(evidence).hex()
        landed = sig or Signature.from_string(line.msg["tx"])  # found on chain: the first reply was lost
        tx = await c.client.get_transaction(landed, commitment=Confirmed, max_supported_transaction_version=0)
        [event] = [e for e in events_of_transaction(json.loads(tx.value.to_json())) if e.name == "ProviderSlashed"]
        assert line.msg["tx"] == str(landed) and event.data.amount == amount
    assert await attester.slash(c.share(0).node_key, "FailedVerification", {"again": 1}) is None
    assert len(slash_lines()) == 2
