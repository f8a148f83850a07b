"""The `egress` network policy's filter: a container job reaches the internet, not the supplier's LAN,
the machine itself, or a cloud machine's metadata endpoint (169.254.169.254, fd00:ec2::254), which
hands out the machine's cloud credentials.

Egress jobs run on a podman network of gpunet's own (created when missing), and an nftables table of
gpunet's own rejects what comes in on that network's bridge for a private or link-local address
(forwarded: the LAN, the metadata endpoint) or for the machine itself (its every address: input),
except DNS to the network's gateway (podman's aardvark-dns, which resolves for the jobs). What the
supplier allows (`--egress-allow`) is forwarded even when private, never to the machine itself.

Several workers may share a machine: a worker's allowances are part of its network's name (one
network per distinct list), the table's rules are the same for every worker, and each worker only
adds what its network needs. Nothing is removed on exit: other workers' jobs rely on it.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["BLOCKED", "TABLE", "EgressFilterUnavailable", "EgressNetwork", "install_egress_network", "parse_cidrs"]

TABLE = "gpunet_egress"  # nft's `inet gpunet_egress`
NETWORK = "gpunet-egress"  # the podman network; with allowances, NETWORK-<hash of the allowances>
# What an egress job never reaches (besides the machine's own addresses and what the supplier allows):
BLOCKED = (
    "10.0.0.0/8",  # private (RFC 1918)
    "172.16.0.0/12",
    "192.168.0.0/16",
    "100.64.0.0/10",  # carrier-grade NAT (RFC 6598): cloud-internal too (Alibaba's metadata: 100.100.100.200)
    "169.254.0.0/16",  # link-local: the metadata endpoint of AWS, GCP, Azure, OCI, ...
    "168.63.129.16/32",  # Azure's platform endpoint (WireServer), a public address on every Azure VM
    "fc00::/7",  # unique local (AWS's metadata over IPv6: fd00:ec2::254)
    "fe80::/10",  # link-local
)
_FIX = (
    "Install nftables (apt-get install nftables) and run the worker as root with rootful podman; or give "
    "jobs no network (--network none); or let jobs reach everything this machine reaches, your LAN and "
    "a cloud machine's credentials included (--egress-unfiltered)"
)


class EgressFilterUnavailable(RuntimeError):
    """The egress filter cannot be installed: the worker must not start with the egress policy."""


@dataclass(frozen=True)
class EgressNetwork:
    name: str  # the podman network egress containers run on
    bridge: str  # its bridge interface on the host (what the table's rules match)
    gateways: tuple[str, ...]  # the bridge's addresses: where aardvark-dns answers the jobs


def parse_cidrs(cidrs: Sequence[str]) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """The supplier's allowances as networks, overlaps merged (an nftables interval set refuses
    overlapping elements); ValueError naming the bad one."""
    networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
    for cidr in cidrs:
        try:
            networks.append(ipaddress.ip_network(cidr.strip(), strict=False))
        except ValueError:
            raise ValueError(f"{cidr!r} is not an address or CIDR (e.g. 192.168.1.20/32, 10.0.0.0/24)") from None
    v4 = ipaddress.collapse_addresses(n for n in networks if n.version == 4)
    v6 = ipaddress.collapse_addresses(n for n in networks if n.version == 6)
    return [*v4, *v6]


def _run(argv: list[str], stdin: str | None = None) -> str:
    try:
        done = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise EgressFilterUnavailable(f"`{' '.join(argv[:3])}` failed: {e}") from None
    if done.returncode != 0:
        why = (done.stderr or done.stdout).strip().splitlines()[-1:] or [f"exit {done.returncode}"]
        raise EgressFilterUnavailable(f"`{' '.join(argv[:4])}` failed: {why[0]}")
    return done.stdout


def _network(podman: tuple[str, ...], name: str) -> EgressNetwork:
    """Creates the network when missing (another worker may create it at the same moment), then reads
    which bridge podman gave it."""
    inspect = [*podman, "network", "inspect", name]
    try:
        found = _run(inspect)
    except EgressFilterUnavailable:
        try:
            _run([*podman, "network", "create", "--label", "gpunet=egress", name])
        except EgressFilterUnavailable:
            pass  # created by another worker meanwhile: the inspect below says
        found = _run(inspect)
    info = json.loads(found)[0]
    bridge = info.get("network_interface")
    if info.get("driver") != "bridge" or not bridge:
        raise EgressFilterUnavailable(f"podman's network {name!r} is no bridge: remove it (podman network rm {name})")
    gateways = tuple(s["gateway"] for s in info.get("subnets") or [] if s.get("gateway"))
    return EgressNetwork(name=name, bridge=bridge, gateways=gateways)


def _elements(bridge: str, networks: Sequence[ipaddress.IPv4Network | ipaddress.IPv6Network], v: int) -> str:
    return ", ".join(f'"{bridge}" . {n}' for n in networks if n.version == v)


def ruleset(network: EgressNetwork, allowed: Sequence[ipaddress.IPv4Network | ipaddress.IPv6Network]) -> str:
    """The nft script that installs the table (its rules the same for every worker: rewritten in one
    transaction) and adds this network's bridge, gateways and allowances to its sets (never removed:
    other workers' networks are in them too)."""
    blocked = parse_cidrs(BLOCKED)
    b4 = ", ".join(str(n) for n in blocked if n.version == 4)
    b6 = ", ".join(str(n) for n in blocked if n.version == 6)
    gw4 = [g for g in network.gateways if ipaddress.ip_address(g).version == 4]
    gw6 = [g for g in network.gateways if ipaddress.ip_address(g).version == 6]
    lines = [
        f"add table inet {TABLE}",
        f"add set inet {TABLE} bridges {{ type ifname; }}",
        f"add set inet {TABLE} blocked4 {{ type ipv4_addr; flags interval; }}",
        f"add set inet {TABLE} blocked6 {{ type ipv6_addr; flags interval; }}",
        f"add set inet {TABLE} allowed4 {{ type ifname . ipv4_addr; flags interval; }}",
        f"add set inet {TABLE} allowed6 {{ type ifname . ipv6_addr; flags interval; }}",
        f"add set inet {TABLE} dns4 {{ type ifname . ipv4_addr; }}",
        f"add set inet {TABLE} dns6 {{ type ifname . ipv6_addr; }}",
        f"add chain inet {TABLE} forward {{ type filter hook forward priority filter; policy accept; }}",
        f"add chain inet {TABLE} input {{ type filter hook input priority filter; policy accept; }}",
        f"add chain inet {TABLE} job_forward",
        f"add chain inet {TABLE} job_input",
        f"flush chain inet {TABLE} forward",
        f"flush chain inet {TABLE} input",
        f"flush chain inet {TABLE} job_forward",
        f"flush chain inet {TABLE} job_input",
        f"flush set inet {TABLE} blocked4",
        f"flush set inet {TABLE} blocked6",
        f"add element inet {TABLE} blocked4 {{ {b4} }}",
        f"add element inet {TABLE} blocked6 {{ {b6} }}",
        f"add rule inet {TABLE} forward iifname @bridges jump job_forward",
        f"add rule inet {TABLE} input iifname @bridges jump job_input",
        # the supplier's allowances first, then the private and link-local ranges
        f"add rule inet {TABLE} job_forward iifname . ip daddr @allowed4 accept",
        f"add rule inet {TABLE} job_forward iifname . ip6 daddr @allowed6 accept",
        f"add rule inet {TABLE} job_forward ip daddr @blocked4 reject with icmpx type admin-prohibited",
        f"add rule inet {TABLE} job_forward ip6 daddr @blocked6 reject with icmpx type admin-prohibited",
        # the machine itself: nothing but DNS to the job's own gateway
        f"add rule inet {TABLE} job_input iifname . ip daddr @dns4 meta l4proto {{ tcp, udp }} th dport 53 accept",
        f"add rule inet {TABLE} job_input iifname . ip6 daddr @dns6 meta l4proto {{ tcp, udp }} th dport 53 accept",
        f"add rule inet {TABLE} job_input reject with icmpx type admin-prohibited",
        f'add element inet {TABLE} bridges {{ "{network.bridge}" }}',
    ]
    for family, gateways in (("4", gw4), ("6", gw6)):
        if gateways:
            pairs = ", ".join(f'"{network.bridge}" . {g}' for g in gateways)
            lines.append(f"add element inet {TABLE} dns{family} {{ {pairs} }}")
    for family, v in (("4", 4), ("6", 6)):
        if elements := _elements(network.bridge, allowed, v):
            lines.append(f"add element inet {TABLE} allowed{family} {{ {elements} }}")
    return "\n".join(lines) + "\n"


def install_egress_network(podman: tuple[str, ...], allowed: Sequence[str] = ()) -> EgressNetwork:
    """The network egress containers run on, its filter in force (idempotent; several workers may
    call it at once); EgressFilterUnavailable saying what to do when it cannot be."""
    if os.geteuid() != 0:
        raise EgressFilterUnavailable(f"the worker does not run as root, so podman is rootless. {_FIX}")
    nft = shutil.which("nft")
    if nft is None:
        raise EgressFilterUnavailable(f"nft (nftables) is not installed. {_FIX}")
    networks = parse_cidrs(allowed)
    key = ",".join(str(n) for n in networks)
    name = f"{NETWORK}-{hashlib.sha256(key.encode()).hexdigest()[:8]}" if networks else NETWORK
    try:
        network = _network(podman, name)
        _run([nft, "-f", "-"], ruleset(network, networks))
    except EgressFilterUnavailable as e:
        raise EgressFilterUnavailable(f"{e}. {_FIX}") from None
    return network
