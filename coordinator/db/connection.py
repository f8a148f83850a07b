"""The connection type every function of the database layer takes: a plain connection, or one
acquired from the pool (a proxy of one), which is what the coordinator's code holds."""

from __future__ import annotations

from typing import TypeAlias

import asyncpg
from asyncpg.pool import PoolConnectionProxy

__all__ = ["Connection"]

Connection: TypeAlias = "asyncpg.Connection[asyncpg.Record] | PoolConnectionProxy[asyncpg.Record]"
