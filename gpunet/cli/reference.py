"""The `gpunet` command as a click command, for the docs site's CLI reference (mkdocs-click renders
it from the typer app itself, so the reference is never written by hand)."""

from __future__ import annotations

import typer

from gpunet.cli import app

command = typer.main.get_command(app)
