"""The chain indexer: gpunet events from the chain into the PostgreSQL ledger, exactly once, in order."""

from __future__ import annotations

from coordinator.indexer.service import Indexer

__all__ = ["Indexer"]
