"""`admin update` adds and removes attesters one by one: the old `--attester` replaced the whole list,
so following the coordinator's hint cut the running coordinator off. Removing the last attester, or the
key of the coordinator configured here (GPUNET_ATTESTER_KEYPAIR) without --force, is refused before
anything is sent. The market's admin is its only attester."""

from __future__ import annotations

import pytest

from gpunet.cli.common import Exit


@pytest.fixture
def admin(market, monkeypatch, tmp_path):
    """The market, with a coordinator here that signs with a key of its own (not an attester yet)."""
    market.wallet("coordinator", sol="")
    monkeypatch.setenv("GPUNET_ATTESTER_KEYPAIR", str(market.key("coordinator")))
    return market


def _attesters(g) -> list[str]:
    return g.json("admin", "show")["attesters"]


def test_adding_an_attester_keeps_the_others(admin) -> None:
    g = admin
    g("admin", "update", "--add-attester", g.pubkey("coordinator"), wallet="admin")
    assert _attesters(g) == [g.pubkey("admin"), g.pubkey("coordinator")]


def test_the_old_replacing_option_is_refused_and_says_what_to_use(admin) -> None:
    g = admin
    before = g.signatures_of("admin")
    refused = g("admin", "update", "--attester", g.pubkey("coordinator"), wallet="admin", expect=Exit.BAD_INPUT)
    assert "--add-attester KEY and --remove-attester KEY" in " ".join(refused.stderr.split())
    assert (_attesters(g), g.signatures_of("admin")) == ([g.pubkey("admin")], before)


def test_the_configured_coordinator_s_key_is_removed_only_with_force(admin) -> None:
    g = admin
    g("admin", "update", "--add-attester", g.pubkey("coordinator"), wallet="admin")
    before = g.signatures_of("admin")
    refused = " ".join(
        g(
            "admin", "update", "--remove-attester", g.pubkey("coordinator"), wallet="admin", expect=Exit.BAD_INPUT
        ).stderr.split()
    )
    assert "is the attester key of the coordinator configured here (GPUNET_ATTESTER_KEYPAIR=" in refused
    assert "--force" in refused and g.signatures_of("admin") == before
    g("admin", "update", "--remove-attester", g.pubkey("coordinator"), "--force", wallet="admin")
    assert _attesters(g) == [g.pubkey("admin")]


def test_the_last_attester_is_never_removed_but_may_be_swapped_in_one_command(admin) -> None:
    g = admin
    before = g.signatures_of("admin")
    refused = g(
        "admin", "update", "--remove-attester", g.pubkey("admin"), "--force", wallet="admin", expect=Exit.BAD_INPUT
    )
    assert "removes the last attester" in refused.stderr and g.signatures_of("admin") == before
    g.wallet("successor", sol="")
    g(
        "admin",
        "update",
        "--add-attester",
        g.pubkey("successor"),
        "--remove-attester",
        g.pubkey("admin"),
        wallet="admin",
    )
    assert _attesters(g) == [g.pubkey("successor")]


@pytest.mark.parametrize(
    ("option", "who", "says"),
    [
        ("--add-attester", "admin", "is already an attester"),
        ("--remove-attester", "client", "is not an attester"),
        ("--add-attester", "not-a-key", "not a valid attester key"),
    ],
)
def test_bad_attester_changes_are_refused_with_nothing_sent(admin, option, who, says) -> None:
    g = admin
    key = who if who == "not-a-key" else g.pubkey(who)
    before = g.signatures_of("admin")
    refused = g("admin", "update", option, key, wallet="admin", expect=Exit.BAD_INPUT)
    assert says in refused.stderr and (_attesters(g), g.signatures_of("admin")) == ([g.pubkey("admin")], before)


def test_more_attesters_than_the_config_holds_are_refused(admin) -> None:
    g = admin
    extra = []
    for n in range(4):
        extra += ["--add-attester", g.wallet(f"a{n}", sol="")]
    refused = g("admin", "update", *extra, wallet="admin", expect=Exit.BAD_INPUT)
    assert "at most 4 attesters, this would make 5" in refused.stderr
