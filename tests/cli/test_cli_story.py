"""Every `gpunet` chain command round-trips on gpunet-localnet with the real program: a supplier's
and a client's first minutes, a settlement (made by the attester through the SDK, as the
coordinator will), what explorers read, and the close, audit and unstake that follow."""

from __future__ import annotations

import asyncio
import time

from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solders.pubkey import Pubkey

from gpunet import instructions as ix
from gpunet.accounts import fetch, fetch_config
from gpunet.amounts import IO
from gpunet.client import send_and_confirm
from gpunet.keys import load_keypair
from gpunet.tokens import io_account
from gpunet.usage import Receipt


async def _assign_and_settle(g, lease: Pubkey) -> None:
    """The coordinator's part, through the SDK: assign 2 GPUs of node1, then settle 2 s of usage."""
    admin, supplier, node_key = (load_keypair(g.key(n)) for n in ("admin", "supplier", "node1"))
    async with AsyncClient(g.node.url, commitment=Confirmed) as client:
        config = await fetch_config(client)
        await send_and_confirm(
            client,
            admin,
            [ix.assign_lease(admin.pubkey(), lease, [ix.Share(node_key.pubkey(), supplier.pubkey(), 2, 2_500_000)])],
        )  # its price after `node update`
        started = (await fetch(client, lease, "Lease")).started_at
        while (await client.get_block_time((await client.get_slot()).value)).value < started + 2:
            await asyncio.sleep(0.2)
        receipt = Receipt(1, 4, started + 2)  # 2 GPUs x 2 s since the assignment
        await send_and_confirm(
            client,
            admin,
            ix.signed_settlement(
                admin.pubkey(),
                lease,
                node_key,
                supplier.pubkey(),
                io_account(supplier.pubkey(), config.io_mint),
                receipt,
                4,
            ),
        )


def test_a_supplier_and_a_client_from_registration_to_audit(market) -> None:
    g = market
    config = g.json("admin", "show")
    assert config["attesters"] == [g.pubkey("admin")] and config["min_stake_per_gpu"] == 100 * IO
    assert config["min_verification_tier"] == ix.TIER_SIMULATED  # `admin init` on a local cluster

    provider = g.json("provider", "show", wallet="supplier")
    assert (provider["staked"], provider["bonded"], provider["free"], provider["nodes"]) == (
        600 * IO,
        400 * IO,
        200 * IO,
        1,
    )
    [node] = g.json("node", "list", "--provider", g.pubkey("supplier"))
    assert (node["node_key"], node["gpu_model"], node["gpu_count"], node["vram_gb"], node["region"]) == (
        g.pubkey("node1"),
        "H100",
        4,
        80,
        "us-east",
    )
    assert node["inventory_hash"] == g.inventory_hash("node1", "H100:4:80") and node["verification"] == "verified"
    g("node", "update", g.pubkey("node1"), "--price", "2.5", "--inventory-hash", "ab" * 32, wallet="supplier")
    [node] = g.json("node", "list")
    assert node["price_per_gpu_hour"] == 2_500_000 and node["inventory_hash"] == "ab" * 32
    assert node["verification"] == "unverified"  # another inventory: verified again before any lease
    g.verify("node1")

    opened = g.json(
        "lease",
        "open",
        "--gpu",
        "H100",
        "--count",
        "2",
        "--max-price",
        "3",
        "--duration",
        "1h",
        "--lease-id",
        "1",
        "--downtime-tolerance",
        "45s",
        wallet="client",
    )
    assert opened["deposit"] == 6 * IO  # 3 IO x 2 GPUs x 1 h
    lease = opened["lease"]
    g("lease", "top-up", lease, "--duration", "30m", wallet="client")

    asyncio.run(_assign_and_settle(g, Pubkey.from_string(lease)))
    shown = g.json("lease", "show", lease)
    assert shown["status"] == "Active" and shown["deposited"] == 9 * IO
    assert shown["downtime_tolerance_seconds"] == 45, "the client's tolerance is on chain"
    assert shown["burn_per_hour"] == 2 * 2_500_000  # 2 GPUs at the node's 2.5 IO
    assert shown["escrow_balance"] == 9 * IO - shown["paid"] - shown["fees"]
    assert shown["escrow_runway_seconds"] == shown["escrow_balance"] * 3600 // shown["burn_per_hour"]
    [listed] = g.json("lease", "list", wallet="client")
    assert listed["lease"] == lease and listed["escrow_balance"] == shown["escrow_balance"]

    [settled] = g.json("settlements", "list", "--lease", lease)
    assert (settled["epoch"], settled["receipt_gpu_seconds"], settled["gpu_seconds"], settled["node"]) == (
        1,
        4,
        4,
        shown["assignments"][0]["node"],
    )
    assert settled["payout"] + settled["fee"] == 4 * 2_500_000 // 3600  # floor(GPU-s x price / 3600)
    assert g.json("settlements", "list", "--provider", g.pubkey("supplier")) == [settled]
    # the provider account (what the rows show) names the same provider as its wallet
    assert g.json("settlements", "list", "--provider", settled["provider"]) == [settled]

    closed = g.json("lease", "close", lease, wallet="client")
    # what the node's usage since its receipt (the seconds the commands above took) could still cost is kept
    assert closed["refunded"] + closed["kept_for_settlement"] == 9 * IO - settled["payout"] - settled["fee"]
    for subject in (["--lease", lease], ["--provider", g.pubkey("supplier")]):
        audit = g.json("audit", *subject)
        assert audit["ok"] and all(c["ok"] for c in audit["checks"]) and audit["transactions"] >= 3

    # a deregistered node's stake stays bonded for the unbonding period, at least the settlement window
    g("admin", "update", "--settle-window", "1s", wallet="admin")
    deregistered = g.json("node", "deregister", g.pubkey("node1"), wallet="supplier")
    assert deregistered["bonded_stake"] == 400 * IO  # bonded, and slashable, for the unbonding period
    again = ("node", "register", str(g.key("node1")), "--gpu", "H100", "--count", "1", "--region", "us-east")
    refused = g(*again, "--price", "2", wallet="supplier", expect=2).output
    assert "only once released" in refused, refused
    time.sleep(1.5)  # unbonding is 1 s on this cluster
    # by its key file, as every node command takes a node (before, release took only a public key)
    assert g.json("node", "release", str(g.key("node1")), wallet="supplier")["released_stake"] == 400 * IO
    g("provider", "unstake", "300", wallet="supplier")
    # one unbonding at a time: a second request is refused, saying when the first one is withdrawable
    sent = g.signatures_of("supplier")
    refused = g("provider", "unstake", "300", wallet="supplier", expect=2).output
    assert "already unbonding" in refused and "gpunet provider withdraw" in refused, refused
    assert g.signatures_of("supplier") == sent
    time.sleep(1.5)
    assert g.json("provider", "withdraw", wallet="supplier")["amount"] == 300 * IO
    g("provider", "unstake", "300", wallet="supplier")
    time.sleep(1.5)
    withdrawn = g.json("provider", "withdraw", wallet="supplier")
    assert withdrawn["amount"] == 300 * IO
    after = g.json("provider", "show", wallet="supplier")
    assert (after["staked"], after["unbonding"], after["stake_vault_balance"], after["earned"]) == (
        0,
        0,
        0,
        settled["payout"],
    )

    g("admin", "update", "--fee-bps", "250", "--pause", wallet="admin")
    updated = g.json("admin", "show")
    assert (updated["protocol_fee_bps"], updated["paused"], updated["usage_period_seconds"]) == (250, True, 60)


def test_a_slashed_node_is_unjailed_by_its_provider_after_the_jail_time(market) -> None:
    g = market

    async def slash() -> None:
        admin, supplier, node_key = (load_keypair(g.key(n)) for n in ("admin", "supplier", "node1"))
        async with AsyncClient(g.node.url, commitment=Confirmed) as client:
            config = await fetch_config(client)
            await send_and_confirm(
                client,
                admin,
                [
                    ix.slash_provider(
                        admin.pubkey(),
                        config.treasury,
                        node_key.pubkey(),
                        supplier.pubkey(),
                        "MissedHeartbeats",
                        bytes(32),
                    )
                ],
            )

    asyncio.run(slash())
    [node] = g.json("node", "list")
    assert node["jailed"]
    early = g("node", "unjail", g.pubkey("node1"), wallet="supplier", expect=2)
    assert "stays jailed for" in early.stderr
    time.sleep(2.5)  # the jail time this cluster was initialised with
    g("node", "unjail", g.pubkey("node1"), wallet="supplier")
    [node] = g.json("node", "list")
    assert not node["jailed"]
    again = g("node", "unjail", g.pubkey("node1"), wallet="supplier", expect=2)
    assert "is not jailed" in again.stderr


def test_only_its_supplier_drains_a_node_and_undrains_it(market) -> None:
    g = market
    node_key = g.pubkey("node1")
    # The client (a stranger to the node) is refused before anything is sent; nothing changes.
    stranger = g("node", "drain", node_key, wallet="client", expect=2)
    assert "not to your wallet" in stranger.stderr
    [node] = g.json("node", "list")
    assert not node["draining"]
    # Its supplier (the control) drains it, which `node list` shows, and undrains it.
    g("node", "drain", node_key, wallet="supplier")
    [node] = g.json("node", "list")
    assert node["draining"] and not node["jailed"]
    again = g("node", "drain", node_key, wallet="supplier", expect=2)
    assert "already draining" in again.stderr
    g("node", "undrain", node_key, wallet="supplier")
    [node] = g.json("node", "list")
    assert not node["draining"]
