"""A wallet's install: `pip install gpunet` with no extra, into a fresh venv, from the checkout's
package files and under the lock (constraints.txt), as a user would get it. The chain commands
work; the services are not there, and asking for them says which extra to install, in one line.

It installs from the package registry (pip's cache makes a second run quick): ~20-40 s."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpunet.exits import Exit
from gpunet.extras import EXTRAS

REPO = Path(__file__).resolve().parents[1]
# What a build of gpunet reads: building from a copy keeps build/ and *.egg-info out of the checkout.
PACKAGE_FILES = ("pyproject.toml", "gpunet", "coordinator", "worker")


def _run(*args: str | Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    # Wide enough that --help does not wrap an extra's name.
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture(scope="module")
def base_venv(tmp_path_factory) -> Path:
    """A venv with `pip install gpunet` (no extra) of this checkout; returns its bin/."""
    root = tmp_path_factory.mktemp("base-install")
    source = root / "gpunet"
    source.mkdir()
    for name in PACKAGE_FILES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(REPO / name, source / name)
    venv = root / "venv"
    # No pip of its own (ensurepip takes seconds): this venv's pip installs into it with --python.
    made = _run(sys.executable, "-m", "venv", "--without-pip", venv)
    assert made.returncode == 0, made.stderr
    installed = _run(
        sys.executable,
        "-m",
        "pip",
        "--python",
        venv / "bin" / "python",
        "install",
        "--quiet",
        "--constraint",
        REPO / "constraints.txt",
        source,
        timeout=240,
    )
    assert installed.returncode == 0, (
        f"pip install gpunet failed (is the package registry reachable?):\n{installed.stderr}"
    )
    return venv / "bin"


@pytest.mark.timeout(300)
def test_a_plain_install_leaves_the_services_packages_out(base_venv: Path) -> None:
    modules = sorted({m for ms in EXTRAS.values() for m in ms})
    found = _run(
        base_venv / "python",
        "-c",
        f"import importlib.util, json; print(json.dumps([m for m in {modules!r} if importlib.util.find_spec(m)]))",
    )
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout) == [], "a plain install brought a service's packages"


@pytest.mark.timeout(300)
def test_a_plain_install_makes_a_wallet(base_venv: Path, tmp_path: Path) -> None:
    wallet = tmp_path / "wallet.json"
    made = _run(base_venv / "gpunet", "keys", "new", wallet, "--json")
    assert made.returncode == 0, made.stderr
    shown = _run(base_venv / "gpunet", "keys", "show", wallet)
    assert shown.returncode == 0 and json.loads(made.stdout)["pubkey"] in shown.stdout


@pytest.mark.timeout(300)
@pytest.mark.parametrize("service", sorted(EXTRAS))
def test_importing_a_service_without_its_extra_names_the_extra(base_venv: Path, service: str) -> None:
    script = f"try:\n    import {service}\nexcept ImportError as e:\n    print(e)\nelse:\n    print('imported')"
    imported = _run(base_venv / "python", "-c", script)
    assert imported.returncode == 0, imported.stderr  # an ImportError, caught as one
    assert f"pip install 'gpunet[{service}]'" in imported.stdout


@pytest.mark.timeout(300)
@pytest.mark.parametrize("service", sorted(EXTRAS))
@pytest.mark.parametrize("args", [["run"], [], ["run", "--help"]])
def test_a_service_command_without_its_extra_says_which_to_install(
    base_venv: Path, service: str, args: list[str]
) -> None:
    ran = _run(base_venv / "gpunet", service, *args)
    assert ran.returncode == Exit.NOT_INSTALLED
    assert ran.stdout == ""
    assert ran.stderr.splitlines() == [ran.stderr.strip()], f"not one line:\n{ran.stderr}"
    assert ran.stderr.startswith(f"gpunet {service}: ") and f"pip install 'gpunet[{service}]'" in ran.stderr


@pytest.mark.timeout(300)
def test_the_help_lists_the_services_with_their_extras(base_venv: Path) -> None:
    shown = _run(base_venv / "gpunet", "--help")
    assert shown.returncode == 0
    text = " ".join(shown.stdout.split())
    for service in EXTRAS:
        assert f"gpunet[{service}]" in text
