"""A lease's end and its escrow's runway are different numbers, and `lease show`/`lease list` say both:
the escrow is sized at the maximum price, so on cheaper nodes it outlasts the lease's end."""

from __future__ import annotations

import re

from gpunet.amounts import IO


def _row(table: str, name: str) -> str:
    """The text of one row of a two-column table, by its first cell."""
    [line] = [line for line in table.splitlines() if re.match(rf"^\W*{name}\s", line)]
    return line


def test_a_2h_lease_on_nodes_cheaper_than_its_maximum_ends_in_2h_with_a_longer_escrow_runway(market) -> None:
    g = market
    opened = g.json(
        "lease",
        "open",
        "--gpu",
        "H100",
        "--count",
        "2",
        "--max-price",
        "2.5",
        "--duration",
        "2h",
        "--lease-id",
        "1",
        wallet="client",
    )
    lease = opened["lease"]
    assert opened["deposit"] == 10 * IO  # 2.5 IO x 2 GPUs x 2 h

    waiting = g.json("lease", "show", lease)
    assert waiting["ends_at"] is None and waiting["seconds_to_end"] is None, "an open lease's end starts at placement"
    assert "2h00m after it is placed" in _row(g("lease", "show", lease).stdout, "ends")

    g.assign(lease, 2, 2 * IO)  # node1's price: 80 % of the maximum
    shown = g.json("lease", "show", lease)
    assert 2 * 3600 - 60 < shown["seconds_to_end"] <= 2 * 3600
    assert shown["escrow_runway_seconds"] == 10 * IO * 3600 // (4 * IO) == 2 * 3600 + 30 * 60

    table = g("lease", "show", lease).stdout
    ends = _row(table, "ends")
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \(in (1h59m|2h00m)\)", ends), ends
    assert "2h30m" in _row(table, "escrow runway")
    assert "time left" not in table, "the old row mixed the two up (it showed the runway, 2h30m)"

    [row] = g.json("lease", "list", wallet="client")
    assert (row["seconds_to_end"] > 2 * 3600 - 60, row["escrow_runway_seconds"]) == (True, 9000)
    listed = g("lease", "list", wallet="client").stdout
    assert "2h30m" in listed and re.search(r"(1h59m|2h00m)", listed)  # the runway and the time to the end
