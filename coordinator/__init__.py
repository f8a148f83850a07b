"""gpunet coordinator: chain indexer, PostgreSQL ledger, audit and the read API."""
