"""gpunet: Python SDK for the gpunet Solana GPU marketplace."""

from gpunet.errors import GpunetError, ProgramError, custom_error_code, program_error
from gpunet.events import decode_events, events_of_transaction
from gpunet.idl import PROGRAM_ID, load_idl
from gpunet.keys import KeypairFileError, create_keypair_file, load_keypair
from gpunet.pda import (
    config_pda,
    lease_pda,
    lease_vault_pda,
    node_pda,
    provider_pda,
    stake_vault_pda,
)
from gpunet.usage import Receipt, ed25519_instruction

__all__ = [
    "PROGRAM_ID",
    "GpunetError",
    "KeypairFileError",
    "ProgramError",
    "Receipt",
    "config_pda",
    "create_keypair_file",
    "custom_error_code",
    "decode_events",
    "ed25519_instruction",
    "events_of_transaction",
    "lease_pda",
    "lease_vault_pda",
    "load_idl",
    "load_keypair",
    "node_pda",
    "program_error",
    "provider_pda",
    "stake_vault_pda",
]
