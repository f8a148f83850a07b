"""send_and_confirm's retry rule, against a fake RPC client (a unit test at the module boundary):
a transaction is re-sent under a new blockhash only once the previous attempt's blockhash has
expired unseen, so the same instructions can never land twice."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest
from solders.hash import Hash
from solders.keypair import Keypair
from solders.signature import Signature
from solders.transaction import Transaction

from gpunet.client import TransactionExpired, TransactionFailed, send_and_confirm
from gpunet.usage import ed25519_instruction


@dataclass
class FakeRpc:
    """Loses the first `lost` transactions; the chain's block height advances on every poll."""

    lost: int = 1
    valid_for: int = 5
    height: int = 100
    sent: list[Signature] = field(default_factory=list)
    landed: set[Signature] = field(default_factory=set)
    failing: bool = False

    async def get_latest_blockhash(self, commitment=None):
        return SimpleNamespace(
            value=SimpleNamespace(blockhash=Hash.new_unique(), last_valid_block_height=self.height + self.valid_for)
        )

    async def send_raw_transaction(self, raw: bytes, opts=None):
        sig = Transaction.from_bytes(raw).signatures[0]
        self.sent.append(sig)
        if len(self.sent) > self.lost:
            self.landed.add(sig)
        return SimpleNamespace(value=sig)

    async def get_signature_statuses(self, sigs):
        self.height += 1
        sig = sigs[0]
        if sig not in self.landed:
            return SimpleNamespace(value=[None])
        err = {"InstructionError": [1, {"Custom": 6032}]} if self.failing else None
        return SimpleNamespace(value=[SimpleNamespace(err=err, confirmation_status="confirmed")])

    async def get_block_height(self, commitment=None):
        return SimpleNamespace(value=self.height)

    async def get_transaction(self, sig, **kwargs):
        return SimpleNamespace(value=None)

    async def simulate_transaction(self, tx, commitment=None):  # the compute budget's simulation: it runs
        return SimpleNamespace(value=SimpleNamespace(err=None, logs=[], units_consumed=3_000))

    @property
    def _provider(self) -> SimpleNamespace:  # getRecentPrioritizationFees: nobody paid a priority fee
        async def unparsed(body: object) -> str:
            return '{"jsonrpc": "2.0", "id": 1, "result": []}'

        return SimpleNamespace(make_request_unparsed=unparsed)


def _ixs():
    return [ed25519_instruction(Keypair(), b"x")]


async def test_a_lost_transaction_is_resent_only_after_its_blockhash_expired() -> None:
    rpc = FakeRpc(lost=1, valid_for=5)
    sig = await send_and_confirm(rpc, Keypair(), _ixs(), poll_seconds=0)
    assert len(rpc.sent) == 2 and rpc.sent[0] != rpc.sent[1]
    assert sig == rpc.sent[1] and rpc.landed == {sig}
    # the first attempt was polled until its blockhash had expired: never resent earlier
    assert rpc.height > 100 + 5


async def test_a_landed_transaction_is_never_resent() -> None:
    rpc = FakeRpc(lost=0)
    sig = await send_and_confirm(rpc, Keypair(), _ixs(), poll_seconds=0)
    assert rpc.sent == [sig]


async def test_giving_up_after_the_attempts_says_so() -> None:
    rpc = FakeRpc(lost=10, valid_for=2)
    with pytest.raises(TransactionExpired, match="3 attempts"):
        await send_and_confirm(rpc, Keypair(), _ixs(), attempts=3, poll_seconds=0)
    assert len(rpc.sent) == 3


async def test_an_on_chain_failure_names_the_program_error_and_is_not_retried() -> None:
    rpc = FakeRpc(lost=0, failing=True)
    with pytest.raises(TransactionFailed) as failed:
        await send_and_confirm(rpc, Keypair(), _ixs(), poll_seconds=0)
    assert failed.value.program_error is not None and failed.value.program_error.code == 6032
    assert len(rpc.sent) == 1
