"""The wallet app's supplier flow in a real browser: a supplier of the running gpunet stakes, unstakes
(the unbonding is a few seconds here, as the admin can set it) and withdraws from the page, sees its
node, and each step moves exactly the amount it showed (base units, read from the chain). Its wallet
only signs and sends (the client's test covers a wallet that returns the signed transaction)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from playwright.async_api import expect

from gpunet import instructions as ix
from gpunet.accounts import fetch
from gpunet.amounts import IO
from gpunet.idl import PROGRAM_ID
from gpunet.pda import node_pda, provider_pda
from tests.web.walletapp import connected_app, io_of, sign_on_screen

AMOUNT = 50 * IO
UNBONDING_SECONDS = 3


@pytest.mark.timeout(300)
async def test_a_supplier_stakes_unstakes_and_withdraws_from_the_page(web_stack, browser) -> None:
    market = web_stack.market
    await market.send(
        market.admin,
        [ix.update_config(market.admin.pubkey(), replace(market.params, unbonding_seconds=UNBONDING_SECONDS))],
    )
    supplier = web_stack.demo.suppliers[0]
    me = supplier.wallet.pubkey()
    # A wallet that only signs and sends (solana:signAndSendTransaction), as some do: the page checks
    # each transaction before, and the coordinator confirms it after.
    page, wallet = await connected_app(web_stack, browser, "/web/app/supplier", keypair=supplier.wallet, send_only=True)
    node = str(node_pda(supplier.node_key.pubkey()))
    await expect(page.locator(f'#nodes a[href="/web/nodes/{node}"]')).to_be_visible()
    start = await io_of(web_stack, me)
    staked = (await fetch(web_stack.chain, provider_pda(me), "Provider")).staked

    await page.locator("#stake_amount").fill("50")
    await page.locator("#stake-button").click()
    await expect(page.locator("#sign-amount")).to_have_text("50 IO")
    await sign_on_screen(page, str(PROGRAM_ID))
    await expect(page.locator("#message")).to_contain_text("Stake: confirmed")
    assert await io_of(web_stack, me) == start - AMOUNT
    assert (await fetch(web_stack.chain, provider_pda(me), "Provider")).staked == staked + AMOUNT

    await page.locator("#unstake_amount").fill("50")
    await page.locator("#unstake-button").click()
    await sign_on_screen(page, str(PROGRAM_ID))
    await expect(page.locator("#message")).to_contain_text("Unstake: confirmed")
    provider = await fetch(web_stack.chain, provider_pda(me), "Provider")
    assert (provider.staked, provider.unbonding) == (staked, AMOUNT)
    assert await io_of(web_stack, me) == start - AMOUNT
    await expect(page.locator("#unbonding")).to_have_text("50 IO")

    # The unbonding passes; the page offers the withdrawal by itself.
    await expect(page.locator("#withdraw-button")).to_be_enabled(timeout=30_000)
    await page.locator("#withdraw-button").click()
    await sign_on_screen(page, str(PROGRAM_ID))
    await expect(page.locator("#message")).to_contain_text("Withdraw unbonded stake: confirmed")
    assert await io_of(web_stack, me) == start
    assert (await fetch(web_stack.chain, provider_pda(me), "Provider")).unbonding == 0
    assert [r.kind for r in wallet.requests] == ["send"] * 3
