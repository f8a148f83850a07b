"""CLI building blocks without a node: exact IO amounts, escrow rounding, durations, cluster choice."""

from __future__ import annotations

import pytest

from gpunet.amounts import AmountError, escrow_for, format_io, parse_io, parse_u64, u64_json
from gpunet.cli import clock
from gpunet.cli.common import BadInput, duration_arg
from gpunet.cli.lease import expose_arg
from gpunet.cli.node import verification_label
from gpunet.cli.wallet import format_sol
from gpunet.cluster import ClusterError, resolve_cluster


@pytest.mark.parametrize(("text", "units"), [("1", 10**6), ("12.5", 12_500_000), ("0.000001", 1), (" 3 ", 3 * 10**6)])
def test_io_amounts_parse_exactly(text, units) -> None:
    assert parse_io(text) == units
    assert parse_io(format_io(units).removesuffix(" IO").replace(",", "")) == units


@pytest.mark.parametrize("text", ["0", "-1", "0.0000001", "1e30", "nan", "inf", "ten", ""])
def test_bad_io_amounts_are_refused(text) -> None:
    with pytest.raises(AmountError):
        parse_io(text)


@pytest.mark.parametrize("units", [0, 1, 2**53 + 1, 2**64 - 1])
def test_u64s_go_through_the_api_as_digits_exactly(units) -> None:
    assert parse_u64(u64_json(units)) == units and u64_json(units) == str(units)


@pytest.mark.parametrize(
    "value", ["18446744073709551616", "-1", "+1", " 1", "1 ", "1.0", "1e3", "0x1", "1_000", "\u0661", "", 1, 1.0, None]
)
def test_anything_but_a_u64_s_digits_is_refused(value) -> None:
    """A JSON number may have been rounded on its way (2**53 + 1 reads as 2**53 in JavaScript): not taken."""
    with pytest.raises(AmountError, match="expected a u64 as a string of decimal digits"):
        parse_u64(value)


@pytest.mark.parametrize("value", [-1, 2**64, True, 1.0])
def test_only_a_u64_is_served_as_one(value) -> None:
    with pytest.raises(ValueError, match="is not a u64"):
        u64_json(value)


def test_escrow_rounds_up_like_the_program() -> None:
    assert escrow_for(3_000_000, 2, 3600) == 6_000_000
    assert escrow_for(1, 1, 1) == 1  # 1/3600 of a unit rounds up to one
    assert escrow_for(3_600, 1, 1) == 1 and escrow_for(3_601, 1, 1) == 2


@pytest.mark.parametrize(
    ("text", "seconds"), [("90m", 5400), ("1h30m", 5400), ("2d", 172_800), ("45", 45), ("10s", 10)]
)
def test_durations(text, seconds) -> None:
    assert duration_arg(text) == seconds


@pytest.mark.parametrize("text", ["0", "0h", "soon", "1x", "-5m", ""])
def test_bad_durations(text) -> None:
    with pytest.raises(BadInput):
        duration_arg(text)


def test_cluster_from_flag_then_env_then_anchor_toml_then_localnet(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("GPUNET_RPC_URL", raising=False)
    monkeypatch.delenv("GPUNET_WS_URL", raising=False)
    assert resolve_cluster(cwd=tmp_path).rpc_url == "http://127.0.0.1:8899"
    (tmp_path / "Anchor.toml").write_text('[provider]\ncluster = "devnet"\n')
    nested = tmp_path / "a" / "b"
    nested.mkdir(parents=True)
    found = resolve_cluster(cwd=nested)
    assert (found.rpc_url, found.ws_url, found.source) == (
        "https://api.devnet.solana.com",
        "wss://api.devnet.solana.com",
        "Anchor.toml",
    )
    monkeypatch.setenv("GPUNET_RPC_URL", "http://10.0.0.5:7000")
    env = resolve_cluster(cwd=nested)
    assert (env.rpc_url, env.ws_url, env.source) == ("http://10.0.0.5:7000", "ws://10.0.0.5:7001", "GPUNET_RPC_URL")
    assert resolve_cluster("mainnet", cwd=nested).rpc_url == "https://api.mainnet-beta.solana.com"
    with pytest.raises(ClusterError, match="neither a cluster name"):
        resolve_cluster("marsnet", cwd=nested)


@pytest.mark.parametrize(
    ("lamports", "text"),
    [
        (0, "0 SOL"),
        (10 * 10**9, "10 SOL"),
        (1_500_000_000, "1.5 SOL"),
        (1, "0.000000001 SOL"),
        (1_234_567_891, "1.234567891 SOL"),
    ],
)
def test_sol_amounts_are_shown_exactly(lamports, text) -> None:
    assert format_sol(lamports) == text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (None, "-"),
        (0, "0s"),
        (59, "59s"),
        (61, "1m01s"),
        (3600, "1h00m"),
        (9000, "2h30m"),
        (172_800, "2d00h"),
        (-5, "0s"),
    ],
)
def test_durations_are_shown_in_two_units(seconds, text) -> None:
    assert clock.span(seconds) == text


def test_a_moment_is_a_utc_date_and_how_far_off_it_is() -> None:
    assert clock.until(1_800_000_000, now=1_800_000_000 - 5400) == "2027-01-15 08:00:00 UTC (in 1h30m)"
    assert clock.until(1_800_000_000, now=1_800_000_000 + 125) == "2027-01-15 08:00:00 UTC (2m05s ago)"


def test_a_node_s_verification_reads_as_its_tier_and_how_long_it_holds() -> None:
    now = 1_800_000_000
    assert verification_label({"verification_tier": 0, "verified_until": 0}, now) == "unverified"
    assert verification_label({"verification_tier": 2, "verified_until": now + 5400}, now) == (
        "GPU until 2027-01-15 09:30:00 UTC (in 1h30m)"
    )
    assert verification_label({"verification_tier": 1, "verified_until": now - 60}, now) == (
        "simulated, expired 2027-01-15 07:59:00 UTC"
    )


def test_an_exposed_port_is_name_equals_port_with_an_optional_protocol() -> None:
    assert (expose_arg("api=8000").name, expose_arg("api=8000").port, expose_arg("api=8000").protocol) == (
        "api",
        8000,
        "http",
    )
    assert expose_arg("ssh=22/tcp").protocol == "tcp"
    for bad, why in [
        ("api", "NAME=PORT"),
        ("api=x", "NAME=PORT"),
        ("API=80", "pattern"),
        ("a=99999", "65535"),
        ("a=80/udp", "'tcp'"),
    ]:
        with pytest.raises(BadInput, match=why):
            expose_arg(bad)
