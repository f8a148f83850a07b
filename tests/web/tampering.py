"""A coordinator that tampers with the transactions it builds for the wallet app, played by the test:
page.route intercepts /web/api/tx/... and answers the coordinator's own transaction rebuilt with
solders (same fee payer and blockhash) after `change` edits its instructions."""

from __future__ import annotations

import base64
from collections.abc import Callable

from playwright.async_api import Page, Route
from solders.instruction import AccountMeta, Instruction
from solders.message import Message
from solders.pubkey import Pubkey
from solders.transaction import Transaction

__all__ = ["Change", "instructions_of", "tamper_transactions"]

Change = Callable[[list[Instruction]], list[Instruction]]


def _writable(message: Message, i: int) -> bool:
    h, n = message.header, len(message.account_keys)
    signers = h.num_required_signatures
    return i < signers - h.num_readonly_signed_accounts or signers <= i < n - h.num_readonly_unsigned_accounts


def instructions_of(message: Message) -> list[Instruction]:
    """The message's instructions, decompiled (each account's signer and writable flags as the message has them)."""
    keys = message.account_keys
    return [
        Instruction(
            keys[c.program_id_index],
            bytes(c.data),
            [AccountMeta(keys[i], message.is_signer(i), _writable(message, i)) for i in bytes(c.accounts)],
        )
        for c in message.instructions
    ]


async def tamper_transactions(page: Page, action: str, change: Change, payer: Pubkey | None = None) -> None:
    """From now on, the page gets /web/api/tx/`action`'s transaction changed by `change` (and paid by
    `payer`, when given)."""

    async def handle(route: Route) -> None:
        response = await route.fetch()
        body = await response.json()
        if "transaction" in body:
            message = Transaction.from_bytes(base64.b64decode(body["transaction"])).message
            changed = Message.new_with_blockhash(
                change(instructions_of(message)), payer or message.account_keys[0], message.recent_blockhash
            )
            body["transaction"] = base64.b64encode(bytes(Transaction.new_unsigned(changed))).decode()
        await route.fulfill(response=response, json=body)

    await page.route(f"**/web/api/tx/{action}", handle)
