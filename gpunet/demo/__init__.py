"""The demo of the README's first command: gpunet's whole story with every real part (`scripts/demo`)."""
