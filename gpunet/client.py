"""Sending gpunet transactions: fresh blockhash, a compute budget that lands under congestion
(`gpunet.fees`: the limit from a simulation, a priority fee from recent fees), confirmation at a
chosen commitment, a retry on blockhash expiry that can never apply the same instructions twice,
and many in flight at once (`InFlight`) where a service sends faster than the chain confirms."""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

import httpx
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Commitment, Confirmed
from solana.rpc.core import RPCException
from solana.rpc.types import TxOpts
from solders.hash import Hash
from solders.instruction import Instruction
from solders.keypair import Keypair
from solders.message import Message
from solders.pubkey import Pubkey
from solders.signature import Signature
from solders.transaction import Transaction

from gpunet.errors import GpunetError, ProgramError, custom_error_code, program_error, with_rule
from gpunet.fees import Budget, FeePolicy, recent_fees, with_budget

__all__ = ["DEFAULT_WINDOW", "InFlight", "TransactionExpired", "TransactionFailed", "send_and_confirm"]

_T = TypeVar("_T")
MAX_SIGNATURE_STATUSES = 256  # the most getSignatureStatuses takes at once
# Transactions out at once by default: at a real cluster's 0.8-1.2 s confirmations, about 250 a second
# (bench/scale/settle_rate.py); the window halves by itself when the RPC or the cluster cannot take it.
DEFAULT_WINDOW = 256
THROTTLED_PATIENCE_SECONDS = 60.0  # an RPC answering 429 for longer is treated as down
POLL_GAP_SECONDS = 0.02  # at most 50 status polls a second, one for all the transactions out
BLOCKHASH_REUSE_SECONDS = 0.4  # a slot: transactions sent within one share the blockhash read for the first

_ORDER = {"processed": 0, "confirmed": 1, "finalized": 2}


class TransactionFailed(GpunetError):
    """The transaction was refused (in preflight or on chain); nothing it asked for happened."""

    def __init__(self, err: Any, logs: Sequence[str] = (), signature: Signature | None = None) -> None:
        self.err = err
        self.logs = list(logs)
        self.signature = signature
        code = custom_error_code(err) if err is not None else None
        if code is None:
            code = next((c for line in self.logs if (c := custom_error_code(line)) is not None), None)
        found = program_error(code) if code is not None else None
        self.program_error: ProgramError | None = with_rule(found, self.logs) if found else None
        reason = str(self.program_error) if self.program_error else str(err)
        super().__init__(f"transaction failed: {reason}")


class TransactionExpired(GpunetError):
    """No attempt landed before its blockhash expired, `attempts` times; none can land any more."""


def _status_rank(status: Any) -> int:
    level = getattr(status, "confirmation_status", None)
    return _ORDER.get(str(level).rsplit(".", 1)[-1].lower(), -1) if level is not None else -1


async def send_and_confirm(
    client: AsyncClient,
    payer: Keypair,
    instructions: Sequence[Instruction],
    signers: Sequence[Keypair] = (),
    *,
    commitment: Commitment = Confirmed,
    attempts: int = 3,
    poll_seconds: float = 0.1,
    fees: FeePolicy | None = None,
    on_budget: Callable[[Budget], None] | None = None,
) -> Signature:
    """Signs `instructions` (fee paid by `payer`), sends them and waits for `commitment`: one
    transaction on its own (`InFlight.send` says how, and what it raises)."""
    sender = InFlight(client, window=1, commitment=commitment, poll_seconds=poll_seconds, fees=fees)
    return await sender.send(payer, instructions, signers, attempts=attempts, on_budget=on_budget)


@dataclass
class _Waiting:
    outcome: asyncio.Future[Any]  # its status once final; None once its blockhash expired unseen
    last_valid_block_height: int


class InFlight:
    """Transactions sent without waiting for each other's confirmation: at most `window` are
    outstanding at once, and one poll of the signature statuses (up to 256 a request) follows all
    of them to their outcomes.

    The window adapts to the cluster, as TCP's does to a network: it is halved when the RPC says
    "too many requests" (429; the request is retried after a backoff) or when a confirmation takes
    over twice the usual (at most once a round trip), and grows back by one a window's worth of
    confirmations, never past `window`. The usual is the fastest confirmation seen, drifting up
    slowly toward what confirmations take now, so a cluster that stays slower stops counting as
    congested.

    Ordering between transactions is the caller's: ones that must land in order are sent one after
    the other (`await` the first), ones that need not are sent from concurrent tasks."""

    def __init__(
        self,
        client: AsyncClient,
        *,
        window: int = DEFAULT_WINDOW,
        commitment: Commitment = Confirmed,
        poll_seconds: float = 0.1,
        fees: FeePolicy | None = None,
    ) -> None:
        if window < 1:
            raise ValueError(f"a window of {window} transactions sends nothing; at least 1")
        self.client, self.commitment, self.poll_seconds = client, commitment, poll_seconds
        self.fees = fees
        self.ceiling = window
        self.limit = float(window)  # the adaptive window, fractional between whole steps
        self.outstanding = 0
        self.usual: float | None = None  # seconds a confirmation usually takes
        self._last_cut = -math.inf
        self._room: asyncio.Condition | None = None
        self._waiting: dict[Signature, _Waiting] = {}
        self._poller: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        self._latest: tuple[float, Any] | None = None  # (read at, the latest blockhash and its last valid height)
        self._reading: asyncio.Lock | None = None

    @property
    def window(self) -> int:
        """How many transactions may be outstanding now."""
        return max(1, int(self.limit))

    async def send(
        self,
        payer: Keypair,
        instructions: Sequence[Instruction],
        signers: Sequence[Keypair] = (),
        *,
        attempts: int = 3,
        on_budget: Callable[[Budget], None] | None = None,
    ) -> Signature:
        """Signs `instructions` (fee paid by `payer`), sends them once the window has room and
        waits for the commitment.

        The transaction carries a compute budget (`gpunet.fees`, the policy given or the
        environment's): it is simulated first, and a refusal there raises TransactionFailed with
        nothing sent. `on_budget` hears what each attempt bid.

        A retry happens only once the previous attempt's blockhash has expired without the
        transaction being seen: from then on it can never land, so resending under a new
        blockhash cannot apply the instructions twice. Raises TransactionFailed (with the
        program error, when there is one) or TransactionExpired; a transport error of the RPC
        reaches the caller as it was raised."""
        if self._room is None:
            self._room = asyncio.Condition()
        async with self._room:
            await self._room.wait_for(lambda: self.outstanding < self.window)
            self.outstanding += 1
        try:
            return await self._send(payer, instructions, signers, attempts, on_budget)
        finally:
            async with self._room:
                self.outstanding -= 1
                self._room.notify_all()

    async def _send(
        self,
        payer: Keypair,
        instructions: Sequence[Instruction],
        signers: Sequence[Keypair],
        attempts: int,
        on_budget: Callable[[Budget], None] | None,
    ) -> Signature:
        client, commitment = self.client, self.commitment
        policy = self.fees or FeePolicy.from_env()
        writable = {m.pubkey for ix in instructions for m in ix.accounts if m.is_writable} | {payer.pubkey()}
        expired: Hash | None = None
        for _ in range(attempts):
            latest = await self._blockhash(expired)
            budget = await self._rpc(
                partial(_budget, client, payer, instructions, signers, latest.blockhash, policy, writable, commitment)
            )
            if on_budget is not None:
                on_budget(budget)
            message = Message.new_with_blockhash(with_budget(instructions, budget), payer.pubkey(), latest.blockhash)
            tx = Transaction([payer, *signers], message, latest.blockhash)
            signature = tx.signatures[0]
            sent_at = time.monotonic()
            try:
                # The same signed bytes again after a 429 cannot apply twice: one signature lands once.
                opts = TxOpts(skip_confirmation=True, preflight_commitment=commitment)
                await self._rpc(partial(client.send_raw_transaction, bytes(tx), opts=opts))
            except RPCException as e:
                data = e.args[0] if e.args else None
                err = getattr(getattr(data, "data", None), "err", None)
                logs = getattr(getattr(data, "data", None), "logs", None) or []
                raise TransactionFailed(err if err is not None else data, logs) from None
            status = await self._outcome(signature, latest.last_valid_block_height)
            if status is None:
                expired = latest.blockhash
                continue  # expired unseen: it can never land now
            if status.err is not None:
                tx_info = await self._rpc(
                    partial(
                        client.get_transaction, signature, commitment=Confirmed, max_supported_transaction_version=0
                    )
                )
                meta = tx_info.value.transaction.meta if tx_info.value else None
                raise TransactionFailed(status.err, (meta.log_messages if meta else None) or [], signature)
            self._took(time.monotonic() - sent_at)
            return signature
        raise TransactionExpired(f"no attempt landed before its blockhash expired ({attempts} attempts)")

    async def _blockhash(self, expired: Hash | None) -> Any:
        """The latest blockhash, read at most once a slot for all the transactions going out (a
        blockhash stays valid for 150 slots), never the one an attempt just expired under."""
        if self._reading is None:
            self._reading = asyncio.Lock()
        async with self._reading:
            now = time.monotonic()
            if (
                self._latest is None
                or now - self._latest[0] > BLOCKHASH_REUSE_SECONDS
                or self._latest[1].blockhash == expired
            ):
                latest = (await self._rpc(partial(self.client.get_latest_blockhash, self.commitment))).value
                self._latest = (now, latest)
            return self._latest[1]

    async def _outcome(self, signature: Signature, last_valid_block_height: int) -> Any:
        """The transaction's final status (an error, or the commitment reached); None once its
        blockhash expired with the transaction unseen."""
        waiting = _Waiting(asyncio.get_running_loop().create_future(), last_valid_block_height)
        self._waiting[signature] = waiting
        if self._wake is None:
            self._wake = asyncio.Event()
        self._wake.set()
        if self._poller is None or self._poller.done():
            self._poller = asyncio.create_task(self._poll(), name="gpunet.client.inflight")
        try:
            return await waiting.outcome
        finally:
            self._waiting.pop(signature, None)

    async def _poll(self) -> None:
        """Until nothing is outstanding: every status at once, then a pause (cut short by a new send)."""
        want = _ORDER[str(self.commitment)]
        assert self._wake is not None
        while True:
            self._wake.clear()
            pending = {s: w for s, w in self._waiting.items() if not w.outcome.done()}
            signatures = list(pending)
            try:
                statuses: list[Any] = []
                for i in range(0, len(signatures), MAX_SIGNATURE_STATUSES):
                    chunk = signatures[i : i + MAX_SIGNATURE_STATUSES]
                    statuses += (await self._rpc(partial(self.client.get_signature_statuses, chunk))).value
                height = None
                if any(s is None for s in statuses):
                    height = (await self._rpc(partial(self.client.get_block_height, self.commitment))).value
            except Exception as e:  # the transport's error is every waiter's, as if each had polled
                for w in pending.values():
                    if not w.outcome.done():
                        w.outcome.set_exception(e)
                statuses, signatures = [], []
            for signature, status in zip(signatures, statuses, strict=True):
                w = pending[signature]
                if w.outcome.done():
                    continue
                if status is not None and (status.err is not None or _status_rank(status) >= want):
                    w.outcome.set_result(status)
                elif status is None and height is not None and height > w.last_valid_block_height:
                    w.outcome.set_result(None)
            if all(w.outcome.done() for w in self._waiting.values()):
                return  # the next send starts a poller again
            # A new send wakes the poll early (a node that confirms at once answers at once), but
            # polls stay POLL_GAP_SECONDS apart however fast transactions go out.
            await asyncio.sleep(POLL_GAP_SECONDS)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), max(0.0, self.poll_seconds - POLL_GAP_SECONDS))

    async def _rpc(self, call: Callable[[], Awaitable[_T]]) -> _T:
        """`call()`, again after a growing pause while the RPC answers "too many requests", for up to
        THROTTLED_PATIENCE_SECONDS; then its refusal is raised like any transport error."""
        pause, give_up = 0.05, time.monotonic() + THROTTLED_PATIENCE_SECONDS
        while True:
            try:
                return await call()
            except Exception as e:
                if not _throttled(e) or time.monotonic() > give_up:
                    raise
                self._cut()
                await asyncio.sleep(pause)
                pause = min(pause * 2, 2.0)

    def _took(self, seconds: float) -> None:
        """A confirmation took `seconds`: the window grows, or is cut when that is over twice the usual."""
        usual = seconds if self.usual is None else min(seconds, self.usual + 0.01 * (seconds - self.usual))
        self.usual = usual
        if seconds > 2 * usual + self.poll_seconds:
            self._cut()
        else:
            self.limit = min(float(self.ceiling), self.limit + 1 / self.limit)

    def _cut(self) -> None:
        now = time.monotonic()
        if now - self._last_cut < (self.usual or self.poll_seconds):
            return  # once a round trip: the transactions already out were sent before the news
        self._last_cut = now
        self.limit = max(1.0, self.limit / 2)


def _throttled(e: BaseException) -> bool:
    """Whether the RPC refused for load (HTTP 429, or its JSON-RPC error saying so)."""
    seen: BaseException | None = e
    while seen is not None:
        if isinstance(seen, httpx.HTTPStatusError) and seen.response.status_code == 429:
            return True
        if "too many requests" in str(seen).lower():
            return True
        seen = seen.__cause__ or seen.__context__
    return False


async def _budget(
    client: AsyncClient,
    payer: Keypair,
    instructions: Sequence[Instruction],
    signers: Sequence[Keypair],
    blockhash: Hash,
    policy: FeePolicy,
    writable: set[Pubkey],
    commitment: Commitment,
) -> Budget:
    """The limit from a simulation under the ceiling; the price from the fees recently paid to
    write the same accounts. A simulation the program refuses raises TransactionFailed."""
    message = Message.new_with_blockhash(with_budget(instructions), payer.pubkey(), blockhash)
    simulated = (await client.simulate_transaction(Transaction([payer, *signers], message, blockhash),
                                                   commitment=commitment)).value  # fmt: skip
    if simulated.err is not None:
        raise TransactionFailed(simulated.err, simulated.logs or [])
    price = policy.price(await recent_fees(client, sorted(writable, key=bytes)))
    return Budget(policy.limit(simulated.units_consumed or 0), price)
