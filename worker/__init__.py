"""The gpunet worker agent: GPUs (NVML or simulated), coordinator session, jobs, metered and signed usage."""
