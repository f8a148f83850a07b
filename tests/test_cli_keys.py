"""`gpunet keys`: files in the Solana CLI format, 0600, never overwritten, secrets never printed."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from gpunet.cli import app
from gpunet.keys import load_keypair

runner = CliRunner()


def test_new_then_show_prints_the_public_key_only(tmp_path: Path) -> None:
    path = tmp_path / "wallet.json"
    created = runner.invoke(app, ["keys", "new", str(path), "--json"])
    assert created.exit_code == 0, created.output
    pubkey = json.loads(created.stdout)["pubkey"]
    assert pubkey == str(load_keypair(path).pubkey())
    assert stat.S_IMODE(path.stat().st_mode) == 0o600

    shown = runner.invoke(app, ["keys", "show", str(path)])
    assert shown.exit_code == 0
    assert shown.stdout.split() == [pubkey, str(path)]  # the public key and the path, nothing else


def test_new_refuses_to_overwrite(tmp_path: Path) -> None:
    path = tmp_path / "wallet.json"
    assert runner.invoke(app, ["keys", "new", str(path)]).exit_code == 0
    before = path.read_text()
    again = runner.invoke(app, ["keys", "new", str(path)])
    assert again.exit_code == 3 and "already exists" in again.stderr
    assert path.read_text() == before


def test_show_explains_a_missing_or_malformed_file(tmp_path: Path) -> None:
    missing = runner.invoke(app, ["keys", "show", str(tmp_path / "nope.json")])
    assert missing.exit_code == 3 and "no such keypair file" in missing.stderr
    bad = tmp_path / "bad.json"
    bad.write_text("[1,2,3]")
    malformed = runner.invoke(app, ["keys", "show", str(bad)])
    assert malformed.exit_code == 3 and "64 numbers" in malformed.stderr


def test_the_gpunet_command_is_installed() -> None:
    exe = Path(sys.executable).parent / "gpunet"
    out = subprocess.run([str(exe), "keys", "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "new" in out.stdout and "show" in out.stdout
