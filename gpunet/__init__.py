"""gpunet: Python SDK for the gpunet Solana GPU marketplace."""

from gpunet.idl import PROGRAM_ID, load_idl

__all__ = ["PROGRAM_ID", "load_idl"]
