"""Moving a job's checkpoint directory between nodes: the agent sends it to the coordinator when
it changes, and a job dispatched with `restore` starts from it on a new node."""

from __future__ import annotations

from pathlib import Path

from gpunet.protocol import MAX_CHECKPOINT_BYTES, CheckpointFile

__all__ = ["CheckpointTooLarge", "fingerprint", "restore", "snapshot"]


class CheckpointTooLarge(ValueError):
    """The checkpoint is over what one message carries; it stays on this node only."""


def _files(directory: Path) -> list[Path]:
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.rglob("*") if p.is_file() and not p.is_symlink())


def fingerprint(directory: Path) -> tuple[tuple[str, int, int], ...]:
    """Cheap change detection: (path, size, mtime) of every file."""
    out = []
    for p in _files(directory):
        try:
            st = p.stat()
        except FileNotFoundError:  # replaced while we looked (an atomic rename): seen next time
            continue
        out.append((str(p.relative_to(directory)), st.st_size, st.st_mtime_ns))
    return tuple(out)


def snapshot(directory: Path) -> list[CheckpointFile]:
    """Every file of the directory as CheckpointFiles; CheckpointTooLarge over the message limit."""
    files, total = [], 0
    for p in _files(directory):
        try:
            data = p.read_bytes()
        except FileNotFoundError:
            continue
        total += len(data)
        if total > MAX_CHECKPOINT_BYTES:
            raise CheckpointTooLarge(f"checkpoint of {directory} is over {MAX_CHECKPOINT_BYTES} bytes")
        files.append(CheckpointFile.of(str(p.relative_to(directory)), data))
    return files


def restore(directory: Path, files: list[CheckpointFile]) -> int:
    """Writes `files` into an empty checkpoint directory (a non-empty one is this node's own, newer
    state and is kept). Returns how many files were written; ValueError on a corrupt file."""
    if not files or _files(directory):
        return 0
    contents = [(f.path, f.content()) for f in files]  # all checked before anything is written
    for path, data in contents:
        target = directory / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return len(contents)
