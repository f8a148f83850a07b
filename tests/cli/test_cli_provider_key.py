"""A provider is named by its supplier's wallet or by its provider account (the PDA every event and
API row shows): every command that takes one takes either, says which it was given, and answers a
key that is neither with "not found" (exit 6), never with an empty list or a failed audit."""

from __future__ import annotations

from solders.keypair import Keypair
from solders.pubkey import Pubkey

from gpunet.exits import Exit
from gpunet.pda import provider_pda


def test_the_wallet_and_the_provider_account_name_the_same_provider(market):
    wallet = market.pubkey("supplier")
    account = str(provider_pda(Pubkey.from_string(wallet)))

    by_wallet, by_account = (market.json("provider", "show", key) for key in (wallet, account))
    assert by_wallet == by_account and by_account["provider"] == account and by_account["authority"] == wallet

    nodes = market.json("node", "list", "--provider", account)
    assert [n["node_key"] for n in nodes] == [market.pubkey("node1")]
    assert market.json("node", "list", "--provider", wallet) == nodes

    audits = {key: market.json("audit", "--provider", key) for key in (wallet, account)}
    assert all(a["ok"] and a["transactions"] >= 2 for a in audits.values())
    assert audits[wallet]["checks"] == audits[account]["checks"]
    assert f"provider {account} (wallet {wallet}; given the wallet)" == audits[wallet]["subject"]
    assert f"provider {account} (wallet {wallet}; given the provider account)" == audits[account]["subject"]

    listed = market("settlements", "list", "--provider", account).stdout
    assert f"settlements of provider {account} (wallet {wallet}; given the provider account)" in listed


def test_a_key_that_names_no_provider_is_not_found(market):
    stranger = str(Keypair().pubkey())
    for args in (
        ["audit", "--provider", stranger],
        ["settlements", "list", "--provider", stranger],
        ["node", "list", "--provider", stranger],
        ["provider", "show", stranger],
    ):
        out = market(*args, expect=Exit.NOT_FOUND).output
        assert f"{stranger} is neither a provider account nor the wallet of a registered provider" in out, args
    # A lease account is no provider either (found, but not a Provider): still not found, not a failed audit.
    client_wallet = market.pubkey("client")
    assert "is neither a provider account" in market("audit", "--provider", client_wallet, expect=6).output
