"""The coordinator's read API (starlette): ledger resources, audit, OpenAPI, health and metrics."""

from __future__ import annotations

from coordinator.api.app import create_app

__all__ = ["create_app"]
