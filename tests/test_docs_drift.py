"""The documentation names only what exists: every repository path the README and the docs site (docs/) put in
backticks is a tracked file or directory (or a build output the set-up makes), and every
`GPUNET_*` variable they name is a coordinator or worker setting or one the code reads. This keeps
one kind of drift out: a page describing a module, a script or a setting that was renamed or
removed (docs/architecture.md once called landed features future work by their old module names)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from coordinator.settings import Settings
from gpunet.exits import Exit
from worker.agent import WorkerSettings

REPO = Path(__file__).resolve().parents[1]
# Made by the set-up, not tracked (scripts/web-setup builds the wallet app's bundle).
BUILT = {"coordinator/web/static/wallet.js"}


def _tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True)
    return out.stdout.split()


def _docs() -> dict[str, str]:
    return {str(p.relative_to(REPO)): p.read_text() for p in [REPO / "README.md", *sorted(REPO.glob("docs/**/*.md"))]}


def _paths_named(text: str, tops: set[str]) -> set[str]:
    """Backticked tokens that are repository paths: under a top-level directory of the repository,
    with a slash or a source file's suffix; placeholders and options are left out."""
    found = set()
    for token in re.findall(r"`([^`\s]+)`", text):
        token = token.rstrip(".,:;")
        if any(c in token for c in "<>{}*$~") or token.startswith(("-", "/", "http")):
            continue
        path = token.split(":")[0]
        if path.split("/")[0] in tops and ("/" in path or path.endswith((".py", ".rs", ".md"))):
            found.add(path.rstrip("/"))
    return found


def test_every_repository_path_the_docs_name_exists() -> None:
    tracked = _tracked()
    tops = {t.split("/")[0] for t in tracked if "/" in t}
    directories = {str(parent) for t in tracked for parent in Path(t).parents}
    missing = {
        (doc, path)
        for doc, text in _docs().items()
        for path in _paths_named(text, tops)
        if path not in tracked and path not in directories and path not in BUILT
    }
    assert not missing, f"named in the docs, not in the repository: {sorted(missing)}"


def test_every_setting_the_docs_name_is_one_the_code_knows() -> None:
    known = {f"GPUNET_{name.upper()}" for name in Settings.model_fields}
    known |= {f"GPUNET_WORKER_{name.upper()}" for name in WorkerSettings.model_fields}
    for path in _tracked():
        if path.endswith((".py", ".rs", ".sh")) or path.startswith(("scripts/", ".ci/")):
            known |= set(re.findall(r"GPUNET_[A-Z0-9_]+", (REPO / path).read_text(errors="ignore")))
    named = {(doc, name) for doc, text in _docs().items() for name in re.findall(r"GPUNET_[A-Z0-9_]+", text)}
    # a family (`GPUNET_ENDPOINT_*`) is known when one of its settings is
    unknown = {
        (doc, n) for doc, n in named if n not in known and not (n.endswith("_") and any(k.startswith(n) for k in known))
    }
    assert not unknown, f"named in the docs, read by nothing: {sorted(unknown)}"


def test_the_guard_sees_a_renamed_module_and_an_unknown_setting() -> None:
    """The control: the same checks on a page that names what does not exist."""
    tracked = _tracked()
    tops = {t.split("/")[0] for t in tracked if "/" in t}
    page = "Replicas are future work (`coordinator/replicas.py`, `GPUNET_REPLICA_COUNT`)."
    assert _paths_named(page, tops) == {"coordinator/replicas.py"}
    assert "coordinator/replicas.py" not in tracked
    assert "GPUNET_REPLICA_COUNT" not in {f"GPUNET_{n.upper()}" for n in Settings.model_fields}


def test_every_exit_code_is_in_the_cli_page() -> None:
    """docs/cli.md lists the exit codes as `· N meaning`: one for each of gpunet.exits.Exit (the
    worker's 10-13 and 16 were once missing)."""
    listed = {
        int(n) for n in re.findall(r"(?:^|· |Exit codes: )(\d+) ", (REPO / "docs" / "cli.md").read_text(), re.MULTILINE)
    }
    assert {int(code) for code in Exit} - listed == set()
