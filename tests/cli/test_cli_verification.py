"""Verification is on by default: `admin init` requires a tier (simulated GPUs pass on a local cluster),
`--min-verification-tier` sets it at init and changes it at update (a bad tier changes nothing), the
chain refuses a lease to an unverified node while a tier is required (the verified one, the control,
is assigned), and `node list` tells verified, unverified and failed nodes apart."""

from __future__ import annotations

import asyncio

import pytest
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed

from gpunet import instructions as ix
from gpunet.accounts import fetch_config
from gpunet.cli.admin import default_tier
from gpunet.cli.node import verification_state
from gpunet.client import send_and_confirm
from gpunet.keys import load_keypair
from gpunet.localnet import localnet_deployer


def test_the_default_tier_takes_simulated_gpus_only_on_a_local_cluster() -> None:
    assert default_tier("http://127.0.0.1:8899") == default_tier("http://localhost:8899") == ix.TIER_SIMULATED
    assert default_tier("https://api.devnet.solana.com") == default_tier("https://rpc.example:8899") == ix.TIER_GPU


def test_a_node_s_verification_state_is_verified_unverified_or_failed() -> None:
    now = 1_800_000_000
    verified = {"verification_tier": 1, "verified_until": now + 60, "jailed": False}
    assert verification_state(verified, 1, now) == "verified"
    assert verification_state({**verified, "verified_until": now}, 1, now) == "unverified"  # run out
    cleared = {"verification_tier": 0, "verified_until": 0, "jailed": True}  # a FailedVerification slash
    assert verification_state(cleared, 1, now) == "failed"
    assert verification_state({**cleared, "jailed": False}, 1, now) == "unverified"
    # where nothing is required an unverified node may hold leases, so be jailed for something else
    assert verification_state(cleared, 0, now) == "unverified"
    # a slash for silence keeps the tier: no failed verification
    assert verification_state({**verified, "jailed": True}, 1, now) == "verified"


def test_admin_init_requires_verification_and_the_option_sets_and_changes_the_tier(gpunet) -> None:
    gpunet.wallet("admin", keypair=localnet_deployer())
    before = gpunet.signatures_of("admin")
    bad = gpunet("admin", "init", "--min-verification-tier", "4", wallet="admin", expect=2)
    assert "--min-verification-tier must be 0..3, got 4" in bad.stderr
    assert gpunet.signatures_of("admin") == before, "nothing sent (not even the mint)"
    done = gpunet.json("admin", "init", "--min-verification-tier", "2", wallet="admin")
    assert done["min_verification_tier"] == 2 and gpunet.json("admin", "show")["min_verification_tier"] == 2
    gpunet("admin", "update", "--min-verification-tier", "0", wallet="admin")
    assert gpunet.json("admin", "show")["min_verification_tier"] == 0
    refused = gpunet("admin", "update", "--min-verification-tier", "-1", wallet="admin", expect=2)
    assert "--min-verification-tier must be 0..3, got -1" in refused.stderr
    assert gpunet.json("admin", "show")["min_verification_tier"] == 0  # unchanged
    gpunet("admin", "update", "--min-verification-tier", "1", wallet="admin")
    assert gpunet.json("admin", "show")["min_verification_tier"] == ix.TIER_SIMULATED


def test_an_unverified_node_gets_no_lease_and_node_list_says_which_nodes_are_verified(market, monkeypatch) -> None:
    g = market
    monkeypatch.setenv("COLUMNS", "250")  # the table's rows on one line each
    # A second node, registered as the quick-start does (its worker's inventory hash), not verified yet.
    g.wallet("node2", sol="")
    hash2 = g.inventory_hash("node2", "H100:2:80")
    g("node", "register", str(g.key("node2")), "--gpu", "H100", "--count", "2", "--region", "us-east",
      "--price", "2", "--inventory-hash", hash2, wallet="supplier")  # fmt: skip
    states = {n["node_key"]: n["verification"] for n in g.json("node", "list")}
    assert states == {g.pubkey("node1"): "verified", g.pubkey("node2"): "unverified"}
    table = " ".join(g("node", "list").stdout.split())
    assert "unverified" in table and "simulated until" in table

    lease = g.json("lease", "open", "--gpu", "H100", "--count", "2", "--max-price", "3", "--duration", "1h",
                   "--lease-id", "7", wallet="client")["lease"]  # fmt: skip
    with pytest.raises(Exception, match="NodeNotVerified"):
        g.assign(lease, 2, 2_000_000, node="node2")
    g.assign(lease, 2, 2_000_000, node="node1")  # the control: the verified node is assigned
    assert g.json("lease", "show", lease)["status"] == "Active"

    # node2 fails its verification: slashed with FailedVerification, jailed, its tier cleared.
    asyncio.run(_slash(g, "node2", "FailedVerification"))
    states = {n["node_key"]: n["verification"] for n in g.json("node", "list")}
    assert states == {g.pubkey("node1"): "verified", g.pubkey("node2"): "failed"}
    assert "failed (jailed)" in " ".join(g("node", "list").stdout.split())


async def _slash(g, node: str, fault: str) -> None:
    admin, supplier, node_key = (load_keypair(g.key(n)) for n in ("admin", "supplier", node))
    async with AsyncClient(g.node.url, commitment=Confirmed) as client:
        config = await fetch_config(client)
        slash = ix.slash_provider(
            admin.pubkey(), config.treasury, node_key.pubkey(), supplier.pubkey(), fault, bytes([7]) * 32
        )
        await send_and_confirm(client, admin, [slash])
