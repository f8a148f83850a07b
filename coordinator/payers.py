"""Who pays the fee of each coordinator transaction. The attester signs every one (the program checks
that key), but the fee payer is a writable account of every transaction it pays for: one payer for
all of them would be a hot account, its writes capped per block like any other's. So the fees are
spread over a pool of keys, round robin, each a keypair file the operator funds with SOL
(`gpunet coordinator fee-payers` lists them with their balances). A payer found holding less than
the minimum is topped up from the attester (one system transfer, which the attester pays: it
writes the attester once per top-up, not once per transaction), as long as the attester keeps its
own reserve; otherwise, or with top-ups off, the payer is skipped with a warning until it is funded
again. With no pool, or none funded, the attester pays, as a single coordinator always did.

This is the one place that decides a transaction's fee payer: the attester's transactions
(`coordinator.attester`) and the settlements (`coordinator.settlement`) both ask `signing()`."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

from solana.rpc.async_api import AsyncClient
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.system_program import TransferParams, transfer

from gpunet.client import TransactionExpired, TransactionFailed, send_and_confirm
from gpunet.keys import create_keypair_file, load_keypair
from gpunet.logs import get_logger

__all__ = ["FeePayers", "balances", "fee_payer_keys"]

log = get_logger("gpunet.coordinator.payers")

BALANCE_TTL_SECONDS = 10.0  # a payer's balance is read again after this long (fees drain it slowly)


def fee_payer_keys(directory: Path, count: int) -> list[Keypair]:
    """The pool's keys: fee-payer-0.json .. fee-payer-{count-1}.json in `directory`, each made (mode
    0600) when missing, so an operator can list their addresses and fund them before the coordinator
    uses them."""
    directory = directory.expanduser()
    keys = []
    for i in range(count):
        path = directory / f"fee-payer-{i}.json"
        if not path.exists():
            directory.mkdir(parents=True, exist_ok=True)
            create_keypair_file(path, Keypair())
        keys.append(load_keypair(path))
    return keys


async def balances(client: AsyncClient, keys: list[Keypair]) -> list[tuple[Pubkey, int]]:
    """Each key and its balance in lamports, read now."""
    return [(k.pubkey(), (await client.get_balance(k.pubkey())).value) for k in keys]


class FeePayers:
    def __init__(
        self,
        client: AsyncClient,
        attester: Keypair,
        pool: list[Keypair] | None = None,
        *,
        min_lamports: int = 10_000_000,
        top_up_lamports: int = 0,
        attester_reserve_lamports: int = 0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client, self.attester, self.pool = client, attester, list(pool or [])
        self.min_lamports, self.clock = min_lamports, clock
        # A payer under the minimum gets this much from the attester (0: never), if the attester then
        # still holds its reserve (what it needs to keep signing and paying its own transactions).
        self.top_up_lamports, self.attester_reserve_lamports = top_up_lamports, attester_reserve_lamports
        self._topping: dict[Pubkey, asyncio.Lock] = {}  # one top-up of a payer at a time
        self._next = 0
        self._balances: dict[Pubkey, tuple[float, int]] = {}  # payer -> (read at, lamports)
        self._short: set[Pubkey] = set()  # payers found under the minimum (warned once until funded)

    @property
    def sizing_payer(self) -> Pubkey:
        """A payer to size a transaction with: another key than the attester whenever the pool may pay
        (its signature makes the transaction 96 bytes longer)."""
        return self.pool[0].pubkey() if self.pool else self.attester.pubkey()

    async def signing(self) -> tuple[Keypair, list[Keypair]]:
        """The next funded payer of the pool and the co-signers the transaction then needs (the
        attester); the attester alone when there is no pool or no payer in it holds the minimum."""
        for _ in range(len(self.pool)):
            payer = self.pool[self._next % len(self.pool)]
            self._next += 1
            if await self._funded(payer.pubkey()):
                return payer, [self.attester]
        if self.pool:
            log.warning(  # none of the pool holds the minimum: the attester pays
                "coordinator.fee_payers_empty",
                payers=len(self.pool),
                min_lamports=self.min_lamports,
                attester=self.attester.pubkey(),
            )
        return self.attester, []

    async def balances(self) -> list[tuple[Pubkey, int]]:
        return await balances(self.client, self.pool)

    async def _funded(self, payer: Pubkey) -> bool:
        now = self.clock()
        read_at, lamports = self._balances.get(payer, (float("-inf"), 0))
        if now - read_at > BALANCE_TTL_SECONDS:
            lamports = (await self.client.get_balance(payer)).value
            self._balances[payer] = (now, lamports)
        if lamports < self.min_lamports and self.top_up_lamports:
            lamports = await self._top_up(payer)
        if lamports >= self.min_lamports:
            if payer in self._short:
                self._short.discard(payer)
                log.info("coordinator.fee_payer_funded", payer=payer, lamports=lamports)  # paying again
            return True
        if payer not in self._short:
            self._short.add(payer)
            log.warning(  # fund it (`gpunet coordinator fee-payers` lists the pool)
                "coordinator.fee_payer_skipped", payer=payer, lamports=lamports, min_lamports=self.min_lamports
            )
        return False

    async def _top_up(self, payer: Pubkey) -> int:
        """Moves `top_up_lamports` from the attester to `payer` when the attester can spare it; the
        payer's balance after (as before, when it could not)."""
        async with self._topping.setdefault(payer, asyncio.Lock()):
            lamports = self._balances[payer][1]
            if lamports >= self.min_lamports:
                return lamports  # topped up by a concurrent caller while this one waited
            attester = self.attester.pubkey()
            spare = (await self.client.get_balance(attester)).value - self.attester_reserve_lamports
            if spare < self.top_up_lamports:
                return lamports  # the attester keeps its reserve: the payer is skipped (warned once)
            move = transfer(TransferParams(from_pubkey=attester, to_pubkey=payer, lamports=self.top_up_lamports))
            try:
                tx = await send_and_confirm(self.client, self.attester, [move])
            except (TransactionFailed, TransactionExpired) as e:
                log.warning("coordinator.fee_payer_top_up_failed", payer=payer, error=str(e))
                return lamports
            lamports += self.top_up_lamports
            self._balances[payer] = (self.clock(), lamports)
            log.info("coordinator.fee_payer_topped_up", payer=payer, lamports=lamports, tx=tx)
            return lamports
