"""The demo's output reads in an 80-column terminal and opens with the story, not an install's
warnings: quiet installs (scripts/env.sh `quietly`), section titles that fit, and a summary table
that fits and shows the client's share of the slash."""

from __future__ import annotations

import io
import subprocess
from pathlib import Path

import pytest
from rich.console import Console
from solders.keypair import Keypair

from gpunet.demo.story import SECTIONS, WIDTH, short, summary_table, transactions_table

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def _render(renderable: object, width: int = WIDTH) -> str:
    console = Console(width=width, record=True, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


@pytest.mark.parametrize("title", SECTIONS)
def test_every_section_title_fits_80_columns(title) -> None:
    console = Console(width=WIDTH, record=True, file=io.StringIO())
    console.rule(f"[bold]{title}")
    line = console.export_text().rstrip("\n")
    assert title in line and "…" not in line and len(line) <= WIDTH, line


def test_the_summary_fits_80_columns_and_shows_the_clients_share_of_the_slash() -> None:
    sig = short(Keypair().sign_message(b"x"))
    # wider amounts than the demo's terms give (at most 144 GPU-s at 0.1 IO, 21.6 IO escrowed, stakes of
    # 300..500 IO slashed by a tenth, the client's share bounded by its share's worth)
    rows = [
        ("ada", "1440", "143.995 IO", "7.5788 IO", "150.0001 IO", "75.5 IO", ""),
        ("cyd", "1440", "143.995 IO", "7.5788 IO", "-", "-", ""),
        ("client", "", "", "", "", "+75.5 IO", "21.599999 IO"),
    ]
    text = _render(summary_table(Keypair().pubkey(), rows))
    assert "to client" in text and "refunded" in text
    for row in rows:  # every cell whole, on one line
        line = next(line for line in text.splitlines() if line.strip().startswith(row[0]))
        assert all(cell in line for cell in row), line
    assert max(len(line) for line in text.splitlines()) <= WIDTH
    client = next(line for line in text.splitlines() if line.strip().startswith("client"))
    assert "+75.5 IO" in client  # the client's share of the slash, on the client's row
    txs = _render(transactions_table([("client", "finalize", sig), ("ada", "1000 settlements, the last", sig)]))
    assert txs.count(sig) == 2 and max(len(line) for line in txs.splitlines()) <= WIDTH


def _bash(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", f"set -euo pipefail; source {SCRIPTS / 'env.sh'}; {script}"],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_quietly_keeps_a_commands_output_back_unless_it_fails() -> None:
    ok = _bash("quietly sh -c 'echo noisy; echo warning >&2'; echo after")
    assert ok.returncode == 0 and ok.stdout == "after\n" and ok.stderr == ""
    failed = _bash("quietly sh -c 'echo noisy; echo broken >&2; exit 3'; echo not reached")
    assert failed.returncode == 3 and "not reached" not in failed.stdout
    assert "noisy" in failed.stderr and "broken" in failed.stderr and "failed (exit 3)" in failed.stderr


def test_setup_runs_every_pip_install_quietly() -> None:
    lines = [line.strip() for line in (SCRIPTS / "setup").read_text().splitlines() if "pip install" in line]
    assert lines and all(line.startswith('quietly "$PYTHON" -m pip install') for line in lines), lines
