"""`gpunet balance [WALLET]` (SOL, IO, stake, escrow locked in open leases) and
`gpunet transfer AMOUNT TO` (IO parsed exactly; bad amounts and addresses refused with nothing sent)."""

from __future__ import annotations

import pytest

from gpunet.amounts import IO
from gpunet.cli.common import Exit


def test_balance_counts_sol_io_stake_and_the_escrow_locked_in_open_leases(market) -> None:
    g = market
    g("lease", "open", "--gpu", "H100", "--count", "2", "--max-price", "3", "--duration", "1h", wallet="client")
    client = g.json("balance", wallet="client")
    assert (client["io"], client["escrow_locked"], client["leases_holding_escrow"], client["stake"]) == (
        94 * IO,
        6 * IO,
        1,
        None,
    )
    assert 4 * 10**9 < client["sol_lamports"] < 5 * 10**9
    supplier = g.json("balance", g.pubkey("supplier"), wallet="client")  # anyone's, by address
    assert (supplier["io"], supplier["stake"]["staked"], supplier["stake"]["bonded"], supplier["escrow_locked"]) == (
        400 * IO,
        600 * IO,
        400 * IO,
        0,
    )
    table = " ".join(g("balance", wallet="client").stdout.split())
    assert "94 IO" in table and "6 IO in 1 lease(s)" in table and "not a provider" in table and " SOL" in table


def test_transfer_sends_exact_base_units_and_creates_the_recipient_s_io_account(market) -> None:
    g = market
    friend = g.wallet("friend", sol="")
    sent = g("transfer", "12.345678", friend, wallet="client").stdout
    assert "created its IO account" in " ".join(sent.split())
    assert g.json("balance", friend, wallet="client")["io"] == 12_345_678
    assert g.json("balance", wallet="client")["io"] == 100 * IO - 12_345_678
    again = g.json("transfer", "0.000001", friend, wallet="client")
    assert (again["amount"], again["created_io_account"]) == (1, False)
    assert g.json("balance", friend, wallet="client")["io"] == 12_345_679


@pytest.mark.parametrize(
    ("amount", "to", "code", "says"),
    [
        ("1.0000001", "friend", Exit.BAD_INPUT, "more than 6 decimals"),
        ("0", "friend", Exit.BAD_INPUT, "more than zero"),
        ("ten", "friend", Exit.BAD_INPUT, "not an amount of IO"),
        ("1", "not-a-wallet", Exit.BAD_INPUT, "not a valid recipient wallet"),
        ("1", "client", Exit.BAD_INPUT, "your own wallet"),
        ("1", "supplier-io-account", Exit.BAD_INPUT, "is a token account, not a wallet: give the wallet that owns it"),
        ("100.000001", "friend", Exit.FUNDS, "needs 100.000001 IO but the wallet's IO account holds 100 IO"),
    ],
)
def test_bad_transfers_are_refused_with_nothing_sent(market, amount, to, code, says) -> None:
    g = market
    g.wallet("friend", sol="")
    address = {
        "friend": g.pubkey("friend"),
        "client": g.pubkey("client"),
        "supplier-io-account": g.json("balance", g.pubkey("supplier"), wallet="client")["io_account"],
    }.get(to, to)
    before = g.signatures_of("client")
    refused = g("transfer", amount, address, wallet="client", expect=code)
    assert says in " ".join(refused.stderr.split())
    assert g.signatures_of("client") == before
