"""What the wallet app's browser tests share: a funded wallet's page opened and connected, the IO
balances they measure (integer base units, read from the chain), and the signing screen's steps."""

from __future__ import annotations

from playwright.async_api import Browser, Page, expect
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from gpunet.amounts import IO
from gpunet.testbed import funded_wallet
from gpunet.tokens import io_balance
from tests.web.conftest import WebStack
from tests.web.testwallet import Mode, TestWallet

__all__ = ["connected_app", "io_of", "sign_on_screen"]

TIMEOUT_MS = 30_000
expect.set_options(timeout=TIMEOUT_MS)  # a transaction is built (simulated) and confirmed in a few seconds


async def io_of(stack: WebStack, owner: Pubkey) -> int:
    """The owner's IO balance in base units, from the chain."""
    return await io_balance(stack.chain, owner, stack.market.mint)


async def connected_app(
    stack: WebStack,
    browser: Browser,
    path: str,
    *,
    io: int = 5_000 * IO,
    mode: Mode = "honest",
    keypair: Keypair | None = None,
    send_only: bool = False,
) -> tuple[Page, TestWallet]:
    """A page of the wallet app at `path` with the test wallet (a new keypair with 10 SOL and `io` IO,
    unless given) connected; `send_only`: a wallet that only signs and sends."""
    if keypair is None:
        keypair = await funded_wallet(stack.chain, 10)
        await stack.market.fund(keypair.pubkey(), io)
    wallet = TestWallet(keypair, mode, chain=stack.chain if send_only else None)
    page = await browser.new_page(viewport={"width": 1280, "height": 800})
    page.set_default_timeout(TIMEOUT_MS)
    page.on("console", lambda m: print("console:", m.text))
    page.on("pageerror", lambda e: print("pageerror:", e))
    page.on("response", lambda r: r.status >= 400 and print("http:", r.status, r.url))
    await wallet.install(page)
    await page.goto(f"{stack.coordinator.api_url}{path}")
    await page.get_by_role("button", name="Connect gpunet test wallet").click()
    await expect(page.locator("#account")).to_have_text(str(keypair.pubkey()))
    return page, wallet


async def sign_on_screen(page: Page, program: str) -> None:
    """The signing screen shows gpunet's program ID; the person asks the wallet to sign."""
    await expect(page.locator("#signing")).to_be_visible()
    await expect(page.locator("#sign-program")).to_have_text(program)
    await page.locator("#sign-ok").click()
