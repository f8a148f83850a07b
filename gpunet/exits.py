"""The exit codes of every `gpunet` command (docs/cli.md lists them). In the SDK, the floor that
every command stands on: the coordinator's and the worker's own commands (`python -m coordinator`,
`gpunet worker`) use them too, and they may import the SDK but never the command line above them."""

from __future__ import annotations

from enum import IntEnum

__all__ = ["Exit"]


class Exit(IntEnum):
    OK = 0
    REFUSED = 1  # the transaction was refused by the program or the node, or expired unsent
    BAD_INPUT = 2  # a bad argument, option or setting (also click's own usage errors)
    KEYPAIR = 3  # keypair file missing or malformed
    FUNDS = 4  # the wallet lacks the IO or SOL the transaction needs (checked before sending)
    UNREACHABLE = 5  # no answer from the RPC node
    NOT_FOUND = 6  # the account does not exist (or gpunet is not initialised there)
    AUDIT_MISMATCH = 7  # an audit found a difference
    NOT_INSTALLED = 8  # `gpunet coordinator|worker` without its extra (pip install 'gpunet[coordinator]')
    EVIDENCE = 9  # the audit's figures agree, but a slash's evidence is missing or hashes to another value
    NO_GPUS = 10  # `gpunet worker`: no usable GPUs (no NVIDIA driver, NVML failing) and no --simulate-gpus
    WORKER_STATE = 11  # `gpunet worker`: the state directory is unusable (damaged journal, another agent on it)
    NO_SANDBOX = 12  # `gpunet worker`: no container engine and no --allow-host-jobs (or no bubblewrap for it)
    NOT_REGISTERED = 13  # `gpunet worker run`: the coordinator kept refusing the node key as not registered
    CONNECTION_LOST = 14  # `lease shell|exec|forward`: the channel into the job broke first (node lost, lease closed)
    CHECK_FAILED = 15  # `worker check --run`: a GPU refused a check, answered it wrong, or missed its deadline
    SERVICE = 16  # `worker install|uninstall`: systemd could not enable or start (or stop) the service
