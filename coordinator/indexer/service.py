"""The indexer's loop: a live logsSubscribe that only wakes a backfill, and the backfill that
does all the writing.

Why the subscription never writes: a logsSubscribe notification carries a signature and
logs but no slot, no block time and no ordering guarantee across reconnects, and a dropped
socket loses notifications silently. Fetching "every signature since the cursor, oldest
first" (getSignaturesForAddress until the cursor + getTransaction) gives the same rows
whether it runs after a notification, after a reconnect, at start-up or after a crash, so
there is one path to get right, and it is the one that cannot leave a gap. The poll
(`poll_seconds`) covers a subscription that is down or silently stalled.
"""

from __future__ import annotations

import asyncio
import random
import warnings
from collections import deque
from typing import Any

import asyncpg
from solana.rpc.commitment import Commitment
from solders.rpc.config import RpcTransactionLogsFilterMentions

from coordinator.db import chain as ledger
from coordinator.indexer.decode import DecodedTransaction, decode_transaction
from coordinator.indexer.rpc import ChainRpc, RpcError
from coordinator.settings import Settings
from gpunet.logs import get_logger

with warnings.catch_warnings():
    # solana-py's websocket client is built on websockets.legacy, which warns on import
    # (docs/architecture.md, the Python chain stack).
    warnings.filterwarnings("ignore", message="websockets.legacy is deprecated", category=DeprecationWarning)
    from solana.rpc.websocket_api import connect

__all__ = ["Backoff", "ChainMismatch", "Indexer"]

log = get_logger("gpunet.indexer")

_PREFETCH = 3  # batches fetched ahead of the one being written


class ChainMismatch(Exception):
    """The node serves another chain than the one this ledger indexes (another genesis hash)."""


class Backoff:
    """Exponential backoff with full jitter, reset after a success."""

    def __init__(self, first: float = 0.2, cap: float = 10.0) -> None:
        self.first, self.cap, self.attempt = first, cap, 0

    def next_delay(self) -> float:
        ceiling = min(self.cap, self.first * 2**self.attempt)
        self.attempt += 1
        return random.uniform(ceiling / 2, ceiling)

    def reset(self) -> None:
        self.attempt = 0


class Indexer:
    def __init__(self, settings: Settings, pool: asyncpg.Pool, rpc: ChainRpc | None = None) -> None:
        self.settings = settings
        self.pool = pool
        self.rpc = rpc or ChainRpc(settings.rpc_url, settings.commitment)
        self.program = settings.program
        self._wake = asyncio.Event()

    async def run(self) -> None:
        """Indexes until cancelled."""
        subscription = asyncio.create_task(self._subscribe(), name="logs-subscription")
        backoff = Backoff()
        try:
            while True:
                try:
                    await self.backfill()
                    backoff.reset()
                    delay = self.settings.poll_seconds
                except ChainMismatch:
                    raise
                except (RpcError, OSError, asyncpg.PostgresConnectionError) as e:
                    delay = backoff.next_delay()
                    log.warning("indexer.backfill_failed", error=str(e), retry_in=round(delay, 2))
                except Exception:  # a bug or an unforeseen answer: say so loudly, keep the daemon up
                    delay = backoff.next_delay()
                    log.exception("indexer.backfill_crashed", retry_in=round(delay, 2))
                try:
                    await asyncio.wait_for(self._wake.wait(), delay)
                except TimeoutError:
                    pass
                self._wake.clear()
        finally:
            subscription.cancel()
            await asyncio.gather(subscription, return_exceptions=True)
            await self.rpc.close()

    async def backfill(self) -> int:
        """Indexes every program transaction newer than the cursor, oldest first; events written."""
        genesis = await self.rpc.call("getGenesisHash", [])
        head = await self.rpc.slot()  # everything up to here is indexed once this pass ends
        async with self.pool.acquire() as conn:
            state = await ledger.indexer_state(conn)
            known, cursor = state["genesis_hash"], state["cursor_signature"]
            if known is None:
                await ledger.set_genesis(conn, genesis)
            elif known != genesis:
                # Its signatures would not find our cursor and its history would mix with ours.
                raise ChainMismatch(
                    f"{self.settings.rpc_url} serves the chain with genesis hash {genesis}, but this"
                    f" ledger indexes {known}: use another database (GPUNET_DATABASE_URL) or state dir"
                )
        signatures = [s["signature"] for s in await self.rpc.signatures_since(str(self.program), cursor)]
        size = self.settings.batch_size
        batches = [signatures[i : i + size] for i in range(0, len(signatures), size)]
        written = 0
        # Fetch (and decode) a few batches ahead while the oldest is written: the node, this
        # process and PostgreSQL then work at the same time. Writes stay strictly in order.
        ahead: deque[asyncio.Task[list[DecodedTransaction]]] = deque()
        try:
            for i in range(len(batches)):
                while len(ahead) < _PREFETCH and i + len(ahead) < len(batches):
                    ahead.append(asyncio.create_task(self._fetch(batches[i + len(ahead)])))
                txs = await ahead.popleft()
                async with self.pool.acquire() as conn:
                    written += await ledger.write_batch(conn, txs)
        finally:
            for task in ahead:
                task.cancel()
            await asyncio.gather(*ahead, return_exceptions=True)
        async with self.pool.acquire() as conn:
            await ledger.mark_synced(conn, head)
        if signatures:
            log.info("indexer.backfill_done", transactions=len(signatures), events=written, head_slot=head)
        return written

    async def _fetch(self, signatures: list[str]) -> list[DecodedTransaction]:
        found = await self.rpc.transactions(signatures)
        txs = []
        for signature, tx in zip(signatures, found, strict=True):
            if tx is None or not isinstance(tx, dict) or tx.get("meta") is None:
                # Listed at this commitment but not served (fully) yet: stop here, the next pass resumes.
                raise RpcError(f"getTransaction {signature}: not available yet")
            try:
                txs.append(decode_transaction(signature, tx, self.program))
            except (KeyError, TypeError, ValueError) as e:
                raise RpcError(f"getTransaction {signature}: malformed result ({e!r})") from e
        return txs

    async def _subscribe(self) -> None:
        """Keeps a logsSubscribe open; every notification, and every (re)connect, wakes the backfill."""
        backoff = Backoff()
        connected_before = False
        while True:
            try:
                async with connect(self.settings.ws_url, ping_interval=10, ping_timeout=10) as ws:
                    await ws.logs_subscribe(
                        RpcTransactionLogsFilterMentions(self.program), commitment=Commitment(self.settings.commitment)
                    )
                    await ws.recv()  # the subscription id
                    if connected_before:
                        await self._count_reconnect()
                    connected_before = True
                    backoff.reset()
                    self._wake.set()  # whatever happened while we were away
                    log.info("indexer.subscribed", ws_url=self.settings.ws_url)
                    async for _ in ws:
                        self._wake.set()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # any socket, handshake or protocol failure: reconnect
                delay = backoff.next_delay()
                log.warning("indexer.subscription_lost", error=str(e), retry_in=round(delay, 2))
                await asyncio.sleep(delay)
                continue
            delay = backoff.next_delay()  # the server closed the socket cleanly
            log.warning("indexer.subscription_closed", retry_in=round(delay, 2))
            await asyncio.sleep(delay)

    async def _count_reconnect(self) -> Any:
        async with self.pool.acquire() as conn:
            await ledger.count_reconnect(conn)
