"""How gpunet's own checks of the site launch a browser (tests/web and bench/web): Debian's Chromium,
never a downloaded one, with the flags these machines need. One place, so the tests and the
benchmark measure the same browser."""

from __future__ import annotations

import shutil

__all__ = ["CHROMIUM_ARGS", "MISSING", "chromium_executable"]

# What Chromium needs on these machines (and in CI): no sandbox as root, no GPU, and none of its
# background connections, which a closed network refuses by the dozen.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

MISSING = "no chromium on PATH: scripts/setup installs Debian's (apt-get install chromium)"


def chromium_executable() -> str | None:
    """Debian's Chromium on PATH, or None (the caller says MISSING its own way)."""
    return shutil.which("chromium")
