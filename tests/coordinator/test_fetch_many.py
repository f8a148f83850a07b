"""`gpunet.accounts.fetch_many` on the local node: the rewards loop reads every open pool's provider
and pool with it, 100 addresses a getMultipleAccounts call, so its answer must keep their order
across calls and refuse an absent or foreign account by name."""

from __future__ import annotations

import pytest
from solders.pubkey import Pubkey

from gpunet.accounts import MULTIPLE_ACCOUNTS_LIMIT, AccountError, fetch, fetch_many
from gpunet.amounts import IO
from gpunet.testbed import Market


async def test_many_accounts_come_back_in_order_across_calls_and_a_bad_one_is_named(market: Market) -> None:
    a, b = await market.supplier(), await market.supplier(stake=150 * IO)
    addresses = [a.provider, b.provider] * (MULTIPLE_ACCOUNTS_LIMIT // 2 + 3)  # more than one call's worth
    decoded = await fetch_many(market.chain, addresses, "Provider")
    expected = {p: (await fetch(market.chain, p, "Provider")).authority for p in (a.provider, b.provider)}
    assert [d.authority for d in decoded] == [expected[p] for p in addresses]
    assert await fetch_many(market.chain, [], "Provider") == []

    missing = Pubkey.new_unique()
    with pytest.raises(AccountError, match=f"no Provider account at {missing}"):
        await fetch_many(market.chain, [*addresses, missing], "Provider")
    with pytest.raises(AccountError, match=f"the account at {market.mint} is not owned"):
        await fetch_many(market.chain, [a.provider, market.mint], "Provider")
    with pytest.raises(AccountError, match="is not a gpunet Provider"):
        await fetch_many(market.chain, [a.node], "Provider")
