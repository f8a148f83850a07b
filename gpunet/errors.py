"""The SDK's exception root (`GpunetError`), and program errors by code: gpunet's own (from the IDL)
and Anchor's built-in ones."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from typing import Any

from anchorpy.error import LangErrorMessage, _LangErrorCode

from gpunet.idl import load_idl

__all__ = ["GpunetError", "ProgramError", "custom_error_code", "program_error", "with_rule"]


class GpunetError(Exception):
    """The root of every exception the gpunet SDK defines: `except GpunetError` catches whatever
    the SDK raises on purpose (a bug's TypeError and friends stay uncaught). The ones that are
    also ValueErrors stay so, for callers that catch those.

    - `accounts.AccountError`: an account missing or not the gpunet account it should be
    - `amounts.AmountError` (ValueError): not a positive IO amount with at most 6 decimals
    - `catalog.CatalogError` (ValueError): an unknown GPU model or region
    - `checkpoint.ChunkRefused` (ValueError): a checkpoint chunk whose bytes are not its id, or that
      does not open under the lease's key
    - `cli.common.BadInput` (ValueError): a command argument that makes no sense; nothing sent
    - `cli.common.NotEnoughFunds`: the wallet cannot pay, checked before sending
    - `cli.lease_reach.ChannelLost`: the channel into a job ended before its command's exit status came
    - `cli.lease_reach.Interrupted`: a signal here ended a shell or a command (`code`: 128 + its number)
    - `cli.links.ExplorerError` (ValueError): an explorer URL template that cannot make links
    - `client.TransactionFailed`: the transaction was refused; `.program_error` is the `ProgramError`
      when the program refused it (its error codes are `ProgramError` values, not exceptions)
    - `client.TransactionExpired`: no attempt landed before its blockhash expired
    - `cluster.ClusterError` (ValueError): neither a known cluster name nor an http(s) URL
    - `extras.ExtraMissing` (ImportError): a service imported without its extra installed
    - `fees.FeeError` (ValueError): a priority-fee setting out of its range
    - `jobs.CoordinatorError`: the coordinator refused a request or could not be reached
    - `json_input.NotJson` (ValueError): text from outside that is not JSON, or nested too deep
    - `keys.KeypairFileError`: a keypair file missing, unreadable or malformed
      - `keys.NodeKeyNotFound`: no node key of that name (the message says how to create one)
    - `localnet.LocalnetError`: the local node's binary is missing or the node did not come up
    - `protocol.ProtocolError` (ValueError): a worker-protocol message that is not valid
    - `reach.ReachError`: a lease's job cannot be reached (the coordinator's, the relay's or the node's
      refusal, or no way through)
    - `secrets.SecretError` (ValueError): a secret that cannot be sealed or opened
    - `solana_config.SolanaConfigError` (ValueError): the Solana CLI's config file is unreadable or
      malformed (the message names it)
    - `tunnel.TunnelError`: the data plane into a job failed (the message says what)
      - `tunnel.LinkClosed`: the link to the node went away
      - `tunnel.StreamRefused`: the other end refused or ended the stream (its reason)

    tests/test_errors.py fails when an exception class under gpunet/ does not derive from it.
    """


@dataclass(frozen=True)
class ProgramError:
    """A program error a transaction failed with: `code`, its `name` and a message a user can act on."""

    code: int
    name: str
    message: str

    def __str__(self) -> str:
        return f"{self.name} ({self.code}): {self.message}"


@cache
def _gpunet_errors() -> dict[int, ProgramError]:
    return {e.code: ProgramError(e.code, e.name, e.msg or e.name) for e in load_idl().errors or []}


def program_error(code: int) -> ProgramError | None:
    """The gpunet or Anchor error with this custom error code, if it is one."""
    if found := _gpunet_errors().get(code):
        return found
    try:
        lang = _LangErrorCode(code)
    except ValueError:
        return None
    return ProgramError(code, lang.name, LangErrorMessage.get(code, lang.name))


_CUSTOM_IN_LOG = re.compile(r"custom program error: (0x[0-9a-fA-F]+)")


def custom_error_code(err: Any) -> int | None:
    """The custom error code in a transaction error, as RPC JSON (`{"InstructionError": [i, {"Custom": n}]}`)
    or as a log line ("... custom program error: 0x1770"); None if it carries none."""
    if isinstance(err, str):
        match = _CUSTOM_IN_LOG.search(err)
        return int(match.group(1), 16) if match else None
    if isinstance(err, dict):
        inner = err.get("InstructionError")
        if isinstance(inner, list) and len(inner) == 2 and isinstance(inner[1], dict):
            custom = inner[1].get("Custom")
            return custom if isinstance(custom, int) else None
    return None


# Anchor's account constraints say which check failed ("A has one constraint was violated"), not which
# of gpunet's rules it enforces; the instruction and the account the log names together do.
# Keyed (instruction, account, Anchor error name), as the program's log spells them.
_RULES: dict[tuple[str, str, str], str] = {
    (
        "TopUpLease",
        "lease",
        "ConstraintHasOne",
    ): "only the lease's client can top it up (sign with the wallet that opened it)",
    ("OpenLease", "config", "ConstraintHasOne"): "the mint given is not gpunet's IO mint (see `gpunet admin show`)",
    (
        "RegisterProvider",
        "config",
        "ConstraintHasOne",
    ): "the mint given is not gpunet's IO mint (see `gpunet admin show`)",
}
_INSTRUCTION_IN_LOG = re.compile(r"Program log: Instruction: (\w+)")
_CAUSED_BY_IN_LOG = re.compile(r"AnchorError caused by account: (\w+)\. Error Code: (\w+)\.")


def with_rule(error: ProgramError, logs: list[str]) -> ProgramError:
    """`error` with the gpunet rule it enforces as its message, when the logs say which one (an
    account constraint of a known instruction); otherwise `error` unchanged."""
    instruction = None
    for line in logs:
        if found := _INSTRUCTION_IN_LOG.search(line):
            instruction = found.group(1)  # the last one before the error is the one that failed
        elif (found := _CAUSED_BY_IN_LOG.search(line)) and found.group(2) == error.name:
            if rule := _RULES.get((instruction or "", found.group(1), error.name)):
                return ProgramError(error.code, error.name, rule)
    return error
