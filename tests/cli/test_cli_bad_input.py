"""Bad input to the `gpunet` CLI: a clear message, the documented exit code, and no transaction sent."""

from __future__ import annotations

import json

import pytest

from gpunet import audit as audit_module
from gpunet.amounts import IO
from gpunet.cli.common import Exit


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["node", "register", "node2", "--gpu", "V100", "--count", "1", "--region", "us-east", "--price", "1"],
            "unknown GPU model 'V100'; known models: H100",
        ),
        (
            ["node", "register", "node2", "--gpu", "H100", "--count", "1", "--region", "mars", "--price", "1"],
            "unknown region 'mars'",
        ),
        (["provider", "stake", "0"], "more than zero"),
        (["provider", "stake", "1.0000001"], "more than 6 decimals"),
        (["lease", "open", "--gpu", "H100", "--count", "1", "--max-price", "-1", "--duration", "1h"], "more than zero"),
        (
            ["lease", "open", "--gpu", "H100", "--count", "1", "--max-price", "1", "--duration", "soon"],
            "not a duration",
        ),
        (
            [
                "lease",
                "open",
                "--gpu",
                "H100",
                "--count",
                "1",
                "--max-price",
                "1",
                "--duration",
                "1h",
                "--downtime-tolerance",
                "5s",
            ],
            "--downtime-tolerance must be between 10 s and 3600 s, got 5 s",
        ),
        (
            [
                "lease",
                "open",
                "--gpu",
                "H100",
                "--count",
                "1",
                "--max-price",
                "1",
                "--duration",
                "1h",
                "--downtime-tolerance",
                "2h",
            ],
            "--downtime-tolerance must be between 10 s and 3600 s, got 7200 s",
        ),
        (["lease", "show", "not-a-key"], "not a valid lease address"),
        (
            ["audit", "--lease", "11111111111111111111111111111111", "--provider", "11111111111111111111111111111111"],
            "exactly one of",
        ),
    ],
)
def test_bad_arguments_are_refused_before_sending(market, args, message) -> None:
    market.wallet("node2", sol="")
    args = [str(market.key("node2")) if a == "node2" else a for a in args]
    before = market.signatures_of("supplier")
    reads_only = args[0] == "audit" or args[:2] == ["lease", "show"]  # these take no --keypair
    result = market(*args, wallet=None if reads_only else "supplier", expect=Exit.BAD_INPUT)
    assert message in result.stderr
    assert market.signatures_of("supplier") == before


def test_more_than_the_wallet_holds_is_refused_with_the_numbers(market) -> None:
    before = (market.signatures_of("client"), market.json("provider", "show", wallet="supplier"))
    opened = market(
        "lease",
        "open",
        "--gpu",
        "H100",
        "--count",
        "8",
        "--max-price",
        "10",
        "--duration",
        "2h",
        wallet="client",
        expect=Exit.FUNDS,
    )
    assert "needs 160 IO but the wallet's IO account holds 100 IO" in opened.stderr
    staked = market("provider", "stake", "400.5", wallet="supplier", expect=Exit.FUNDS)
    assert "needs 400.5 IO but the wallet's IO account holds 400 IO" in staked.stderr
    unstaked = market("provider", "unstake", "201", wallet="supplier", expect=Exit.FUNDS)
    assert "only 200 IO is free (400 IO backs your nodes)" in unstaked.stderr
    assert (market.signatures_of("client"), market.json("provider", "show", wallet="supplier")) == before
    market.wallet("broke", sol="")
    unfunded = market("provider", "register", wallet="broke", expect=Exit.FUNDS)
    assert "lamports, not enough for transaction fees" in unfunded.stderr


def test_admin_mint_by_a_wallet_that_is_not_the_mint_authority_is_refused_before_anything_is_sent(market) -> None:
    # It created the recipient's IO account (paid by the caller), then failed with SPL Token's bare
    # "Custom(4)". Refused first now, saying who may mint and how else IO comes.
    newcomer = market.wallet("newcomer", sol="")
    before = market.signatures_of("supplier")
    out = market("admin", "mint", newcomer, "5", wallet="supplier", expect=Exit.BAD_INPUT).stderr
    supplier, admin = market.pubkey("supplier"), market.pubkey("admin")
    assert f"your wallet {supplier} is not the IO mint's authority ({admin} is)" in out, out
    assert f"`gpunet transfer 5 {newcomer}`" in out, out
    assert market.signatures_of("supplier") == before
    assert market.json("balance", newcomer)["io"] == 0
    market("admin", "mint", newcomer, "5", wallet="admin")  # the control: the authority mints
    assert market.json("balance", newcomer)["io"] == 5_000_000


def test_missing_or_malformed_keypair_files(market, tmp_path) -> None:
    missing = market.runner.invoke(
        market_app(), ["provider", "stake", "1", "--url", market.node.url, "--keypair", str(tmp_path / "nope.json")]
    )
    assert missing.exit_code == Exit.KEYPAIR and "no such keypair file" in missing.stderr
    bad = tmp_path / "bad.json"
    bad.write_text('{"not": "a keypair"}')
    malformed = market.runner.invoke(
        market_app(), ["provider", "stake", "1", "--url", market.node.url, "--keypair", str(bad)]
    )
    assert malformed.exit_code == Exit.KEYPAIR and "gpunet keys new" in malformed.stderr


def test_an_unreachable_rpc_node_is_named(gpunet) -> None:
    result = gpunet.runner.invoke(market_app(), ["node", "list", "--url", "http://127.0.0.1:9"])
    assert result.exit_code == Exit.UNREACHABLE
    assert "cannot reach the RPC node at http://127.0.0.1:9 (from --url)" in result.stderr
    bad_url = gpunet.runner.invoke(market_app(), ["node", "list", "--url", "ftp://x"])
    assert bad_url.exit_code == Exit.BAD_INPUT and "neither a cluster name" in bad_url.stderr


def test_a_refused_transaction_names_the_program_error(market) -> None:
    result = market("admin", "update", "--fee-bps", "100", wallet="supplier", expect=Exit.REFUSED)
    assert "Unauthorized" in result.stderr or "admin" in result.stderr.lower()
    assert market.json("admin", "show")["protocol_fee_bps"] == 500
    gone = market("lease", "show", "11111111111111111111111111111111", expect=Exit.NOT_FOUND)
    assert "not owned by the gpunet program" in gone.stderr


def test_audit_exits_7_and_names_the_transaction_when_history_and_state_differ(market, monkeypatch) -> None:
    """An RPC node that hides a transaction (faked at the history boundary): the audit must notice."""
    opened = market.json(
        "lease",
        "open",
        "--gpu",
        "H100",
        "--count",
        "1",
        "--max-price",
        "1",
        "--duration",
        "1h",
        "--lease-id",
        "5",
        "--force",
        wallet="client",
    )  # below node1's price: no matter here
    market("lease", "top-up", opened["lease"], "--duration", "1h", wallet="client")
    real = audit_module.transactions_of

    async def without_the_top_up(client, address, **kw):
        txs = await real(client, address, **kw)
        return [t for t in txs if all(e.name != "LeaseToppedUp" for e in t.events)]

    monkeypatch.setattr(audit_module, "transactions_of", without_the_top_up)
    result = market("audit", "--lease", opened["lease"], "--json", expect=Exit.AUDIT_MISMATCH)
    report = json.loads(result.stdout)
    deposited = next(c for c in report["checks"] if c["what"] == "deposited")
    assert (deposited["from_events"], deposited["on_chain"], deposited["ok"]) == (IO, 2 * IO, False)
    assert deposited["signatures"] == [opened["signature"]]


def market_app():
    from gpunet.cli import app

    return app
