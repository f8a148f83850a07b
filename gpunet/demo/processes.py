"""The demo's processes, as a user would run them: `gpunet coordinator run` (with its embedded
PostgreSQL) and one `gpunet worker run --simulate-gpus ...` per supplier node. Each writes a
log file in the demo's directory; `stop()` ends them with SIGTERM (SIGKILL after a wait)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from gpunet.localnet import free_ports

__all__ = ["CoordinatorProcess", "WorkerProcess"]


def _gpunet() -> str:
    return str(Path(sys.executable).with_name("gpunet"))


class _Process:
    def __init__(self, argv: list[str], log: Path, env: dict[str, str]) -> None:
        self.argv, self.log, self.env = argv, log, env
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                self.argv, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **self.env}
            )

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL: no goodbye, as when a machine loses power."""
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self, timeout: float = 30) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


class CoordinatorProcess(_Process):
    def __init__(self, workdir: Path, rpc_url: str, ws_url: str, attester_keypair: Path, **settings: object) -> None:
        self.api_port, self.gateway_port = free_ports(2)
        env = {
            "GPUNET_RPC_URL": rpc_url,
            "GPUNET_WS_URL": ws_url,
            "GPUNET_STATE_DIR": str(workdir / "coordinator"),
            "GPUNET_API_PORT": str(self.api_port),
            "GPUNET_GATEWAY_PORT": str(self.gateway_port),
            "GPUNET_ATTESTER_KEYPAIR": str(attester_keypair),
        }
        env |= {f"GPUNET_{k.upper()}": str(v) for k, v in settings.items()}
        super().__init__([_gpunet(), "coordinator", "run"], workdir / "coordinator.log", env)

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    @property
    def gateway_url(self) -> str:
        return f"ws://127.0.0.1:{self.gateway_port}/worker"

    def wait_ready(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise RuntimeError(f"the coordinator exited; see {self.log}")
            try:
                with urllib.request.urlopen(f"{self.api_url}/health", timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"the coordinator did not answer on {self.api_url} in {timeout:.0f} s; see {self.log}")


def loopback_address(number: int) -> str:
    """The address worker `number` of this machine advertises (see WorkerProcess)."""
    return f"127.0.0.{2 + number % 250}"


class WorkerProcess(_Process):
    def __init__(
        self,
        workdir: Path,
        name: str,
        node_keypair: Path,
        gpus: str,
        gateway_url: str,
        api_url: str | None = None,
        *,
        number: int = 0,
        rpc_url: str | None = None,
    ) -> None:
        """`number`: this machine's worker number: several share it, each with its own loopback
        address (127.0.0.<2 + number>, Linux answers on all of 127/8) and 40 cluster ports, so that
        their Ray nodes (and any cluster job's listeners) do not collide."""
        self.name = name
        # with the coordinator's API: checkpoints of any size, through its checkpoint store
        api = ["--api", api_url] if api_url else []
        # with the chain's RPC: the node reads a lease's client there and lets it into its job
        api += ["--url", rpc_url] if rpc_url else []
        first = 30000 + 40 * (number % 800)
        cluster = ["--advertise-addr", loopback_address(number), "--cluster-ports", f"{first}-{first + 39}"]
        super().__init__(
            [
                _gpunet(),
                "worker",
                "run",
                "--keypair",
                str(node_keypair),
                "--simulate-gpus",
                gpus,
                "--gateway",
                gateway_url,
                "--state-dir",
                str(workdir / f"worker-{name}"),
                # the demo's job is a Python script on this machine: a host job, in bubblewrap
                "--allow-host-jobs",
                "--host-job-path",
                str(Path(__file__).parent),
                *api,
                *cluster,
            ],
            workdir / f"worker-{name}.log",
            {
                "GPUNET_WORKER_STOP_GRACE_SECONDS": "3",
                # host jobs only: the demo needs no container engine (nor, as root, the egress filter)
                "GPUNET_WORKER_CONTAINER_ENGINE": "none",
                "GPUNET_WORKER_RAY_CPUS": "1",  # many Ray nodes on one small machine
                # back within the coordinator's reconnect grace after it restarts
                "GPUNET_WORKER_RECONNECT_CAP_SECONDS": "2",
            },
        )
