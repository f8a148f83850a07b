"""The README's demo: gpunet's whole story with every real part (`scripts/demo`)."""
