"""What the CLI says is read by people: unbonding and jail times as a date and a duration (never raw
seconds or unix timestamps, which stay in --json)."""

from __future__ import annotations

import re

from gpunet.cli.common import Exit

DATE_AND_SPAN = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC"
RAW = re.compile(r"\b\d{5,}\b|\bunix\b|\d+ s\b")  # a timestamp, 'unix time', or '172800 s'


def test_unbonding_shows_as_a_date_and_a_duration(market) -> None:
    g = market
    g("admin", "update", "--unbonding", "2d", wallet="admin")
    assert re.search(r"unbonding_seconds\W+2d00h", g("admin", "show").stdout), "admin show: a duration, not 172800"
    assert g.json("admin", "show")["unbonding_seconds"] == 172_800, "--json keeps the seconds"

    unstaked = g("provider", "unstake", "100", wallet="supplier").stdout
    assert re.search(rf"unbonding 100 IO until {DATE_AND_SPAN} \(in (1d23h|2d00h)\)", unstaked), unstaked
    refused = g("provider", "withdraw", wallet="supplier", expect=Exit.BAD_INPUT).stderr
    assert re.search(rf"still unbonding for (1d23h|2d00h), until {DATE_AND_SPAN}", refused), refused
    shown = g("provider", "show", wallet="supplier").stdout
    assert re.search(rf"unbonding ends\W+{DATE_AND_SPAN} \(in (1d23h|2d00h)\)", shown), shown
    for text in (unstaked, refused):
        assert not RAW.search(text.replace(g.pubkey("supplier"), "")), text
