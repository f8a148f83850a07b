"""The wallet app's client flow in a real browser against a running gpunet: a lease opened from the
page (its escrow shown before signing), a job signed by the wallet, the lease placed and its
settlements arriving live, a top-up offered before the escrow runs out, and the close with its
refund, each moving exactly the amounts the page showed (base units, read from the chain)."""

from __future__ import annotations

import re

import pytest
from playwright.async_api import expect
from solders.pubkey import Pubkey

from gpunet.amounts import IO, escrow_for
from gpunet.history import transactions_of
from gpunet.idl import PROGRAM_ID
from gpunet.pda import lease_vault_pda
from gpunet.tokens import io_account, token_balance
from tests.web.conftest import SCREENSHOTS
from tests.web.walletapp import connected_app, io_of, sign_on_screen

MAX_PRICE = 540 * IO  # the form's default, the demo's MAX_PRICE
GPUS = 2


@pytest.mark.timeout(420)
async def test_a_client_opens_a_lease_attaches_a_job_follows_it_tops_up_and_closes(web_stack, browser) -> None:
    page, wallet = await connected_app(web_stack, browser, "/web/app")
    me = wallet.keypair.pubkey()
    suppliers = [s.wallet.pubkey() for s in web_stack.demo.suppliers]
    start = await io_of(web_stack, me)
    start_suppliers = sum([await io_of(web_stack, s) for s in suppliers])

    # Ten minutes: under the warning's 10 minutes left from the start.
    await page.locator("#duration_minutes").fill("10")
    await page.locator("#quote-button").click()
    escrow = escrow_for(MAX_PRICE, GPUS, 600)
    await expect(page.locator("#quote-escrow")).to_have_text(f"{escrow // IO} IO")

    await page.locator("#open-button").click()
    await expect(page.locator("#sign-amount")).to_have_text(f"{escrow // IO} IO")
    await expect(page.locator("#sign-does")).to_contain_text("Opens lease")
    await page.screenshot(path=SCREENSHOTS / "app-sign.png", full_page=False)
    await sign_on_screen(page, str(PROGRAM_ID))
    await expect(page.locator("#message")).to_contain_text("Open a lease: confirmed")
    await expect(page.locator("#lease-address")).to_have_text(re.compile(r"^\w{32,44}$"))
    lease = await page.locator("#lease-address").inner_text()
    vault = lease_vault_pda(Pubkey.from_string(lease))
    assert await io_of(web_stack, me) == start - escrow
    assert await token_balance(web_stack.chain, vault) == escrow

    # The job, signed by the wallet over gpunet.protocol.job_message (a lease is placed once it has
    # one); then its status and logs by a signed request.
    await page.locator("#command").fill("sleep 600")
    await page.locator("#job-button").click()
    await expect(page.locator("#message")).to_contain_text("Job 1 attached")
    # Placed, live (server-sent events): the nodes appear without a reload.
    await expect(page.locator("#lease-status")).to_have_text("Active", timeout=60_000)
    await expect(page.locator("#lease-nodes li").first).to_be_visible()
    await page.locator("#status-button").click()
    await expect(page.locator("#job-status")).not_to_be_empty()
    assert [r.kind for r in wallet.requests] == ["transaction", "message", "message"]

    # Settlements arrive live; the escrow runs low (under 10 minutes left): the page warns.
    await expect(page.locator("#settlements tbody tr").first).to_be_visible(timeout=60_000)
    await expect(page.locator("#topup-warning")).to_be_visible()
    await page.screenshot(path=SCREENSHOTS / "app-client.png", full_page=False)

    before = await io_of(web_stack, me)
    await page.locator("#extra_minutes").fill("60")
    await page.locator("#topup-button").click()
    extra = escrow_for(MAX_PRICE, GPUS, 3_600)
    await expect(page.locator("#sign-amount")).to_have_text(f"{extra // IO:,} IO")
    await sign_on_screen(page, str(PROGRAM_ID))
    await expect(page.locator("#message")).to_contain_text("Top up a lease: confirmed")
    assert await io_of(web_stack, me) == before - extra
    await expect(page.locator("#topup-warning")).to_be_hidden()

    before = await io_of(web_stack, me)
    await page.locator("#close-button").click()
    await sign_on_screen(page, str(PROGRAM_ID))
    await expect(page.locator("#message")).to_contain_text("Close a lease: confirmed")
    await expect(page.locator("#refund")).to_contain_text("Refunded")
    refund = int(await page.locator("#refund").get_attribute("data-units") or "-1")
    end = await io_of(web_stack, me)
    assert refund > 0 and end == before + refund
    # Every base unit the client spent is in the lease's vault (fees, what may still be settled) or
    # was paid out: to the suppliers' wallets, and to their pools' delegators (the demo's suppliers
    # have pools: from their first epoch on, a settlement sends the delegators' part to the stake
    # vault, which rewards also move through, so it is counted from the settlements' events). None
    # appeared or vanished.
    paid = sum([await io_of(web_stack, s) for s in suppliers]) - start_suppliers
    settled = [
        e.data
        for tx in await transactions_of(web_stack.chain, Pubkey.from_string(lease))
        for e in tx.events
        if e.name == "UsageSettled"
    ]
    to_pools = sum(d.to_pool for d in settled)
    assert paid + to_pools == sum(d.payout for d in settled) > 0
    assert start - end == await token_balance(web_stack.chain, vault) + paid + to_pools
    assert len(wallet.transactions()) == 3 and all(t.message.account_keys[0] == me for t in wallet.transactions())
    assert io_account(me, web_stack.market.mint) in wallet.transactions()[0].message.account_keys

    # Usable at phone width: nothing wider than the screen.
    await page.set_viewport_size({"width": 375, "height": 800})
    assert await page.evaluate("document.documentElement.scrollWidth") <= 375
