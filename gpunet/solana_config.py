"""The Solana CLI's configuration file (`~/.config/solana/cli/config.yml`, written by `solana config
set`): its RPC URL, WebSocket URL, keypair path and commitment, which gpunet uses like the Solana CLI
does when no flag or environment variable says otherwise. Read with PyYAML when it is installed,
else with a minimal reader of the file's top-level `key: value` lines (a wallet's install does not
need PyYAML)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpunet.errors import GpunetError

__all__ = ["COMMITMENTS", "SOLANA_CONFIG", "SolanaConfig", "SolanaConfigError", "commitment_name", "load_solana_config"]

SOLANA_CONFIG = Path("~/.config/solana/cli/config.yml")
COMMITMENTS = ("processed", "confirmed", "finalized")
# The Solana CLI still accepts these older names.
_OLD_COMMITMENTS = {
    "recent": "processed",
    "single": "confirmed",
    "singlegossip": "confirmed",
    "max": "finalized",
    "root": "finalized",
}


class SolanaConfigError(GpunetError, ValueError):
    """The Solana CLI's configuration file cannot be read or makes no sense; the message names it."""


@dataclass(frozen=True)
class SolanaConfig:
    path: Path
    json_rpc_url: str | None = None
    websocket_url: str | None = None
    keypair_path: str | None = None
    commitment: str | None = None  # one of COMMITMENTS


def commitment_name(value: str, source: str) -> str:
    """processed, confirmed or finalized (the Solana CLI's older names mapped to them)."""
    name = value.strip().lower()
    name = _OLD_COMMITMENTS.get(name, name)
    if name not in COMMITMENTS:
        raise SolanaConfigError(f"{source}: commitment {value!r} is not one of {', '.join(COMMITMENTS)}")
    return name


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def _minimal_yaml(text: str, path: Path) -> dict[str, Any]:
    """The top-level `key: value` pairs of a YAML mapping (nested blocks, such as address_labels, skipped)."""
    values: dict[str, Any] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip()
        if not line.strip() or line.lstrip().startswith("#") or line.strip() in ("---", "..."):
            continue
        if line[0] in " \t":  # inside a nested block
            continue
        key, sep, value = line.partition(":")
        if not sep or not key.strip():
            raise SolanaConfigError(f"{path}: line {number} is not 'key: value': {line[:80]!r}")
        value = value.strip()
        if value.startswith(("'", '"')):
            quoted = value.rstrip()
            if len(quoted) < 2 or quoted[-1] != quoted[0]:
                raise SolanaConfigError(f"{path}: line {number} has an unclosed quote: {line[:80]!r}")
        elif " #" in value:
            value = value.split(" #", 1)[0].rstrip()
        values[_unquote(key.strip())] = _unquote(value) if value else None
    return values


def _parse(text: str, path: Path) -> dict[str, Any]:
    try:
        import yaml
    except ImportError:
        return _minimal_yaml(text, path)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise SolanaConfigError(f"{path}: not valid YAML: {e}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SolanaConfigError(f"{path}: not a YAML mapping of settings (json_rpc_url: ..., keypair_path: ...)")
    return data


def _text(data: dict[str, Any], key: str, path: Path) -> str | None:
    value = data.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise SolanaConfigError(f"{path}: {key} must be text, got {value!r}")
    return value


def load_solana_config(path: Path | None = None) -> SolanaConfig | None:
    """The Solana CLI's settings from `path` (default ~/.config/solana/cli/config.yml); None when
    there is no such file. A file that cannot be read or parsed is a SolanaConfigError naming it."""
    path = (path or SOLANA_CONFIG).expanduser()
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise SolanaConfigError(f"{path}: cannot be read: {e}") from None
    data = _parse(text, path)
    commitment = _text(data, "commitment", path)
    return SolanaConfig(
        path=path,
        json_rpc_url=_text(data, "json_rpc_url", path),
        websocket_url=_text(data, "websocket_url", path),
        keypair_path=_text(data, "keypair_path", path),
        commitment=None if commitment is None else commitment_name(commitment, str(path)),
    )
