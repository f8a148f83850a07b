"""The wallet app's token-holder page (/web/app/stake) in a real browser against a running gpunet whose
coordinator credits every ended epoch's rewards (12 s epochs; the unbonding is a few seconds here, as
the admin can set it): a holder delegates to a pool, collects what the coordinator's claim credited,
undelegates and withdraws, each step moving exactly what the chain's accounts say (base units).
Beside each honest step, its tampered twin: a coordinator's delegation to another provider's pool,
of another amount, with an extra instruction or signer, a collect or withdrawal pointed at another
wallet's position or another token account, is refused in the page before the wallet is asked, and
nothing changes on chain; bad input in the form is refused with a clear message and nothing is built."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any

import httpx
import pytest
from playwright.async_api import Locator, Page, expect
from solders.instruction import AccountMeta, Instruction
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from spl.token.instructions import TransferParams, transfer

from gpunet import instructions as ix
from gpunet import staking as sx
from gpunet.accounts import fetch
from gpunet.amounts import IO, format_io
from gpunet.idl import PROGRAM_ID, idl_json
from gpunet.pda import cohort_pda, delegation_pda, pool_pda, provider_pda, reward_index_pda, stake_vault_pda
from gpunet.positions import reward_of, share_value, shares_for
from gpunet.tokens import TOKEN_PROGRAM_ID, io_account, token_balance
from tests.web.conftest import WebStack
from tests.web.tampering import Change, tamper_transactions
from tests.web.testwallet import TestWallet
from tests.web.walletapp import connected_app, io_of, sign_on_screen

AMOUNT = 20 * IO
UNBONDING_SECONDS = 3
REFUSED = "Refused before asking the wallet"
# The longest a step waits for the chain: an epoch to end (12 s), its root posted and, past its 2 s
# timelock, claimed by the coordinator (every 3 s), with room for a slow CI box.
EPOCH_WAIT_MS = 60_000


async def _short_unbonding(stack: WebStack) -> None:
    market = stack.market
    params = replace(market.params, unbonding_seconds=UNBONDING_SECONDS)
    await market.send(market.admin, [ix.update_config(market.admin.pubkey(), params)])


def _position(page: Page, provider: Pubkey, nonce: int) -> Locator:
    return page.locator(f'#positions tr[data-position="{provider}/{nonce}"]')


async def _delegate(page: Page, pool: str, amount: str) -> None:
    await page.locator("#delegate_pool").fill(pool)
    await page.locator("#delegate_amount").fill(amount)
    await page.locator("#delegate-button").click()


async def _refused(page: Page, wallet: TestWallet, says: str, asked: int = 0) -> str:
    """The page refused with `says` and never showed the signing screen: the wallet, asked `asked`
    times before, was not asked again."""
    message = page.locator("#message")
    await expect(message).to_contain_text(REFUSED)
    await expect(message).to_contain_text(says)
    await expect(page.locator("#signing")).to_be_hidden()
    assert len(wallet.requests) == asked
    return await message.inner_text()


def _account_at(instruction: str, account: str) -> int:
    """Where the IDL puts `account` among `instruction`'s accounts."""
    spec = next(i for i in json.loads(idl_json())["instructions"] if i["name"] == instruction)
    return [a["name"] for a in spec["accounts"]].index(account)


def _swap(instruction: str, account: str, to: Pubkey) -> Change:
    """The gpunet instruction (the transaction's last) with its `account` replaced by `to`."""
    at = _account_at(instruction, account)

    def change(ixs: list[Instruction]) -> list[Instruction]:
        *head, last = ixs
        metas = list(last.accounts)
        metas[at] = AccountMeta(to, metas[at].is_signer, metas[at].is_writable)
        return [*head, Instruction(last.program_id, last.data, metas)]

    return change


def _instead(instruction: Instruction) -> Change:
    return lambda ixs: [*ixs[:-1], instruction]


def _with_signer(signer: Pubkey) -> Change:
    """The gpunet instruction asks `signer`'s signature too."""

    def change(ixs: list[Instruction]) -> list[Instruction]:
        *head, last = ixs
        return [*head, Instruction(last.program_id, last.data, [*last.accounts, AccountMeta(signer, True, False)])]

    return change


async def _attempt(page: Page, action: str, change: Change, click: Locator) -> None:
    await tamper_transactions(page, action, change)
    await click.click()


async def _paid(stack: WebStack, provider: Pubkey, before: Any, after: Any) -> int:
    """What collect_rewards paid the position (`before`, `after`: its Delegation around the collect):
    its shares' part of the pool's reward per share from the epoch it had collected through to the
    one it collected through now, from the accounts, as the program computes it."""
    pool = await fetch(stack.chain, pool_pda(provider), "Pool")
    if before.reward_acc_known:
        start = before.reward_acc
    elif before.reward_epoch <= pool.opened_epoch:
        start = 0
    else:
        start = (await fetch(stack.chain, reward_index_pda(provider, before.reward_epoch), "RewardIndex")).acc
    return reward_of(before.shares, after.reward_acc - start)


@pytest.mark.timeout(300)
async def test_a_holder_delegates_collects_undelegates_and_withdraws_from_the_page(web_stack, browser) -> None:
    await _short_unbonding(web_stack)
    chain = web_stack.chain
    provider = provider_pda(web_stack.demo.suppliers[0].wallet.pubkey())
    # The demo's token holder: another wallet, with a position in the same pool.
    theirs = delegation_pda(provider, web_stack.demo.holder.wallet.pubkey(), 0)
    page, wallet = await connected_app(web_stack, browser, "/web/app/stake", io=100 * IO)
    me = wallet.keypair.pubkey()
    thief_tokens = await web_stack.market.fund(Keypair().pubkey(), 1)
    message = page.locator("#message")
    start = await io_of(web_stack, me)

    # The pool as the chain has it: its supplier's own stake, its commission, its explorer page.
    backing = await fetch(chain, provider, "Provider")
    pool_row = page.locator(f'#pools tr[data-pool="{provider}"]')
    await expect(pool_row).to_contain_text(format_io(backing.staked))
    await expect(pool_row.locator(".commission")).to_have_text("10 %")
    await expect(pool_row.get_by_role("link")).to_have_attribute("href", f"/web/providers/{provider}")
    await pool_row.get_by_role("button").click()  # chooses it for the form
    await expect(page.locator("#delegate_pool")).to_have_value(str(provider))

    await page.locator("#delegate_amount").fill("20")
    await page.locator("#delegate-button").click()
    await expect(page.locator("#sign-amount")).to_have_text("20 IO")
    await sign_on_screen(page, str(PROGRAM_ID))
    await expect(message).to_contain_text("Delegate: confirmed")
    address = delegation_pda(provider, me, 0)
    delegated = await fetch(chain, address, "Delegation")
    after = await fetch(chain, provider, "Provider")
    assert await io_of(web_stack, me) == start - AMOUNT
    assert delegated.shares == shares_for(backing, AMOUNT)
    assert (after.delegated, after.delegated_shares) == (
        backing.delegated + AMOUNT,
        backing.delegated_shares + delegated.shares,
    )
    mine = _position(page, provider, 0)
    await expect(mine).to_have_attribute("data-state", "active")
    await expect(mine.locator(".value")).to_have_text(format_io(AMOUNT))
    await expect(mine.locator(".state")).to_have_text(f"active (earns from epoch {delegated.since})")

    # Its first epoch ends and the coordinator's claim credits it: the page offers the collect. A
    # collect pointed at the demo holder's position, or paying another token account, is refused.
    collect = mine.locator("button", has_text="Collect")
    await expect(collect).to_be_visible(timeout=EPOCH_WAIT_MS)
    for account, to in (("delegation", theirs), ("delegator_tokens", thief_tokens)):
        await _attempt(page, "collect_rewards", _swap("collect_rewards", account, to), collect)
        await _refused(page, wallet, f"makes account {to} writable", asked=1)
        await page.unroute("**/web/api/tx/collect_rewards")
    assert await io_of(web_stack, me) == start - AMOUNT
    assert await fetch(chain, address, "Delegation") == delegated
    await collect.click()
    await sign_on_screen(page, str(PROGRAM_ID))
    await expect(message).to_contain_text("Collect rewards: confirmed")
    collected = await fetch(chain, address, "Delegation")
    paid = await _paid(web_stack, provider, delegated, collected)
    assert paid > 0 and collected.reward_epoch >= delegated.since
    assert await io_of(web_stack, me) == start - AMOUNT + paid

    # It leaves: its stake moves into this epoch's cohort, worth what it was delegated.
    await mine.locator("button", has_text="Undelegate").click()
    await sign_on_screen(page, str(PROGRAM_ID))
    await expect(message).to_contain_text("Undelegate: confirmed")
    left = await fetch(chain, address, "Delegation")
    cohort = await fetch(chain, cohort_pda(provider, left.exit_epoch), "Cohort")
    assert share_value(left.cohort_shares, cohort.shares, cohort.stake) == AMOUNT
    assert await io_of(web_stack, me) == start - AMOUNT + paid
    await expect(mine).to_have_attribute("data-state", "unbonding")
    await expect(mine.locator(".state")).to_contain_text("unbonding until")

    # The unbonding ends: the page offers the withdrawal by itself. A withdrawal pointed at the demo
    # holder's position, or paying another token account, is refused; the honest one pays it back.
    withdraw = mine.locator("button", has_text="Withdraw")
    await expect(withdraw).to_be_visible(timeout=EPOCH_WAIT_MS)
    for account, to in (("delegation", theirs), ("delegator_tokens", thief_tokens)):
        await _attempt(page, "withdraw_delegation", _swap("withdraw_delegation", account, to), withdraw)
        await _refused(page, wallet, f"makes account {to} writable", asked=3)
        await page.unroute("**/web/api/tx/withdraw_delegation")
    assert await io_of(web_stack, me) == start - AMOUNT + paid
    assert await fetch(chain, address, "Delegation") == left
    await withdraw.click()
    await sign_on_screen(page, str(PROGRAM_ID))
    await expect(message).to_contain_text("Withdraw a position: confirmed")
    assert await io_of(web_stack, me) == start + paid
    # It earned through its exit epoch, later than it collected through: it stays open to collect that.
    assert (await fetch(chain, address, "Delegation")).cohort_shares == 0
    await expect(mine).to_have_attribute("data-state", "withdrawn")
    assert await token_balance(chain, thief_tokens) == 1
    assert [r.kind for r in wallet.requests] == ["transaction"] * 4


@pytest.mark.timeout(300)
async def test_a_delegation_other_than_the_form_or_bad_input_is_refused_before_the_wallet(web_stack, browser) -> None:
    ada, bob = (provider_pda(s.wallet.pubkey()) for s in web_stack.demo.suppliers[:2])
    page, wallet = await connected_app(web_stack, browser, "/web/app/stake", io=100 * IO)
    me = wallet.keypair.pubkey()
    tokens = io_account(me, web_stack.market.mint)
    thief = Keypair()
    thief_tokens = await web_stack.market.fund(thief.pubkey(), 1)
    built: list[str] = []
    page.on("request", lambda r: built.append(r.url) if "/web/api/tx/" in r.url else None)
    await expect(page.locator(f'#pools tr[data-pool="{ada}"]')).to_be_visible()
    start = await io_of(web_stack, me)

    # Bad input: said in the form's words, nothing built, the wallet never asked.
    for pool, amount, says in (
        (str(ada), "ten", "Delegate: an amount of IO"),
        (str(ada), "0", "Delegate: a positive amount"),
        (str(ada), "100.000001", "is more than your wallet holds (100 IO)"),
        ("not-a-pool", "1", "Pool: no open pool of provider not-a-pool"),
        ("", "1", "Pool: choose one from the list"),
    ):
        await _delegate(page, pool, amount)
        await expect(page.locator("#message[role=alert]")).to_contain_text(says)
        await expect(page.locator("#signing")).to_be_hidden()
    assert built == [] and wallet.requests == []

    # The coordinator's delegation to another provider's pool, of another amount, with a token
    # transfer riding along or another signer: refused; nothing moves.
    other_pool = {str(a) for a in (bob, pool_pda(bob), stake_vault_pda(bob), delegation_pda(bob, me, 0))}
    steal = transfer(TransferParams(TOKEN_PROGRAM_ID, tokens, thief_tokens, me, AMOUNT))
    tampers: list[tuple[Change, str]] = [
        (_instead(sx.delegate(me, tokens, bob, 0, AMOUNT)), "writable, which this action does not need"),
        (_instead(sx.delegate(me, tokens, ada, 0, 10 * AMOUNT)), f'delegate\'s amount is "{10 * AMOUNT}"'),
        (lambda ixs: [*ixs, steal], f"makes account {thief_tokens} writable"),
        (_with_signer(thief.pubkey()), "it asks 2 signers"),
    ]
    for n, (change, says) in enumerate(tampers):
        await page.locator("#delegate_pool").fill(str(ada))
        await page.locator("#delegate_amount").fill("20")
        await _attempt(page, "delegate", change, page.locator("#delegate-button"))
        text = await _refused(page, wallet, says)
        if n == 0:  # the account it names is one of the other pool's
            named = re.search(r"account (\w+) writable", text)
            assert named is not None and named.group(1) in other_pool
        await page.unroute("**/web/api/tx/delegate")
    assert len(built) == len(tampers)
    assert await io_of(web_stack, me) == start and await io_of(web_stack, thief.pubkey()) == 1
    assert (await web_stack.chain.get_account_info(delegation_pda(ada, me, 0))).value is None

    # The honest control: the form's delegation is shown, signed and lands.
    await _delegate(page, str(ada), "20")
    await expect(page.locator("#sign-amount")).to_have_text("20 IO")
    await sign_on_screen(page, str(PROGRAM_ID))
    await expect(page.locator("#message")).to_contain_text("Delegate: confirmed")
    assert await io_of(web_stack, me) == start - AMOUNT
    assert (await fetch(web_stack.chain, delegation_pda(ada, me, 0), "Delegation")).provider == ada
    await expect(_position(page, ada, 0)).to_have_attribute("data-state", "active")
    assert len(wallet.requests) == 1

    # Behind the page, the coordinator builds only what the wallet's own positions allow.
    async with httpx.AsyncClient(base_url=web_stack.coordinator.api_url, timeout=60) as http:
        for action, form, says in (
            ("delegate", {"provider": str(thief.pubkey()), "nonce": "1", "amount": "1"}, "not a provider with an open"),
            ("delegate", {"provider": str(ada), "nonce": "0", "amount": "1"}, "you hold position 0 in this pool"),
            ("collect_rewards", {"provider": str(ada), "nonce": "7"}, "you hold no position 7"),
            ("withdraw_delegation", {"provider": str(ada), "nonce": "0"}, "has no unbonded stake"),
            ("undelegate", {"provider": str(ada), "nonce": "0", "epoch": "0"}, "not 0: undelegate again"),
        ):
            refused = await http.post(f"/web/api/tx/{action}", json={"wallet": str(me), **form})
            assert refused.status_code == 400 and says in refused.json()["error"], (action, refused.text)
