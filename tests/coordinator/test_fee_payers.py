"""The coordinator's fee payers on gpunet-localnet: its settlements and attester transactions land
with several distinct payers from its pool (the attester signs each, pays none), a payer without SOL
is topped up from the attester while the attester keeps its reserve, or else skipped with a warning
while the funded ones pay, and with none funded the attester pays."""

from __future__ import annotations

import json
import logging

from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.signature import Signature

from coordinator.attester import Attester
from coordinator.payers import FeePayers, fee_payer_keys
from coordinator.settlement import Settler, Status
from gpunet import instructions as ix
from gpunet.testbed import funded_wallet


def _events(caplog) -> list[dict]:
    """The gpunet events captured (gpunet.logs: a record's message is its event dict)."""
    return [r.msg for r in caplog.records if isinstance(r.msg, dict)]


async def _fee_payer(cluster, signature: Signature) -> Pubkey:
    """Who paid the transaction's fee: its first account key."""
    found = await cluster.client.get_transaction(signature, max_supported_transaction_version=0)
    assert found.value is not None, signature
    return found.value.transaction.transaction.message.account_keys[0]


async def test_transactions_land_with_several_payers_and_an_empty_payer_is_skipped(cluster, caplog) -> None:
    funded = [await funded_wallet(cluster.client, 1) for _ in range(3)]
    empty = Keypair()  # never funded: 0 lamports
    payers = FeePayers(cluster.client, cluster.admin, [funded[0], empty, funded[1], funded[2]])
    await cluster.wait_for_period(3)
    caplog.set_level(logging.WARNING, logger="gpunet.coordinator.payers")

    outcomes = await Settler(cluster.client, cluster.admin, payers).settle(
        [cluster.receipt(n, tick) for n in (0, 1) for tick in (1, 2, 3)]
    )
    assert [o.status for o in outcomes] == [Status.SETTLED] * 6, [o.reason for o in outcomes]
    attester = Attester(cluster.client, cluster.admin, payers=payers)
    verified = [
        await attester.record_verification(node_key.pubkey(), ix.TIER_SIMULATED, 3_600, {"node": n})
        for n, (_, node_key) in enumerate(cluster.nodes)
    ]
    assert None not in verified
    signatures = {o.signature for o in outcomes if o.signature is not None} | set(verified)

    paid_by = [await _fee_payer(cluster, sig) for sig in signatures]
    assert set(paid_by) <= {k.pubkey() for k in funded}, "only the funded payers paid: not the attester"
    assert len(set(paid_by)) >= 2, f"the fees were spread over the pool: {paid_by}"
    assert empty.pubkey() not in paid_by
    skipped = [e for e in _events(caplog) if e["event"] == "coordinator.fee_payer_skipped"]
    assert len(skipped) == 1 and skipped[0]["payer"] == str(empty.pubkey()), "said once, not at every transaction"


async def test_with_no_funded_payer_the_attester_pays(cluster, caplog) -> None:
    payers = FeePayers(cluster.client, cluster.admin, [Keypair(), Keypair()])
    await cluster.wait_for_period(1)
    caplog.set_level(logging.WARNING, logger="gpunet.coordinator.payers")
    [outcome] = await Settler(cluster.client, cluster.admin, payers).settle([cluster.receipt(0, 1)])
    assert outcome.status is Status.SETTLED and outcome.signature is not None
    assert await _fee_payer(cluster, outcome.signature) == cluster.admin.pubkey()
    [empty_pool] = [e for e in _events(caplog) if e["event"] == "coordinator.fee_payers_empty"]
    assert empty_pool["payers"] == 2 and empty_pool["attester"] == str(cluster.admin.pubkey())


async def test_an_empty_payer_is_topped_up_from_the_attester_while_it_keeps_its_reserve(cluster, caplog) -> None:
    """Top-ups on: the empty payer gets exactly the top-up from the attester and pays; the controls:
    an attester that would fall under its reserve tops nobody up (the attester pays), and with top-ups
    off the payer is skipped as before."""
    empty = Keypair()
    attester = await funded_wallet(cluster.client, 1)
    await cluster.wait_for_period(1)
    caplog.set_level(logging.INFO, logger="gpunet.coordinator.payers")
    before = (await cluster.client.get_balance(attester.pubkey())).value
    payers = FeePayers(
        cluster.client, attester, [empty], top_up_lamports=100_000_000, attester_reserve_lamports=800_000_000
    )
    payer, cosigners = await payers.signing()
    assert payer.pubkey() == empty.pubkey() and cosigners == [attester]
    assert (await cluster.client.get_balance(empty.pubkey())).value == 100_000_000
    after = (await cluster.client.get_balance(attester.pubkey())).value
    assert before - after == 100_000_000 + 5_000, "the top-up and its fee, from the attester, nothing else"
    [topped] = [e for e in _events(caplog) if e["event"] == "coordinator.fee_payer_topped_up"]
    assert topped["payer"] == str(empty.pubkey()) and topped["lamports"] == 100_000_000

    # The attester holds about 0.9 SOL now: another 0.1 SOL would leave it under a 0.85 SOL reserve.
    poor = Keypair()
    reserved = FeePayers(
        cluster.client, attester, [poor], top_up_lamports=100_000_000, attester_reserve_lamports=850_000_000
    )
    assert await reserved.signing() == (attester, [])
    off = FeePayers(cluster.client, attester, [poor])  # top-ups off
    assert await off.signing() == (attester, [])
    assert (await cluster.client.get_balance(poor.pubkey())).value == 0
    assert (await cluster.client.get_balance(attester.pubkey())).value == after


def test_the_pool_s_keys_are_files_made_once_and_kept(tmp_path) -> None:
    first = fee_payer_keys(tmp_path / "payers", 3)
    again = fee_payer_keys(tmp_path / "payers", 4)
    assert [k.pubkey() for k in again[:3]] == [k.pubkey() for k in first], "the same keys: funded ones stay"
    assert len({k.pubkey() for k in again}) == 4
    assert sorted(p.name for p in (tmp_path / "payers").iterdir()) == [f"fee-payer-{i}.json" for i in range(4)]
    assert fee_payer_keys(tmp_path / "none", 0) == [] and not (tmp_path / "none").exists()


def test_the_fee_payers_command_lists_each_address_and_whether_it_is_funded(node, tmp_path) -> None:
    from typer.testing import CliRunner

    from coordinator.cli import app

    env = {"GPUNET_FEE_PAYERS": "2", "GPUNET_FEE_PAYER_DIR": str(tmp_path), "GPUNET_RPC_URL": node.url}
    listed = CliRunner().invoke(app, ["fee-payers", "--json"], env=env)
    assert listed.exit_code == 0, listed.output
    payers = json.loads(listed.stdout)["payers"]
    assert [p["funded"] for p in payers] == [False, False] and len({p["address"] for p in payers}) == 2
    node.call("requestAirdrop", [payers[1]["address"], 10**9])  # the operator funds the second (final at once)
    again = json.loads(CliRunner().invoke(app, ["fee-payers", "--json"], env=env).stdout)["payers"]
    assert [(p["address"], p["funded"], p["lamports"]) for p in again] == [
        (payers[0]["address"], False, 0),
        (payers[1]["address"], True, 10**9),
    ]
    table = CliRunner().invoke(app, ["fee-payers"], env=env).stdout
    assert payers[1]["address"] in table and "(skipped: fund it)" in table.splitlines()[1]


async def test_a_coordinator_pays_its_settlements_and_attester_transactions_from_its_pool(
    settings, pool, tmp_path
) -> None:
    from coordinator.service import Coordinator

    attester = Keypair()
    configured = settings.model_copy(update={"fee_payers": 3, "fee_payer_dir": tmp_path})
    coordinator = Coordinator(configured, pool, attester)
    try:
        pool_keys = [k.pubkey() for k in coordinator.payers.pool]
        assert pool_keys == [k.pubkey() for k in fee_payer_keys(tmp_path, 3)], "the files' keys"
        assert coordinator.settlement.settler.payers is coordinator.payers
        assert coordinator.placement.attester.payers is coordinator.payers
        assert coordinator.payers.attester is attester
        # one window for everything it sends, on /metrics as it moves
        assert coordinator.settlement.settler.sender is coordinator.placement.attester.sender is coordinator.sender
        figure = coordinator.metrics.registry.get_sample_value
        assert figure("gpunet_coordinator_transaction_window") == configured.tx_window
        coordinator.sender.outstanding, coordinator.sender.limit = 3, 10.0
        assert figure("gpunet_coordinator_transactions_in_flight") == 3
        assert figure("gpunet_coordinator_transaction_window") == 10
    finally:
        await coordinator.chain.close()
