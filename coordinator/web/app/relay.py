"""The wallet app's two ends of a transaction: `unsigned` (the SDK's instructions under a compute budget
sized by a simulation, fee payer the wallet, a recent blockhash: what the page checks and its wallet
signs) and `relay` (the signed transaction sent through the coordinator's RPC, confirmed). A program's
refusal is gpunet.client.TransactionFailed, with the program error decoded from the SDK's table."""

from __future__ import annotations

import asyncio
import base64
import binascii
import time
from collections.abc import Sequence

from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solana.rpc.core import RPCException
from solana.rpc.types import TxOpts
from solders.compute_budget import ID as COMPUTE_BUDGET
from solders.instruction import Instruction
from solders.message import Message
from solders.pubkey import Pubkey
from solders.signature import Signature
from solders.transaction import Transaction

from gpunet.client import TransactionFailed
from gpunet.errors import GpunetError
from gpunet.fees import Budget, FeePolicy, recent_fees, with_budget

__all__ = ["BadTransaction", "Unsigned", "confirm", "decode_signed", "relay", "unsigned"]

BASE_FEE_LAMPORTS = 5_000  # per signature
CONFIRM_SECONDS = 60.0
MAX_TRANSACTION_BYTES = 1232  # a packet


class BadTransaction(GpunetError, ValueError):
    """What was posted is not a signed transaction the relay can send: nothing was sent."""


class Unsigned:
    """A transaction for the wallet to sign, and what its fee will be at most (lamports)."""

    def __init__(self, tx: Transaction, budget: Budget) -> None:
        self.tx, self.budget = tx, budget

    @property
    def fee_lamports(self) -> int:
        return BASE_FEE_LAMPORTS * self.tx.message.header.num_required_signatures + self.budget.priority_fee_lamports

    def base64(self) -> str:
        return base64.b64encode(bytes(self.tx)).decode()


async def unsigned(chain: AsyncClient, payer: Pubkey, instructions: Sequence[Instruction]) -> Unsigned:
    """The instructions under a budget (the limit from a simulation, the price from recent fees, as
    gpunet.client sends), paid by `payer`. A simulation the program refuses raises TransactionFailed:
    the wallet is never asked to sign what would fail."""
    blockhash = (await chain.get_latest_blockhash(Confirmed)).value.blockhash
    trial = Transaction.new_unsigned(Message.new_with_blockhash(with_budget(instructions), payer, blockhash))
    simulated = (await chain.simulate_transaction(trial, sig_verify=False, commitment=Confirmed)).value
    if simulated.err is not None:
        raise TransactionFailed(simulated.err, simulated.logs or [])
    policy = FeePolicy.from_env()
    writable = sorted({m.pubkey for i in instructions for m in i.accounts if m.is_writable} | {payer}, key=bytes)
    budget = Budget(policy.limit(simulated.units_consumed or 0), policy.price(await recent_fees(chain, writable)))
    message = Message.new_with_blockhash(with_budget(instructions, budget), payer, blockhash)
    return Unsigned(Transaction.new_unsigned(message), budget)


def decode_signed(encoded: object, program: Pubkey) -> Transaction:
    """The posted transaction (base64), every signature it needs present and valid (a transaction
    the chain would refuse for its signatures is refused here too, before anything is sent), calling
    only `program` (gpunet) and the compute budget: the relay is the wallet app's, not an open relay
    for any transaction through the coordinator's RPC node."""
    if not isinstance(encoded, str) or len(encoded) > 2 * MAX_TRANSACTION_BYTES:
        raise BadTransaction("transaction: a base64 string is required")
    try:
        tx = Transaction.from_bytes(base64.b64decode(encoded, validate=True))
    except (binascii.Error, ValueError) as e:
        raise BadTransaction(f"transaction: not a serialized transaction ({e})") from None
    if not all(tx.verify_with_results()):
        raise BadTransaction("the transaction's signatures do not verify: it is not signed by the accounts it names")
    keys = tx.message.account_keys
    others = {keys[i.program_id_index] for i in tx.message.instructions} - {program, COMPUTE_BUDGET}
    if others:
        raise BadTransaction(
            f"the transaction calls {', '.join(sorted(map(str, others)))}: this relay sends only gpunet's transactions"
        )
    return tx


async def relay(chain: AsyncClient, tx: Transaction) -> Signature:
    """Sends the signed transaction (preflight on) and waits for its confirmation."""
    signature = tx.signatures[0]
    try:
        await chain.send_raw_transaction(bytes(tx), opts=TxOpts(skip_confirmation=True, preflight_commitment=Confirmed))
    except RPCException as e:
        data = getattr(e.args[0], "data", None) if e.args else None
        err = getattr(data, "err", None)
        raise TransactionFailed(err if err is not None else e.args[0], getattr(data, "logs", None) or []) from None
    return await confirm(chain, signature)


async def confirm(chain: AsyncClient, signature: Signature) -> Signature:
    """Waits for the transaction's confirmation; TransactionFailed (with its logs) when it failed."""
    deadline = time.monotonic() + CONFIRM_SECONDS
    while time.monotonic() < deadline:
        status = (await chain.get_signature_statuses([signature])).value[0]
        if status is not None and status.err is not None:
            info = await chain.get_transaction(signature, commitment=Confirmed, max_supported_transaction_version=0)
            meta = info.value.transaction.meta if info.value else None
            raise TransactionFailed(status.err, (meta.log_messages if meta else None) or [], signature)
        if status is not None and status.confirmation_status is not None:
            if str(status.confirmation_status).rsplit(".", 1)[-1].lower() in ("confirmed", "finalized"):
                return signature
        await asyncio.sleep(0.2)
    raise BadTransaction(f"transaction {signature} was not confirmed within {CONFIRM_SECONDS:.0f} s")
