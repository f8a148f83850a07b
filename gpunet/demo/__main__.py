"""`python -m gpunet.demo`: runs the story in a fresh directory; exit 0 when every token is
accounted for and the audit passes. `python -m gpunet.demo ray`: the Ray cluster story
(gpunet/demo/ray_story.py); exit 0 when the cluster ran a task on each node and was whole again.
`--web`: after the story, everything stays up, the explorer and the wallet app on the coordinator's
/web/, until Ctrl-C."""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from rich.console import Console

from gpunet.demo.ray_story import RayDemo
from gpunet.demo.story import Demo
from gpunet.localnet import LocalnetError


def main() -> int:
    console = Console(soft_wrap=True)  # a key or signature is never cut across lines
    workdir = Path(tempfile.mkdtemp(prefix="gpunet-demo-"))
    try:
        args = sys.argv[1:]
        keep_serving = "--web" in args
        args = [a for a in args if a != "--web"]
        story = RayDemo if args == ["ray"] else Demo
        if args not in ([], ["ray"]):
            console.print(f"[red]demo: unknown story {' '.join(args)!r} (none, or: ray; and --web)[/]")
            return 2
        result = asyncio.run(story(workdir, console, keep_serving=keep_serving).run())
    except KeyboardInterrupt:
        console.print("[dim]stopped[/]")
        return 0
    except (LocalnetError, RuntimeError, TimeoutError) as e:
        console.print(f"[red]demo: {e}[/]")
        return 2
    console.print("[bold green]the story ran to the end[/]" if result.ok else "[bold red]something did not add up[/]")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
