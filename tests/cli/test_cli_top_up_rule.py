"""Only a lease's client may top it up: the CLI refuses anyone else before sending, and when the
program refuses it (an SDK caller), the error names that rule, not Anchor's ConstraintHasOne."""

from __future__ import annotations

import asyncio

import pytest
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solders.pubkey import Pubkey

from gpunet import instructions as ix
from gpunet.accounts import fetch_config
from gpunet.cli.common import Exit
from gpunet.client import TransactionFailed, send_and_confirm
from gpunet.keys import load_keypair
from gpunet.tokens import io_account


@pytest.fixture
def lease_of_client(market) -> str:
    return market.json(
        "lease",
        "open",
        "--gpu",
        "H100",
        "--count",
        "1",
        "--max-price",
        "2",
        "--duration",
        "1h",
        "--lease-id",
        "7",
        wallet="client",
    )["lease"]


def test_a_top_up_by_someone_else_is_refused_by_name_before_sending(market, lease_of_client) -> None:
    before = market.signatures_of("supplier")
    refused = market("lease", "top-up", lease_of_client, "--duration", "1h", wallet="supplier", expect=Exit.BAD_INPUT)
    assert "only the lease's client can top it up" in refused.stderr
    assert market.signatures_of("supplier") == before


def test_the_program_refusing_a_stranger_s_top_up_names_the_rule_not_the_constraint(market, lease_of_client) -> None:
    stranger = load_keypair(market.key("supplier"))  # holds IO: its token account passes, the lease check fails

    async def top_up() -> TransactionFailed:
        async with AsyncClient(market.node.url, commitment=Confirmed) as client:
            mint = (await fetch_config(client)).io_mint
            with pytest.raises(TransactionFailed) as refused:
                await send_and_confirm(
                    client,
                    stranger,
                    [
                        ix.top_up_lease(
                            stranger.pubkey(),
                            io_account(stranger.pubkey(), mint),
                            Pubkey.from_string(lease_of_client),
                            3600,
                        )
                    ],
                )
            return refused.value

    refused = asyncio.run(top_up())
    assert refused.program_error is not None and refused.program_error.name == "ConstraintHasOne"
    assert "only the lease's client can top it up" in str(refused)
    assert "A has one constraint was violated" not in str(refused)
