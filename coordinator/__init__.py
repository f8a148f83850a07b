"""The gpunet coordinator: chain indexer, PostgreSQL ledger, scheduler, worker gateway, settlement, HTTP API."""
