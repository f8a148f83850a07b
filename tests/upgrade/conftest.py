"""The coordinator tests' embedded PostgreSQL (a fresh database per test) and the `spawned`
processes killed at teardown, for the upgrade test."""

from tests.coordinator.conftest import database_url, pg_server, spawned

__all__ = ["database_url", "pg_server", "spawned"]
