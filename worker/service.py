"""The worker as a systemd service (`gpunet worker install|uninstall`): its unit and environment file.

The unit runs `gpunet worker run` with the node key where it is and the settings from an environment
file (`GPUNET_WORKER_*`, `GPUNET_RPC_URL`), restarts it on failure (but not on the exits a restart
cannot fix: a bad setting, key or state directory, no GPUs, no sandbox, a node not registered),
gives its jobs their stop grace on SIGTERM, and keeps the journal in `/var/lib/gpunet-worker`.

Hardening: the unit takes the options that leave the worker's own work alone: ProtectClock,
ProtectKernelModules, ProtectKernelLogs, RestrictRealtime, LockPersonality, RestrictSUIDSGID and a
0077 umask. It cannot take the rest, because of what the worker does as root:
- ProtectSystem=strict, ProtectHome, PrivateTmp: rootful podman keeps its images and containers
  under /var/lib/containers and /run, bubblewrap mounts the host paths a host job may read, and a
  job's inputs and checkpoints live in the state directory;
- RestrictNamespaces, PrivateNetwork, PrivateUsers: every job runs in namespaces of its own
  (podman's runc, bubblewrap), and a cluster lease's jobs share a network namespace;
- NoNewPrivileges, CapabilityBoundingSet: runc and conmon need their capabilities (CAP_SYS_ADMIN,
  CAP_NET_ADMIN for the network namespace, CAP_SETUID for a host job's uid);
- ProtectKernelTunables, ProtectControlGroups: podman creates each container's cgroup and the
  egress filter writes nftables rules (net.netfilter).
Uninstalling removes the unit and the environment file only: the node key and the state directory
(the usage journal, checkpoints) stay, so a reinstall, or an upgrade, goes on where it stopped."""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["ENV_FILE", "STATE_DIR", "UNIT", "UNIT_NAME", "Service", "ServiceError", "install", "uninstall"]

UNIT_NAME = "gpunet-worker.service"
UNIT = Path("etc/systemd/system") / UNIT_NAME  # under the root: / for the machine's systemd
ENV_FILE = Path("etc/gpunet/worker.env")
STATE_DIR = Path("/var/lib/gpunet-worker")  # systemd makes it (StateDirectory=), owned by the service
# `gpunet worker run` exits a restart cannot fix (gpunet.exits): bad settings 2, keypair 3, no GPUs 10,
# unusable state 11, no sandbox 12, not registered 13.
NO_RESTART_EXITS = (2, 3, 10, 11, 12, 13)
STOP_SECONDS = 60  # SIGTERM to SIGKILL for the agent, its jobs' own grace (10 s by default) included


class ServiceError(Exception):
    """The service cannot be written as asked; nothing was changed."""


@dataclass(frozen=True)
class Service:
    """What the unit runs: the worker's command with this interpreter, the node key, and its settings."""

    keypair: Path  # absolute: the service does not run in the installer's directory
    settings: dict[str, str] = field(default_factory=dict)  # GPUNET_* -> value, into the environment file
    simulate_gpus: str | None = None
    # the `gpunet` command of the environment the installer runs in (its worker extra installed)
    program: Path = field(default_factory=lambda: Path(sys.executable).with_name("gpunet"))

    def __post_init__(self) -> None:
        if not self.keypair.is_absolute():
            raise ServiceError(f"the node key's path {self.keypair} must be absolute")
        if not self.program.is_absolute():
            raise ServiceError(f"the gpunet command's path {self.program} must be absolute")
        for key, value in self.settings.items():
            if not key.startswith("GPUNET_") or not key.replace("_", "").isalnum() or not key.isupper():
                raise ServiceError(f"{key!r} is not a gpunet setting (GPUNET_WORKER_..., GPUNET_RPC_URL)")
            if any(c in value for c in "\n\r\0"):
                raise ServiceError(f"{key}'s value has a line break")

    def command(self) -> str:
        args = [str(self.program), "worker", "run", "--keypair", str(self.keypair)]
        if self.simulate_gpus:
            args += ["--simulate-gpus", self.simulate_gpus]
        return shlex.join(args)

    def unit(self) -> str:
        return f"""[Unit]
Description=gpunet worker node: runs leased jobs on this machine's GPUs and signs their usage
After=network-online.target
Wants=network-online.target

[Service]
Type=exec
EnvironmentFile=/{ENV_FILE}
ExecStart={self.command()}
StateDirectory={STATE_DIR.name}
StateDirectoryMode=0700
Restart=on-failure
RestartSec=5
RestartPreventExitStatus={" ".join(map(str, NO_RESTART_EXITS))}
KillMode=mixed
TimeoutStopSec={STOP_SECONDS}
LimitNOFILE=65536
UMask=0077
ProtectClock=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
LockPersonality=yes

[Install]
WantedBy=multi-user.target
"""

    def environment(self) -> str:
        lines = ["# gpunet worker settings (gpunet worker install); the unit reads them at each start"]
        settings = {"GPUNET_WORKER_STATE_DIR": str(STATE_DIR), **self.settings}
        lines += [f"{key}={_quoted(value)}" for key, value in sorted(settings.items())]
        return "\n".join(lines) + "\n"


def _quoted(value: str) -> str:
    """A value as systemd's EnvironmentFile reads it back unchanged."""
    if value and all(c.isalnum() or c in "-_./:,@+=%" for c in value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$") + '"'


def install(service: Service, root: Path) -> list[Path]:
    """Writes the unit and the environment file (mode 0600: it may hold an API token) under `root`;
    the paths written."""
    unit, env = root / UNIT, root / ENV_FILE
    for path in (unit, env):
        path.parent.mkdir(parents=True, exist_ok=True)
    env.touch(mode=0o600)
    env.chmod(0o600)
    env.write_text(service.environment())
    unit.write_text(service.unit())
    unit.chmod(0o644)
    return [unit, env]


def uninstall(root: Path) -> list[Path]:
    """Removes the unit and the environment file under `root` (the node key and the state directory
    stay); the paths removed."""
    removed = []
    for path in (root / UNIT, root / ENV_FILE):
        if path.exists():
            path.unlink()
            removed.append(path)
    return removed
