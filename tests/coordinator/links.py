"""The gateway's send side as the verification loop sees it (a WorkerLink), for tests that script
the nodes at that boundary: what a link answers besides `send`, which each test writes."""

from __future__ import annotations

from solders.pubkey import Pubkey


class ScriptedLink:
    """Every node in `self.nodes` is online, on this machine, with no latency and no cluster ports."""

    nodes: dict[Pubkey, object]

    def online(self, node_key: Pubkey) -> bool:
        return node_key in self.nodes

    def latency_ms(self, node_key: Pubkey) -> float | None:
        return None

    def host(self, node_key: Pubkey) -> str:
        return "127.0.0.1"

    def cluster_ports(self, node_key: Pubkey) -> None:
        return None
