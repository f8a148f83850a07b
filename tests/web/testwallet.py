"""The browser tests' wallet (tests/web/wallet.js, a Wallet Standard wallet injected into the page) and
its key, held here: each signature the page asks for is made in the test process with a real solders
Keypair, and recorded, so a test can assert what the wallet was (or was never) asked to sign.

A `chain` given makes it a wallet that only signs and sends (solana:signAndSendTransaction: it sends
through that client), as some wallets are; without, it gives the page the signed transaction.

Modes: "honest" signs as the account it connected; "tampered-signature" returns a signature with one
bit flipped; "wrong-account" signs with another keypair than the account it connected."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from playwright.async_api import Page
from solana.rpc.async_api import AsyncClient
from solders.keypair import Keypair
from solders.signature import Signature
from solders.transaction import Transaction

__all__ = ["SignRequest", "TestWallet"]

WALLET_JS = Path(__file__).with_name("wallet.js")
Mode = Literal["honest", "tampered-signature", "wrong-account"]


@dataclass(frozen=True)
class SignRequest:
    kind: Literal["transaction", "message", "send"]
    data: bytes  # the transaction or message as the page handed it to the wallet


@dataclass
class TestWallet:
    __test__ = False  # not a pytest test class

    keypair: Keypair
    mode: Mode = "honest"
    requests: list[SignRequest] = field(default_factory=list)
    other: Keypair = field(default_factory=Keypair)  # the wrong account's key
    chain: AsyncClient | None = None  # set: the wallet sends what it signs itself

    async def install(self, page: Page) -> None:
        """Makes the wallet register in `page` (and every page it navigates to)."""
        await page.expose_function("gpunetWalletSign", self._sign)
        await page.add_init_script(f"const CONFIG = {json.dumps(self._config())};\n{WALLET_JS.read_text()}")

    async def switch(self, page: Page, keypair: Keypair) -> None:
        """The person switches the wallet to `keypair`'s account (the wallet emits standard:events' change)."""
        self.keypair = keypair
        await page.evaluate("config => window.gpunetTestWalletSwitch(config)", self._config())

    def _config(self) -> dict[str, object]:
        return {
            "address": str(self.keypair.pubkey()),
            "publicKey": list(bytes(self.keypair.pubkey())),
            "sendOnly": self.chain is not None,
        }

    def _signature(self, data: bytes) -> bytes:
        signer = self.other if self.mode == "wrong-account" else self.keypair
        signature = bytearray(bytes(signer.sign_message(data)))
        if self.mode == "tampered-signature":
            signature[0] ^= 1
        return bytes(signature)

    async def _sign(self, kind: Literal["transaction", "message", "send"], data: list[int]) -> list[int]:
        raw = bytes(data)
        self.requests.append(SignRequest(kind, raw))
        if kind == "message":
            return list(self._signature(raw))
        tx = Transaction.from_bytes(raw)
        signed = Transaction.populate(
            tx.message, [Signature.from_bytes(self._signature(bytes(tx.message))), *tx.signatures[1:]]
        )
        if kind == "send":
            assert self.chain is not None
            await self.chain.send_raw_transaction(bytes(signed))
            return list(bytes(signed.signatures[0]))
        return list(bytes(signed))

    def transactions(self) -> list[Transaction]:
        return [Transaction.from_bytes(r.data) for r in self.requests if r.kind != "message"]
