"""Ray clusters on leases (a job with `ray: true`): every node of the lease runs one Ray node with
the lease's GPUs on it only; rank 0 runs the head, the others join it. Each Ray node takes every
port it opens from its worker's advertised cluster ports (`RayPorts`), so peers reach it through
what the supplier opened, and several Ray nodes can share one machine. The coordinator derives the
head's addresses (GCS, dashboard and Jobs API) from the same layout to tell the client."""

from __future__ import annotations

import json
import urllib.request
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from gpunet.protocol import PortRange

__all__ = ["MIN_RAY_PORTS", "RAY_INSTALL", "RAY_VERSION", "RayPorts", "alive_nodes", "ray_endpoints", "ray_token"]

# The one Ray version on both sides (the `ray` extra pins it; a node with another refuses Ray jobs).
RAY_VERSION = "2.60.0"
RAY_INSTALL = "pip install 'gpunet[ray]'"
MIN_RAY_PORTS = 20  # the fixed ports below and at least ten for Ray's worker processes


@dataclass(frozen=True)
class RayPorts:
    """Where a Ray node listens, all within its worker's cluster ports: the fixed ones from the first,
    Ray's worker processes (one port each) on the rest."""

    gcs: int  # the head's GCS: `ray start --address=HOST:gcs`, RAY_ADDRESS of a driver
    dashboard: int  # the head's dashboard and Ray Jobs API (http)
    client_server: int  # the head's Ray Client server (ray://)
    agent_listen: int
    agent_grpc: int
    metrics: int
    node_manager: int
    object_manager: int
    runtime_env_agent: int
    min_worker: int
    max_worker: int

    @classmethod
    def of(cls, ports: PortRange) -> RayPorts:
        """ValueError when the range is too small for a Ray node."""
        if ports.last - ports.first + 1 < MIN_RAY_PORTS:
            raise ValueError(f"a Ray node needs at least {MIN_RAY_PORTS} cluster ports, this node opens {ports}")
        f = ports.first
        return cls(f, f + 1, f + 2, f + 3, f + 4, f + 5, f + 6, f + 7, f + 8, f + 10, ports.last)

    def start_args(self, *, host: str, head: str | None) -> list[str]:
        """`ray start`'s port and address options of this node: the head's (`head` None) or one that
        joins the head at `head` ("HOST:PORT" of its GCS)."""
        args = [
            f"--node-ip-address={host}",
            f"--dashboard-agent-listen-port={self.agent_listen}",
            f"--dashboard-agent-grpc-port={self.agent_grpc}",
            f"--metrics-export-port={self.metrics}",
            f"--node-manager-port={self.node_manager}",
            f"--object-manager-port={self.object_manager}",
            f"--runtime-env-agent-port={self.runtime_env_agent}",
            f"--min-worker-port={self.min_worker}",
            f"--max-worker-port={self.max_worker}",
        ]
        if head is not None:
            return ["--address", head, *args]
        return [
            "--head",
            f"--port={self.gcs}",
            "--include-dashboard=true",  # the Jobs API is the dashboard's
            f"--dashboard-host={host}",
            f"--dashboard-port={self.dashboard}",
            f"--ray-client-server-port={self.client_server}",
            *args,
        ]


def ray_endpoints(host: str, ports: PortRange) -> dict[str, str]:
    """The head's addresses as the client uses them (`host` as in a URL, IPv6 in brackets): the GCS
    (`address`: RAY_ADDRESS of a driver on the cluster's network), the dashboard and Jobs API
    (`dashboard`: RAY_API_SERVER_ADDRESS / `ray job submit --address`) and the Ray Client server."""
    p = RayPorts.of(ports)
    return {
        "address": f"{host}:{p.gcs}",
        "dashboard": f"http://{host}:{p.dashboard}",
        "client": f"ray://{host}:{p.client_server}",
    }


def ray_token(client: Keypair, lease: Pubkey) -> str:
    """The lease's Ray token (the job's secret RAY_AUTH_TOKEN), derived by its client from the
    wallet's secret key as the checkpoint key is: any of the client's machines with the wallet has
    it, and the client seals it to each node of the lease (the coordinator never sees it)."""
    hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=bytes(lease), info=b"gpunet-ray-token-v1")
    return hkdf.derive(bytes(client)[:32]).hex()


def alive_nodes(dashboard: str, token: str) -> list[dict[str, Any]]:
    """The Ray nodes alive in the cluster as its head's dashboard (`dashboard`, its URL) lists them,
    asked with the lease's Ray token; OSError when it does not answer (or refuses the token)."""
    request = urllib.request.Request(
        f"{dashboard}/api/v0/nodes?limit=1000&detail=false", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(request, timeout=5) as answer:
        return [n for n in json.load(answer)["data"]["result"]["result"] if n["state"] == "ALIVE"]
