"""Sending gpunet transactions: fresh blockhash, a compute budget that lands under congestion
(`gpunet.fees`: the limit from a simulation, a priority fee from recent fees), confirmation at a
chosen commitment, and a retry on blockhash expiry that can never apply the same instructions twice."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

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

__all__ = ["TransactionExpired", "TransactionFailed", "send_and_confirm"]

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
    """Signs `instructions` (fee paid by `payer`), sends them and waits for `commitment`.

    The transaction carries a compute budget (`gpunet.fees`, `fees` or the environment's policy):
    it is simulated first, and a refusal there raises TransactionFailed with nothing sent.
    `on_budget` hears what each attempt bid.

    A retry happens only once the previous attempt's blockhash has expired without the
    transaction being seen: from then on it can never land, so resending under a new
    blockhash cannot apply the instructions twice. Raises TransactionFailed (with the
    program error, when there is one) or TransactionExpired.
    """
    want = _ORDER[str(commitment)]
    policy = fees or FeePolicy.from_env()
    writable = {m.pubkey for ix in instructions for m in ix.accounts if m.is_writable} | {payer.pubkey()}
    for _ in range(attempts):
        latest = (await client.get_latest_blockhash(commitment)).value
        budget = await _budget(client, payer, instructions, signers, latest.blockhash, policy, writable, commitment)
        if on_budget is not None:
            on_budget(budget)
        message = Message.new_with_blockhash(with_budget(instructions, budget), payer.pubkey(), latest.blockhash)
        tx = Transaction([payer, *signers], message, latest.blockhash)
        signature = tx.signatures[0]
        try:
            await client.send_raw_transaction(
                bytes(tx), opts=TxOpts(skip_confirmation=True, preflight_commitment=commitment)
            )
        except RPCException as e:
            data = e.args[0] if e.args else None
            err = getattr(getattr(data, "data", None), "err", None)
            logs = getattr(getattr(data, "data", None), "logs", None) or []
            raise TransactionFailed(err if err is not None else data, logs) from None
        while True:
            status = (await client.get_signature_statuses([signature])).value[0]
            if status is not None and status.err is not None:
                tx_info = await client.get_transaction(
                    signature, commitment=Confirmed, max_supported_transaction_version=0
                )
                logs = (
                    tx_info.value.transaction.meta.log_messages
                    if tx_info.value and tx_info.value.transaction.meta
                    else []
                )
                raise TransactionFailed(status.err, logs or [], signature)
            if status is not None and _status_rank(status) >= want:
                return signature
            if status is None and (await client.get_block_height(commitment)).value > latest.last_valid_block_height:
                break  # expired unseen: it can never land now
            await asyncio.sleep(poll_seconds)
    raise TransactionExpired(f"no attempt landed before its blockhash expired ({attempts} attempts)")


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
