"""A lease no node can take: `lease open` refuses it before escrowing (with the numbers, the closest
node and what to change; --force opens it anyway), and `lease show` says why an open lease waits and
how to get its escrow back. The market: one 4x H100 80 GB node in us-east at 2 IO/GPU-hour."""

from __future__ import annotations

import shlex

import pytest

from gpunet.amounts import IO
from gpunet.cli.common import Exit

OPEN = ("lease", "open", "--gpu", "H100", "--duration", "1h")


@pytest.mark.parametrize(
    ("terms", "says"),
    [
        (["--count", "2", "--max-price", "3", "--region", "eu-west"], ["in us-east, not eu-west", "change --region"]),
        (["--count", "2", "--max-price", "1.5"], ["asks 2 IO/GPU-hour, over 1.5 IO", "change --max-price"]),
        (["--count", "1", "--max-price", "3", "--vram", "141"], ["80 GB per GPU, under 141 GB", "change --vram"]),
        (
            ["--count", "5", "--max-price", "3"],
            ["the 1 matching node(s) have 4 GPUs in all", "ask for --count 4 or fewer"],
        ),
    ],
)
def test_a_lease_no_registered_node_could_take_is_refused_before_escrowing(market, terms, says) -> None:
    before = market.signatures_of("client")
    refused = market(*OPEN, *terms, wallet="client", expect=Exit.BAD_INPUT).stderr
    assert "no registered node could take this lease" in refused and "--force" in refused
    for text in says:
        assert text in " ".join(refused.split()), refused  # the console wraps long lines
    assert market.signatures_of("client") == before
    assert market.json("lease", "list", wallet="client") == []


def test_forced_open_lease_says_why_it_waits_and_how_to_get_the_escrow_back(market) -> None:
    opened = market.json(*OPEN, "--count", "2", "--max-price", "3", "--region", "eu-west", "--force", wallet="client")
    lease = opened["lease"]
    shown = market.json("lease", "show", lease)
    waiting = shown["waiting"]
    assert waiting["matching_free_gpus"] == 0 and waiting["escrow_locked"] == 6 * IO
    assert "no registered node can take it now" in waiting["reason"] and "in us-east, not eu-west" in waiting["reason"]
    assert [c["node_key"] for c in waiting["closest"]] == [market.pubkey("node1")]
    table = " ".join(market("lease", "show", lease).stdout.split())
    assert "waiting: no registered node can take it now" in table and "to get the escrow back (6 IO)" in table
    assert f"gpunet lease close {lease}" in market("lease", "show", lease).stdout, "on one line, to copy"

    # The command it gives does what it says.
    market(*shlex.split(waiting["close_command"])[1:], wallet="client")
    assert market.json("lease", "show", lease)["refunded"] == 6 * IO


def test_an_open_lease_that_matching_nodes_could_take_waits_for_its_job(market) -> None:
    lease = market.json(*OPEN, "--count", "2", "--max-price", "3", wallet="client")["lease"]
    waiting = market.json("lease", "show", lease)["waiting"]
    assert waiting["matching_free_gpus"] == 4
    assert f"gpunet lease job {lease}" in waiting["reason"]
