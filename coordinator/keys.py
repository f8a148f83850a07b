"""The one node-key type inside the coordinator process: a node is its worker's signing key as a
`Pubkey` everywhere (fleet, gateway, scheduler, loops). Text exists only at the edges: SQL rows
(`coordinator.db.*` converts), JSON and logs."""

from __future__ import annotations

from solders.pubkey import Pubkey

__all__ = ["NodeKey"]

NodeKey = Pubkey
