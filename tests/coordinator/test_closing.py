"""The coordinator's end of a lease against the real program: usage past the lease's end is never
submitted, and a lease whose vault a stranger sent tokens to still closes and finalizes (the
review's 1-unit lock), with the same flow without a donation as the control."""

from __future__ import annotations

import pytest
from spl.token.constants import TOKEN_PROGRAM_ID
from spl.token.instructions import TransferParams, transfer

from coordinator.attester import Attester
from coordinator.settlement import Settler, Status
from gpunet.accounts import fetch
from gpunet.client import send_and_confirm
from gpunet.pda import lease_vault_pda, node_pda
from gpunet.tokens import token_balance

from .chain import PERIOD, Cluster


async def _past_the_end(cluster: Cluster) -> None:
    lease = await fetch(cluster.client, cluster.lease, "Lease")
    await cluster.wait_for_period((lease.terms.duration_seconds // PERIOD) + 1)


async def test_usage_past_the_lease_end_is_never_submitted(chain) -> None:
    cluster = await Cluster().build(chain, seconds=2 * PERIOD)
    await _past_the_end(cluster)
    settler = Settler(cluster.client, cluster.admin)
    past = cluster.receipt(0, 3)  # a worker that ignored the end (or a cheating one)
    [waiting] = await settler.settle([past])
    assert waiting.status is Status.WAITING and "after the lease's end" in waiting.reason
    assert waiting.signature is None, "nothing was sent for it"
    [within] = await settler.settle([cluster.receipt(0, 2)])  # the control: up to the end exactly
    assert within.status is Status.SETTLED
    paid = (await fetch(cluster.client, cluster.lease, "Lease")).paid

    # The lease closes (billing ended at its end): the receipt is refused for good, nothing moves.
    await Attester(cluster.client, cluster.admin).close(cluster.lease)
    [again] = await settler.settle([past])
    assert again.status is Status.REFUSED and "billing ended" in again.reason
    lease = await fetch(cluster.client, cluster.lease, "Lease")
    assert type(lease.status).__name__ == "Closing" and lease.paid == paid
    assert [a.settled_until for a in list(lease.assignments)[:1]] == [cluster.started + 2 * PERIOD]


@pytest.mark.parametrize("donation", [0, 1], ids=["control", "donated-1-unit"])
async def test_a_lease_whose_vault_got_a_donation_closes_and_finalizes(chain, donation: int) -> None:
    cluster = await Cluster().build(chain, seconds=2 * PERIOD)
    if donation:
        stranger = await cluster.market.client(donation)
        await send_and_confirm(
            chain,
            stranger.wallet,
            [
                transfer(
                    TransferParams(
                        program_id=TOKEN_PROGRAM_ID,
                        source=stranger.tokens,
                        dest=lease_vault_pda(cluster.lease),
                        owner=stranger.wallet.pubkey(),
                        amount=donation,
                    )
                )
            ],
        )
    await _past_the_end(cluster)
    settled = await Settler(cluster.client, cluster.admin).settle([cluster.receipt(n, 1) for n in (0, 1)])
    assert {o.status for o in settled} == {Status.SETTLED}
    before = await token_balance(chain, cluster.client_tokens)

    attester = Attester(cluster.client, cluster.admin)
    await attester.close(cluster.lease)
    await attester.finalize(cluster.lease)
    lease = await fetch(chain, cluster.lease, "Lease")
    assert type(lease.status).__name__ == "Closed" and lease.donations == donation
    assert lease.deposited == lease.paid + lease.fees + lease.refunded
    assert (
        await token_balance(chain, cluster.client_tokens)
        == before + (lease.deposited - lease.paid - lease.fees) + donation
    )
    assert (await chain.get_account_info(lease_vault_pda(cluster.lease))).value is None
    for _, node_key in cluster.nodes:  # the nodes are free for other leases
        node = await fetch(chain, node_pda(node_key.pubkey()), "Node")
        assert node.gpus_leased == 0
