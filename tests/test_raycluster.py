"""gpunet.raycluster: every port a Ray node opens lies in its worker's cluster ports, distinct, and
the client's addresses of the head are the ones the head listens on."""

from __future__ import annotations

import dataclasses

import pytest

from gpunet.protocol import PortRange
from gpunet.raycluster import MIN_RAY_PORTS, RayPorts, ray_endpoints


def test_a_ray_node_listens_only_within_its_cluster_ports_each_port_once() -> None:
    ports = PortRange(first=29500, last=29519)
    layout = RayPorts.of(ports)
    fixed = [v for k, v in dataclasses.asdict(layout).items() if k not in ("min_worker", "max_worker")]
    workers = range(layout.min_worker, layout.max_worker + 1)
    assert len(set(fixed)) == len(fixed) and not set(fixed) & set(workers)
    assert all(ports.first <= p <= ports.last for p in [*fixed, *workers]) and len(workers) == 10


def test_the_head_starts_where_the_client_is_told_to_reach_it() -> None:
    ports = PortRange(first=31000, last=31039)
    layout = RayPorts.of(ports)
    head = layout.start_args(host="10.0.0.7", head=None)
    assert "--head" in head and f"--port={layout.gcs}" in head and f"--dashboard-port={layout.dashboard}" in head
    assert "--dashboard-host=10.0.0.7" in head and "--node-ip-address=10.0.0.7" in head
    assert ray_endpoints("10.0.0.7", ports) == {
        "address": "10.0.0.7:31000",
        "dashboard": "http://10.0.0.7:31001",
        "client": "ray://10.0.0.7:31002",
    }
    joining = layout.start_args(host="10.0.0.8", head="10.0.0.7:31000")
    assert joining[:2] == ["--address", "10.0.0.7:31000"] and "--head" not in joining
    assert not any(a.startswith(("--port=", "--dashboard-port=")) for a in joining)
    assert ray_endpoints("[fd00::7]", ports)["dashboard"] == "http://[fd00::7]:31001"


def test_a_range_too_small_for_a_ray_node_is_refused() -> None:
    with pytest.raises(ValueError, match=f"a Ray node needs at least {MIN_RAY_PORTS} cluster ports"):
        RayPorts.of(PortRange(first=29500, last=29500 + MIN_RAY_PORTS - 2))
    assert RayPorts.of(PortRange(first=29500, last=29500 + MIN_RAY_PORTS - 1)).max_worker == 29519
