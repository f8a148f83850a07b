"""`python -m gpunet.demo`: runs the story in a fresh directory; exit 0 when every token is
accounted for and the audit passes."""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from rich.console import Console

from gpunet.demo.story import Demo
from gpunet.localnet import LocalnetError


def main() -> int:
    console = Console(soft_wrap=True)  # a key or signature is never cut across lines
    workdir = Path(tempfile.mkdtemp(prefix="gpunet-demo-"))
    try:
        result = asyncio.run(Demo(workdir, console).run())
    except (LocalnetError, RuntimeError, TimeoutError) as e:
        console.print(f"[red]demo: {e}[/]")
        return 2
    console.print("[bold green]the story ran to the end[/]" if result.ok else "[bold red]something did not add up[/]")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
