"""Explorer links for transactions and accounts: a URL template (--explorer, $GPUNET_EXPLORER_URL,
default the Solana Explorer) filled with the kind (tx or address), the id and the cluster (the
Solana Explorer's ?cluster=devnet, or ?cluster=custom&customUrl=... for a local or private node),
shown in rich's [link=...] markup so that terminals make it clickable."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal
from urllib.parse import quote

from gpunet.cluster import CLUSTERS
from gpunet.errors import GpunetError

__all__ = ["DEFAULT_EXPLORER", "Explorer", "ExplorerError", "cluster_query", "explorer_for"]

DEFAULT_EXPLORER = "https://explorer.solana.com/{kind}/{id}{cluster}"
OFF = ("none", "off")
Kind = Literal["tx", "address"]


class ExplorerError(GpunetError, ValueError):
    """An explorer URL template that cannot make links; the message says why."""


def cluster_query(rpc_url: str) -> str:
    """The Solana Explorer's cluster query for an RPC URL: '' (mainnet), '?cluster=devnet', or
    '?cluster=custom&customUrl=<the RPC URL>' for any other node (a local one included)."""
    for name in ("mainnet", "devnet", "testnet"):  # the clusters the Solana Explorer knows by name
        if rpc_url.rstrip("/") == CLUSTERS[name]:
            return "" if name == "mainnet" else f"?cluster={name}"
    return f"?cluster=custom&customUrl={quote(rpc_url, safe='')}"


@dataclass(frozen=True)
class Explorer:
    template: str
    rpc_url: str

    def url(self, kind: Kind, ident: object) -> str:
        return self.template.format(
            kind=kind, id=ident, cluster=cluster_query(self.rpc_url), rpc_url=quote(self.rpc_url, safe="")
        )

    def link(self, kind: Kind, ident: object, text: str | None = None) -> str:
        """`text` (default: the id) as rich markup linking to the explorer; base58 needs no escaping."""
        return f"[link={self.url(kind, ident)}]{text if text is not None else ident}[/link]"


def explorer_for(template: str | None, rpc_url: str, source: str = "--explorer") -> Explorer | None:
    """The explorer of `template` (None: the Solana Explorer; 'none' or 'off': no links) for the
    cluster at `rpc_url`; a template that is not an http(s) URL with {id} is an ExplorerError."""
    if template is None:
        template = DEFAULT_EXPLORER
    if template.strip().lower() in OFF:
        return None
    hint = "for example https://explorer.solana.com/{kind}/{id}{cluster}, or none"
    if not template.startswith(("http://", "https://")) or "{id}" not in template or any(c.isspace() for c in template):
        raise ExplorerError(f"{source}: {template!r} is not an http(s) URL template with {{id}} ({hint})")
    explorer = Explorer(template, rpc_url)
    try:
        explorer.url("tx", "x")
    except (KeyError, IndexError, ValueError) as e:
        raise ExplorerError(
            f"{source}: {template!r} has an unknown field {e} (the fields are {{kind}}, {{id}}, {{cluster}}, "
            f"{{rpc_url}}; {hint})"
        ) from None
    if "[" in template or "]" in template:
        raise ExplorerError(f"{source}: {template!r} has a bracket, which a terminal link cannot carry ({hint})")
    return explorer
