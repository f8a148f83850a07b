"""The compute check on a real GPU: gpunet.verification's own code, in cupy's array namespace.

The matrices are generated on the device in float32 and multiplied with TF32 tensor cores (exact
for these entries: see gpunet.verification); the row digests are computed there too, and only they
(4 bytes a row) come to the host, where the worker builds the Merkle tree and opens rows.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import numpy as np

from gpunet import verification as v

__all__ = ["digests"]

_tf32 = threading.Lock()
_tf32_set = False


def _namespace() -> tuple[Any, Any]:
    """cupy, and its array-API namespace, with float32 products on TF32 tensor cores."""
    global _tf32_set
    import cupy
    from array_api_compat import cupy as xp

    with _tf32:
        if not _tf32_set:
            # cupy reads CUPY_TF32 at the first float32 product and keeps the choice: set it for
            # that product only, so that the worker's environment (which jobs may see) keeps none.
            before = os.environ.get("CUPY_TF32")
            os.environ["CUPY_TF32"] = "1"
            try:
                cupy.ones((1, 1), cupy.float32) @ cupy.ones((1, 1), cupy.float32)
            finally:
                os.environ.pop("CUPY_TF32") if before is None else os.environ.__setitem__("CUPY_TF32", before)
            _tf32_set = True
    return cupy, xp


def digests(workload: v.Workload, device: int) -> np.ndarray:
    """Every row digest of the workload, computed on CUDA device `device`."""
    cupy, xp = _namespace()
    with cupy.cuda.Device(device):
        on_device = v.digests_of(workload, xp=xp, dtype=xp.float32)
        return cupy.asnumpy(on_device)
