"""The guides' shell sessions run, as written, against a local market: the supplier's first five
minutes (docs/supplier/first-node.md), then the client's first lease on that node
(docs/client/first-lease.md), then the audit of that lease (docs/audit.md), one bash session with
`set -euo pipefail` in a scratch directory with a scratch HOME. A documented command that stops
working fails this test, which names its page, line and output.

How a block is marked runnable: an HTML comment on its own line, `<!-- runnable: NAME -->`, before
a ```bash fence. Neither GitHub nor MkDocs shows a comment, and the fence stays a plain `bash` one,
so both highlight it as they do any other (a fence attribute such as ```bash {.runnable} would need
attr_list's fence syntax, which GitHub shows as part of the language name). The NAME says which
session it is, so a misspelt or misplaced marker is an error here, not a block quietly left out.
The runner is a small one of our own (tests/doc_examples.py), not a doctest tool: the sessions start
background processes (the node, the coordinator, the worker) and hand shell variables from page
to page, which one bash process does as a reader's shell would, and tools that run each block or
line apart (or compare outputs) do not.

The pages use the commands' default ports. The session runs in a network namespace of its own
where the machine allows one (a root or user namespace: `unshare --net`), so those ports are free
whatever else runs here; otherwise on this machine, when they are free. `gpunet localnet` has no
setting for its ports and the worker's `--api` must be spelt out, so environment variables could
not move them without the pages saying more than a reader needs. What the test does set is the
machine's, not the pages': GPUNET_LOCALNET_BIN (the node the suite built: the scratch HOME has no
build cache) and GPUNET_WORKER_CONTAINER_ENGINE=none (the pages' jobs name no image, and this
machine's container engine may not run containers)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.doc_examples import Block, MarkerError, Outcome, blocks, gpunet_commands, run_session

REPO = Path(__file__).resolve().parents[1]
# The sessions, in the order they run, and the least number of gpunet commands each holds.
SESSIONS = (
    ("docs/supplier/first-node.md", "first-node", 15),
    ("docs/client/first-lease.md", "first-lease", 20),
    ("docs/audit.md", "audit", 3),
)
# Settings of the machine, not of the pages: the session's own worker runs host jobs only (this
# machine's container engine, if any, may not run containers; the pages' jobs name no image).
MACHINE = {"GPUNET_WORKER_CONTAINER_ENGINE": "none"}
# Passed on from the test's environment: which program build the local node runs (scripts/test).
PASSED_ON = ("GPUNET_PROGRAM_SO", "GPUNET_SBF_STACK_FRAME_GAPS")
SESSION_TIMEOUT = 240


def _session() -> list[Block]:
    found = []
    for page, name, _ in SESSIONS:
        found += [b for b in blocks(page, (REPO / page).read_text()) if b.name == name]
    return found


def _env(home: Path, localnet_bin: Path) -> dict[str, str]:
    """The test's environment without anything that points gpunet elsewhere (GPUNET_*, SOLANA_*,
    XDG_* directories): a reader's fresh shell, with the venv's gpunet first on PATH."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("GPUNET_", "SOLANA_", "XDG_", "ANCHOR_")) or k in PASSED_ON
    }
    venv_bin = str(Path(sys.executable).parent)
    env |= {"HOME": str(home), "PATH": f"{venv_bin}:{env.get('PATH', '/usr/bin:/bin')}"}
    env |= {"GPUNET_LOCALNET_BIN": str(localnet_bin), **MACHINE}
    return env


def _running_in(directory: Path) -> list[int]:
    """The processes whose working directory is under `directory` (the session's all are)."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and Path(os.readlink(proc / "cwd")).is_relative_to(directory):
                pids.append(int(proc.name))
        except OSError:
            continue
    return pids


def _report(outcome: Outcome, workdir: Path) -> str:
    parts = [
        f"the doc session {'ran past its time' if outcome.returncode is None else f'exited {outcome.returncode}'} "
        f"({outcome.how})",
        outcome.failed_at() or "(no failing command named: see the trace)",
        "--- the session's last 80 lines (trace: + PAGE:LINE: command) ---",
        *outcome.output.splitlines()[-80:],
    ]
    for log in ("localnet.log", "coordinator.log", "worker.log", "watch.log"):
        if (workdir / log).exists():
            parts += [f"--- {log}, last 15 lines ---", *(workdir / log).read_text(errors="replace").splitlines()[-15:]]
    return "\n".join(parts)


def test_the_guides_hold_the_three_sessions() -> None:
    """Each page holds its session, once, and no other marker: a marker typo fails here."""
    for page, name, least in SESSIONS:
        found = blocks(page, (REPO / page).read_text())
        assert [b.name for b in found] == [name], f"{page}: runnable blocks {[b.name for b in found]}"
        commands = gpunet_commands(found[0])
        assert len(commands) >= least, f"{page}: {len(commands)} gpunet commands, expected {least} or more"
    session = _session()
    assert [(b.page, b.name) for b in session] == [(p, n) for p, n, _ in SESSIONS]


def test_a_misspelt_or_misplaced_marker_is_an_error() -> None:
    for page in (
        "<!-- runnable:x -->\n\n```bash\ntrue\n```\n",  # not the marker's form
        "<!-- runnable: x -->\n\n```sh\ntrue\n```\n",  # not a bash fence
        "<!-- runnable: x -->\n\nsome prose\n\n```bash\ntrue\n```\n",  # not right before it
        "<!-- runnable: x -->\n\n```bash\ntrue\n",  # never closed
    ):
        with pytest.raises(MarkerError):
            blocks("page.md", page)
    page = "# t\n\n<!-- runnable: x -->\n\n```bash\ngpunet a\nX=$(gpunet b | f)\n# gpunet c\n```\n"
    [block] = blocks("page.md", page)
    assert (block.first_line, gpunet_commands(block)) == (6, ["gpunet a", "X=$(gpunet b | f)"])


def test_a_failing_command_fails_the_session_and_is_named(tmp_path, localnet_bin) -> None:
    """The control: a page whose second command has a wrong option stops there, named with its
    page and line, and what came after it never runs."""
    page = (
        "# t\n\n<!-- runnable: x -->\n\n```bash\n"
        "gpunet keys new a.json\ngpunet keys new --no-such-option b.json\ntouch after\n```\n"
    )
    session = blocks("docs/broken.md", page)
    home = tmp_path / "home"
    home.mkdir()
    outcome = run_session(session, tmp_path, _env(home, localnet_bin), timeout=60)
    assert outcome.returncode not in (0, None), outcome.output
    failed = outcome.failed_at()
    assert failed and "docs/broken.md:7: gpunet keys new --no-such-option b.json" in failed, outcome.output
    assert "No such option" in outcome.output and not (tmp_path / "work" / "after").exists()


@pytest.mark.timeout(SESSION_TIMEOUT + 60)
def test_the_guides_sessions_run_as_written(tmp_path, localnet_bin) -> None:
    home = tmp_path / "home"
    home.mkdir()
    outcome = run_session(_session(), tmp_path, _env(home, localnet_bin), timeout=SESSION_TIMEOUT)
    assert outcome.returncode == 0, _report(outcome, tmp_path / "work")
    # what the session left: the job's checkpoint, downloaded; the lease closed and settled
    assert (tmp_path / "work" / "results" / "epoch").read_text().strip() == "3"
    assert not _running_in(tmp_path), "processes of the session still run"
