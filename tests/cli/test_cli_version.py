"""`gpunet --version` prints the installed package's version (no chain needed)."""

from __future__ import annotations

import importlib.metadata

from typer.testing import CliRunner

from gpunet.cli import app


def test_version() -> None:
    shown = CliRunner().invoke(app, ["--version"])
    assert (shown.exit_code, shown.stdout.strip()) == (0, f"gpunet {importlib.metadata.version('gpunet')}")
