"""`python -m coordinator ...`: the same commands as `gpunet coordinator ...`."""

from coordinator.cli import app

app()
