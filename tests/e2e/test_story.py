"""The README's demo story as assertions, with every real part (gpunet-localnet, the coordinator
with embedded PostgreSQL, three worker processes), plus a coordinator restart mid-lease."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from gpunet.amounts import format_io
from gpunet.demo.story import CHECKPOINT_MIB, Demo


@pytest.mark.timeout(420)
async def test_the_whole_story_with_a_lost_worker_and_a_coordinator_restart(
    localnet_bin, monkeypatch, tmp_path
) -> None:
    monkeypatch.setenv("GPUNET_LOCALNET_BIN", str(localnet_bin))
    out = io.StringIO()
    result = await Demo(tmp_path, Console(file=out, width=200), restart_coordinator=True).run()
    transcript = out.getvalue()
    assert "the coordinator is stopped and started again mid-lease" in transcript, transcript

    # Placed as a 2-node cluster; the killed worker's share moved to the third node, which got the
    # lease's key from the client, restored the checkpoint of real size from the store and resumed
    # the job from it, every byte of its weights checked.
    assert len(result.placed_on) == 2 and result.killed == result.placed_on[0]
    assert result.moved_to not in result.placed_on and result.resumed_from_step > 0
    assert result.checkpoint_bytes >= CHECKPOINT_MIB << 20 and result.weights_verified
    assert f"the client sealed the lease's checkpoint key to {result.moved_to}" in transcript
    # Conservation to the base unit, and every node paid only for what it settled.
    assert result.deposited == result.paid + result.fees + result.refunded and result.refunded > 0
    assert sum(result.paid_by_supplier.values()) == result.paid
    assert result.paid_by_supplier[result.moved_to] > 0 and result.slashed_by_supplier[result.killed] > 0
    # The client's share of the slash: on chain (the lease's compensation), per supplier, and in the summary.
    assert result.compensated > 0 and result.to_client_by_supplier[result.killed] == result.compensated
    assert sum(result.to_client_by_supplier.values()) == result.compensated
    client_row = next(line for line in transcript.splitlines() if line.startswith("client "))
    assert f"+{format_io(result.compensated)}" in client_row and format_io(result.refunded) in client_row
    # Every settlement auditable from the chain, and the ledger lost no event across the restart.
    assert result.audits_ok and result.events_indexed_once and result.events_on_chain > 20
    # Co-staking: an epoch's root paid the pools of nodes seen online and verified, the token holder
    # collected its share, and the epoch rebuilds from what the coordinator published.
    assert result.rewards.paid > 0 and result.rewards.collected > 0 and result.rewards.audit_ok
    assert f"the token holder collected {format_io(result.rewards.collected)}" in transcript
    assert result.ok
