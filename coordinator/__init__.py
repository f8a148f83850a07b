"""The gpunet coordinator: chain indexer, PostgreSQL ledger, scheduler, worker gateway, settlement, HTTP API."""

from gpunet.extras import require

# Without `gpunet[coordinator]`, say which extra to install rather than fail on asyncpg's name later.
require("coordinator")
