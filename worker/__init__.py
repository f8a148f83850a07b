"""The gpunet worker agent: GPUs (NVML or simulated), coordinator session, jobs, metered and signed usage."""

from gpunet.extras import require

# Without `gpunet[worker]`, say which extra to install rather than fail on pynvml's name later.
require("worker")
