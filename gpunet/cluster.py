"""Which cluster to talk to: a `--url` flag, else $GPUNET_RPC_URL, else Anchor.toml's provider
cluster, else the Solana CLI's config file (json_rpc_url), else localnet. Names follow the Solana CLI
and Anchor (localnet, devnet, testnet, mainnet)."""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from gpunet.errors import GpunetError
from gpunet.solana_config import SolanaConfig, SolanaConfigError, load_solana_config

__all__ = ["CLUSTERS", "Cluster", "ClusterError", "is_local", "pubsub_url", "resolve_cluster"]

CLUSTERS: dict[str, str] = {
    "localnet": "http://127.0.0.1:8899",
    "devnet": "https://api.devnet.solana.com",
    "testnet": "https://api.testnet.solana.com",
    "mainnet": "https://api.mainnet-beta.solana.com",
}
_ALIASES = {
    "l": "localnet",
    "localhost": "localnet",
    "d": "devnet",
    "t": "testnet",
    "m": "mainnet",
    "mainnet-beta": "mainnet",
}


class ClusterError(GpunetError, ValueError):
    """A cluster that is neither a known name nor an http(s) URL."""


@dataclass(frozen=True)
class Cluster:
    rpc_url: str
    ws_url: str
    source: str  # where the choice came from, for error messages: "--url", "GPUNET_RPC_URL", ...


def is_local(rpc_url: str) -> bool:
    """Whether the RPC node runs on this machine (a local cluster: gpunet-localnet, a test validator),
    where simulated GPUs stand in for real ones."""
    host = urlparse(rpc_url).hostname or ""
    return host == "localhost" or host == "::1" or host.startswith("127.")


def pubsub_url(rpc_url: str) -> str:
    """The cluster's PubSub WebSocket by the Solana convention (and gpunet-localnet's): the RPC
    URL over ws(s), on its port + 1 when it names one."""
    parsed = urlparse(rpc_url)
    scheme = "wss" if parsed.scheme == "https" else "ws"
    if parsed.port is None:
        return parsed._replace(scheme=scheme).geturl()
    return parsed._replace(scheme=scheme, netloc=f"{parsed.hostname}:{parsed.port + 1}").geturl()


def _url(value: str, source: str) -> str:
    name = _ALIASES.get(value.strip().lower(), value.strip().lower())
    if name in CLUSTERS:
        return CLUSTERS[name]
    parsed = urlparse(value.strip())
    if parsed.scheme in ("http", "https") and parsed.hostname:
        return value.strip()
    raise ClusterError(f"{source}: {value!r} is neither a cluster name ({', '.join(CLUSTERS)}) nor an http(s) URL")


def _anchor_toml_cluster(start: Path) -> str | None:
    for folder in (start, *start.parents):
        candidate = folder / "Anchor.toml"
        if candidate.is_file():
            try:
                return tomllib.loads(candidate.read_text()).get("provider", {}).get("cluster")
            except (OSError, tomllib.TOMLDecodeError):
                return None
    return None


def resolve_cluster(
    flag: str | None = None, *, cwd: Path | None = None, ws_flag: str | None = None, solana_config: Path | None = None
) -> Cluster:
    """The cluster from the first of: flag, $GPUNET_RPC_URL, Anchor.toml (cwd or a parent), the Solana
    CLI's config file (`solana_config`, default ~/.config/solana/cli/config.yml: json_rpc_url), localnet.
    The PubSub URL comes from `ws_flag` or $GPUNET_WS_URL, else the config file's websocket_url when
    its json_rpc_url was taken, else the RPC URL's port + 1."""
    config_ws = None
    if flag:
        value, source = flag, "--url"
    elif env := os.environ.get("GPUNET_RPC_URL"):
        value, source = env, "GPUNET_RPC_URL"
    elif toml := _anchor_toml_cluster(cwd or Path.cwd()):
        value, source = toml, "Anchor.toml"
    elif (config := _solana_config(solana_config)) and config.json_rpc_url:
        value, source, config_ws = config.json_rpc_url, f"{config.path} (json_rpc_url)", config.websocket_url
    else:
        value, source = "localnet", "default"
    rpc_url = _url(value, source)
    ws = ws_flag or os.environ.get("GPUNET_WS_URL") or config_ws or pubsub_url(rpc_url)
    return Cluster(rpc_url=rpc_url, ws_url=ws, source=source)


def _solana_config(path: Path | None) -> SolanaConfig | None:
    try:
        return load_solana_config(path)
    except SolanaConfigError as e:
        raise ClusterError(str(e)) from None
