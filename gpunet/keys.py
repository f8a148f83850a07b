"""Keypair files in the Solana CLI format (a JSON array of 64 bytes), created owner-only."""

from __future__ import annotations

import json
import os
from pathlib import Path

from solders.keypair import Keypair

from gpunet.errors import GpunetError

__all__ = [
    "KeypairFileError",
    "NodeKeyNotFound",
    "create_keypair_file",
    "load_keypair",
    "load_node_keypair",
    "new_node_name",
    "node_keypair_path",
    "nodes_dir",
]


class KeypairFileError(GpunetError):
    """A keypair file is missing, unreadable or not a Solana CLI keypair; the message says which."""


class NodeKeyNotFound(KeypairFileError):
    """No node key of that name under nodes_dir(); the message says how to create it."""


def load_keypair(path: str | os.PathLike[str]) -> Keypair:
    """Reads a Solana CLI keypair file. Errors name the file, never its content."""
    path = Path(path).expanduser()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise KeypairFileError(f"{path}: no such keypair file (create one with `gpunet keys new {path}`)") from None
    except OSError as e:
        raise KeypairFileError(f"{path}: cannot read keypair file: {e.strerror}") from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError:
        raise KeypairFileError(f"{path}: not a keypair file (expected a JSON array of 64 numbers)") from None
    if not (isinstance(raw, list) and len(raw) == 64 and all(isinstance(b, int) and 0 <= b <= 255 for b in raw)):
        raise KeypairFileError(f"{path}: not a keypair file (expected a JSON array of 64 numbers 0-255)")
    try:
        keypair = Keypair.from_bytes(bytes(raw))
    except ValueError:
        raise KeypairFileError(f"{path}: the 64 bytes are not a valid ed25519 keypair") from None
    return keypair


def create_keypair_file(path: str | os.PathLike[str], keypair: Keypair | None = None) -> Keypair:
    """Writes a new (or the given) keypair to `path` with mode 0600; refuses to overwrite."""
    path = Path(path).expanduser()
    keypair = keypair or Keypair()
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        # O_EXCL: never clobber an existing key; 0o600 from the start, not chmod afterwards.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise KeypairFileError(f"{path}: already exists; refusing to overwrite a keypair") from None
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(list(bytes(keypair)), f)
    return keypair


def nodes_dir() -> Path:
    """Where node keys live by default: the user's config directory, never the working directory
    (a key written into a checkout is one `git add .` from being published)."""
    return Path(os.environ.get("XDG_CONFIG_HOME") or "~/.config").expanduser() / "gpunet" / "nodes"


def node_keypair_path(name_or_path: str | os.PathLike[str]) -> Path:
    """A node key by name ('node1' -> nodes_dir()/node1.json) or, with a '/' or a '.json', by path."""
    text = str(name_or_path)
    if os.sep in text or "/" in text or text.endswith(".json") or text.startswith("~"):
        return Path(text).expanduser()
    return nodes_dir() / f"{text}.json"


def load_node_keypair(name_or_path: str | os.PathLike[str]) -> Keypair:
    """The node key `gpunet node register` and `gpunet worker -k` take: a name (node_keypair_path) or a
    keypair file. A name with no key file is NodeKeyNotFound, saying how to create it."""
    path, name = node_keypair_path(name_or_path), str(name_or_path)
    if path == nodes_dir() / f"{name}.json" and not path.exists():
        raise NodeKeyNotFound(
            f"no node key named {name!r} (no {path}): create it with `gpunet keys new-node {name}`, or give "
            "the key's file (a path with '/' or ending in .json)"
        )
    return load_keypair(path)


def new_node_name() -> str:
    """The first of node1, node2, ... without a key file under nodes_dir()."""
    n = 1
    while (nodes_dir() / f"node{n}.json").exists():
        n += 1
    return f"node{n}"
