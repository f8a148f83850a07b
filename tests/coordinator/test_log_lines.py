"""Foreign and malformed `Program data:` lines are skipped and counted, never fatal, and the
good events of the same transaction still land (a real transaction's logs, tampered)."""

from __future__ import annotations

import copy

from coordinator.db.chain import write_batch
from coordinator.indexer.decode import decode_transaction
from gpunet.idl import PROGRAM_ID
from gpunet.testbed import Market

from .conftest import indexed_events, state

FOREIGN = "Memo1UhkJRfHyvLMcVucJwxXeuD728EqVDDwQDxFMNo"


async def test_foreign_and_malformed_lines_are_skipped_and_counted(node, market: Market, pool):
    await market.supplier()  # one transaction: ProviderRegistered, Staked, NodeRegistered
    sig = str(market.signatures[-1])
    tx = node.call("getTransaction", [sig, {"encoding": "json", "commitment": "confirmed"}])["result"]
    logs = tx["meta"]["logMessages"]
    data_lines = [i for i, line in enumerate(logs) if line.startswith("Program data: ")]
    assert len(data_lines) == 3
    staked = logs[data_lines[1]]

    tampered = copy.deepcopy(tx)
    lines = tampered["meta"]["logMessages"]
    lines[data_lines[1]] = staked[:40]  # truncated: a known discriminator, too few bytes
    lines.insert(data_lines[1] + 1, "Program data: %%%not base64%%%")
    lines.insert(data_lines[1] + 2, "Program data: AAAAAAAAAAAAAAAAAAAA")  # no such event
    # Another program logs a perfectly valid gpunet event: it must not count as one.
    lines[-1:-1] = [f"Program {FOREIGN} invoke [2]", staked, f"Program {FOREIGN} success"]

    decoded = decode_transaction(sig, tampered, PROGRAM_ID)
    assert [name for name, _ in decoded.events] == ["ProviderRegistered", "NodeRegistered"]
    assert decoded.lines_skipped == 4

    async with pool.acquire() as conn:
        assert await write_batch(conn, [decoded]) == 2
        # The same transaction again (a replayed batch) changes nothing.
        assert await write_batch(conn, [decoded]) == 0
        assert await conn.fetchval("SELECT lines_skipped FROM transactions WHERE signature = $1", sig) == 4
    assert [(e[1], e[2]) for e in await indexed_events(pool)] == [(0, "ProviderRegistered"), (1, "NodeRegistered")]
    s = await state(pool)
    assert (s["lines_skipped"], s["events_indexed"], s["transactions_indexed"]) == (4, 2, 1)

    # Logs that are not even strings, or a result with no logs at all, do not stop the indexer either.
    odd = copy.deepcopy(tx)
    odd["meta"]["logMessages"] = [None, 42, *logs]
    assert decode_transaction(sig, odd, PROGRAM_ID).lines_skipped == 2
    odd["meta"] = {"err": None}
    assert decode_transaction(sig, odd, PROGRAM_ID).events == []
