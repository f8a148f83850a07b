"""The wallet app's attack twins, each beside its honest control, in a real browser:
- a coordinator's transaction carrying an SPL token Transfer, an unexpected writable account, an
  amount other than the form's, or a priority fee that would burn the wallet's SOL is refused in the
  page before the wallet is asked;
- a transaction the program refuses (not enough IO) shows the program's reason and changes nothing;
- a wallet that returns a tampered signature, or signs as another account, is refused before
  anything is sent.
Nothing changes on chain in any refusal: the client's IO balance is equal before and after, to the
base unit; the honest control moves exactly the escrow."""

from __future__ import annotations

import base64
import struct

import httpx
import pytest
from playwright.async_api import Page, Route, expect
from solders.compute_budget import ID as COMPUTE_BUDGET
from solders.compute_budget import set_compute_unit_price
from solders.instruction import AccountMeta, Instruction
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.signature import Signature
from solders.system_program import TransferParams as SolTransferParams
from solders.system_program import transfer as sol_transfer
from solders.transaction import Transaction
from spl.token.instructions import TransferParams, transfer

from gpunet.amounts import IO, escrow_for
from gpunet.idl import PROGRAM_ID
from gpunet.pda import config_pda
from gpunet.testbed import funded_wallet
from gpunet.tokens import TOKEN_PROGRAM_ID, io_account
from tests.web.tampering import Change, tamper_transactions
from tests.web.walletapp import connected_app, io_of, sign_on_screen

ESCROW = escrow_for(540 * IO, 2, 600)  # the form's default max price, 2 GPUs, 10 minutes
REFUSED = "Refused before asking the wallet"


async def _open(page: Page) -> None:
    await page.locator("#duration_minutes").fill("10")
    await page.locator("#open-button").click()


def _with_transfer(to: Pubkey | None) -> Change:
    """A token Transfer of 1,000 IO from the client's IO account, to `to` (None: into the lease's vault,
    an account the transaction writes anyway, so that only the instruction check can see it)."""

    def change(ixs: list[Instruction]) -> list[Instruction]:
        accounts = ixs[-1].accounts  # open_lease: client, config, lease, lease_vault, client_tokens, ...
        client, vault, client_tokens = accounts[0].pubkey, accounts[3].pubkey, accounts[4].pubkey
        params = TransferParams(TOKEN_PROGRAM_ID, client_tokens, to or vault, client, 1_000 * IO)
        return [*ixs, transfer(params)]

    return change


def _config_writable(ixs: list[Instruction]) -> list[Instruction]:
    *head, lease = ixs
    accounts = [AccountMeta(m.pubkey, m.is_signer, m.is_writable or m.pubkey == config_pda()) for m in lease.accounts]
    return [*head, Instruction(lease.program_id, lease.data, accounts)]


def _priority_fee_of(lamports_per_unit: int) -> Change:
    """The compute-unit price replaced by one of `lamports_per_unit` per unit: with the limit the
    coordinator set, a fee that burns the wallet's SOL (to the validators)."""

    def change(ixs: list[Instruction]) -> list[Instruction]:
        kept = [i for i in ixs if not (i.program_id == COMPUTE_BUDGET and bytes(i.data)[:1] == b"\x03")]
        return [set_compute_unit_price(lamports_per_unit * 1_000_000), *kept]

    return change


def _longer(ixs: list[Instruction]) -> list[Instruction]:
    # open_lease's data: discriminator 8, lease_id 8, terms (u16 u16 u8 u16 u64 i64), tolerance u32.
    *head, lease = ixs
    data = bytearray(lease.data)
    at = 8 + 8 + 2 + 2 + 1 + 2 + 8
    data[at : at + 8] = struct.pack("<q", 100 * 3_600)  # 100 hours' escrow instead of the form's 10 minutes
    return [*head, Instruction(lease.program_id, bytes(data), lease.accounts)]


@pytest.mark.timeout(300)
async def test_a_coordinators_transaction_other_than_the_form_asks_is_refused_before_the_wallet(
    web_stack, browser
) -> None:
    page, wallet = await connected_app(web_stack, browser, "/web/app")
    me = wallet.keypair.pubkey()
    start = await io_of(web_stack, me)
    thief = Keypair()
    thief_tokens = await web_stack.market.fund(thief.pubkey(), 1)
    tampers: list[tuple[Change, Pubkey | None, str]] = [
        (_with_transfer(thief_tokens), None, f"makes account {thief_tokens} writable"),
        (_with_transfer(None), None, "an instruction of the SPL token program"),
        (_config_writable, None, f"makes account {config_pda()} writable"),
        (_longer, None, "duration_seconds"),
        (_priority_fee_of(1_000), None, "above the app's limit"),
        (lambda ixs: ixs, thief.pubkey(), f"the fee payer is {thief.pubkey()}"),
    ]
    for change, payer, why in tampers:
        await tamper_transactions(page, "open_lease", change, payer)
        await _open(page)
        await expect(page.locator("#message")).to_contain_text(REFUSED)
        await expect(page.locator("#message")).to_contain_text(why)
        await expect(page.locator("#signing")).to_be_hidden()
        await page.unroute("**/web/api/tx/open_lease")
        assert wallet.requests == []  # the wallet was never asked
        assert await io_of(web_stack, me) == start
    assert await io_of(web_stack, thief.pubkey()) == 1

    # The honest control: the coordinator's own transaction is shown, signed and lands.
    await _open(page)
    await sign_on_screen(page, str(PROGRAM_ID))
    await expect(page.locator("#message")).to_contain_text("Open a lease: confirmed")
    assert len(wallet.requests) == 1
    assert await io_of(web_stack, me) == start - ESCROW

    # A job the coordinator prepares other than the form's is not signed; the form's own job is.
    async def other_job(route: Route) -> None:
        response = await route.fetch()
        body = await response.json()
        message = bytes.fromhex(body["message_hex"]).replace(b'"sleep"', b'"curl"')
        await route.fulfill(response=response, json={**body, "message_hex": message.hex()})

    await page.route("**/web/api/job", other_job)
    await page.locator("#command").fill("sleep 60")
    await page.locator("#job-button").click()
    await expect(page.locator("#message")).to_contain_text("not the form's: not signed")
    assert len(wallet.requests) == 1
    await page.unroute("**/web/api/job")
    await page.locator("#job-button").click()
    await expect(page.locator("#message")).to_contain_text("Job 1 attached")
    assert [r.kind for r in wallet.requests] == ["transaction", "message"]


@pytest.mark.timeout(300)
async def test_a_wallet_that_signs_wrongly_is_refused_and_a_refused_transaction_changes_nothing(
    web_stack, browser
) -> None:
    # Not enough IO: the program (the token transfer of the escrow) refuses it; nothing changes.
    poor, poor_wallet = await connected_app(web_stack, browser, "/web/app", io=ESCROW - 1)
    await _open(poor)
    await expect(poor.locator("#message")).to_contain_text("the program refused it")
    await expect(poor.locator("#message")).to_contain_text("insufficient funds")
    assert poor_wallet.requests == []
    assert await io_of(web_stack, poor_wallet.keypair.pubkey()) == ESCROW - 1

    # A tampered signature, then a signature by another account: refused before anything is sent.
    for mode, why in (("tampered-signature", "signature is not"), ("wrong-account", "signature is not")):
        page, wallet = await connected_app(web_stack, browser, "/web/app", mode=mode)  # type: ignore[arg-type]
        start = await io_of(web_stack, wallet.keypair.pubkey())
        await _open(page)
        await sign_on_screen(page, str(PROGRAM_ID))
        await expect(page.locator("#message")).to_contain_text(why)
        assert len(wallet.requests) == 1  # asked once, refused after
        assert await io_of(web_stack, wallet.keypair.pubkey()) == start
        assert io_account(wallet.keypair.pubkey(), web_stack.market.mint)

    # The honest control: the same wallet key, honest, opens the same lease.
    wallet.mode = "honest"
    await _open(page)
    await sign_on_screen(page, str(PROGRAM_ID))
    await expect(page.locator("#message")).to_contain_text("Open a lease: confirmed")
    assert await io_of(web_stack, wallet.keypair.pubkey()) == start - ESCROW

    # The person switches accounts in the wallet (standard:events): the page follows, and the next
    # lease is the new account's, paid from its IO; the first account's balance stays as it was.
    first = wallet.keypair.pubkey()
    other = await funded_wallet(web_stack.chain, 10)
    await web_stack.market.fund(other.pubkey(), ESCROW)
    await wallet.switch(page, other)
    await expect(page.locator("#account")).to_have_text(str(other.pubkey()))
    await _open(page)
    await sign_on_screen(page, str(PROGRAM_ID))
    await expect(page.locator("#message")).to_contain_text("Open a lease: confirmed")
    assert await io_of(web_stack, other.pubkey()) == 0
    assert await io_of(web_stack, first) == start - ESCROW
    assert wallet.transactions()[-1].message.account_keys[0] == other.pubkey()


@pytest.mark.timeout(300)
async def test_the_relay_sends_only_transactions_signed_by_the_accounts_they_name(web_stack) -> None:
    """Behind the page, /web/api/submit refuses a transaction whose signature does not verify (nothing
    is sent); the same transaction honestly signed is relayed and confirmed."""
    client = await funded_wallet(web_stack.chain, 10)
    await web_stack.market.fund(client.pubkey(), ESCROW)
    form = {
        "wallet": str(client.pubkey()),
        "lease_id": "7",
        "gpu_model": "1",
        "min_vram_gb": "0",
        "gpu_count": "2",
        "region": "0",
        "max_price_per_gpu_hour": str(540 * IO),
        "duration_seconds": "600",
    }
    async with httpx.AsyncClient(base_url=web_stack.coordinator.api_url, timeout=60) as http:
        for bad, why in (
            ({**form, "gpu_count": "0"}, "gpu_count: an integer from 1 to 255"),
            ({**form, "wallet": "x"}, "wallet: not a base58 address"),
        ):
            refused = await http.post("/web/api/tx/open_lease", json=bad)
            assert refused.status_code == 400 and why in refused.json()["error"]
        refused = await http.post("/web/api/tx/drain", json=form)
        assert refused.status_code == 400 and "no action 'drain'" in refused.json()["error"]
        for path in ("/web/api/leases/x", "/web/api/leases/x/events", "/web/api/wallet/x", "/web/api/stake/x"):
            refused = await http.get(path)
            assert refused.status_code == 400 and "not a base58 address" in refused.json()["error"], path
        built = (await http.post("/web/api/tx/open_lease", json=form)).json()
        assert (built["escrow"], built["fee_payer"]) == (str(ESCROW), str(client.pubkey()))
        message = Transaction.from_bytes(base64.b64decode(built["transaction"])).message
        signature = bytearray(bytes(client.sign_message(bytes(message))))
        signature[0] ^= 1
        tampered = Transaction.populate(message, [Signature.from_bytes(bytes(signature))])
        refused = await http.post("/web/api/submit", json={"transaction": base64.b64encode(bytes(tampered)).decode()})
        assert refused.status_code == 400 and "do not verify" in refused.json()["error"]
        # A transaction signed as it should be, but not gpunet's (a SOL transfer): not relayed.
        blockhash = (await web_stack.chain.get_latest_blockhash()).value.blockhash
        pay = Transaction.new_signed_with_payer(
            [sol_transfer(SolTransferParams(from_pubkey=client.pubkey(), to_pubkey=Keypair().pubkey(), lamports=1))],
            client.pubkey(),
            [client],
            blockhash,
        )
        sol_before = (await web_stack.chain.get_balance(client.pubkey())).value
        refused = await http.post("/web/api/submit", json={"transaction": base64.b64encode(bytes(pay)).decode()})
        assert refused.status_code == 400 and "only gpunet's transactions" in refused.json()["error"]
        assert (await web_stack.chain.get_balance(client.pubkey())).value == sol_before
        assert await io_of(web_stack, client.pubkey()) == ESCROW

        honest = Transaction.populate(message, [client.sign_message(bytes(message))])
        sent = await http.post("/web/api/submit", json={"transaction": base64.b64encode(bytes(honest)).decode()})
        assert sent.status_code == 200 and sent.json()["signature"] == str(honest.signatures[0])
    assert await io_of(web_stack, client.pubkey()) == 0
