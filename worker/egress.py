"""The `egress` network policy's filter: a container job reaches the internet, not the supplier's LAN,
the machine itself, or a cloud machine's metadata endpoint (169.254.169.254, fd00:ec2::254), which
hands out the machine's cloud credentials.

Egress jobs run on a podman network of gpunet's own (created when missing), and an nftables table of
gpunet's own rejects what comes in on that network's bridge for a private or link-local address
(forwarded: the LAN, the metadata endpoint) or for the machine itself (its every address: input),
except DNS to the network's gateway (podman's aardvark-dns, which resolves for the jobs). What the
supplier allows (`--egress-allow`) is forwarded even when private, never to the machine itself.

Several workers may share a machine: a worker's allowances are part of its network's name and
labels (one network per distinct list), and a worker writes the table from every egress network of
gpunet's that podman has (labelled gpunet=egress), so nothing another worker uses goes, and nothing
of a network removed since stays (podman gives its bridge's name to the next network it creates).
Nothing is removed on exit: other workers' jobs rely on it.
"""

from __future__ import annotations

import fcntl
import hashlib
import ipaddress
import json
import os
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["BLOCKED", "TABLE", "EgressFilterUnavailable", "EgressNetwork", "install_egress_network", "parse_cidrs"]

TABLE = "gpunet_egress"  # nft's `inet gpunet_egress`
NETWORK = "gpunet-egress"  # the podman network; with allowances, NETWORK-<hash of the allowances>
ALLOW_LABEL = "gpunet.egress.allow"  # the network's label: its allowances, comma-separated
LOCK = "/run/gpunet-egress.lock"  # held while a worker reads the networks and writes the table
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


Cidr = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class EgressNetwork:
    name: str  # the podman network egress containers run on
    bridge: str  # its bridge interface on the host (what the table's rules match)
    gateways: tuple[str, ...]  # the bridge's addresses: where aardvark-dns answers the jobs
    allowed: tuple[Cidr, ...]  # what its jobs reach although private (its label ALLOW_LABEL)


def parse_cidrs(cidrs: Sequence[str]) -> list[Cidr]:
    """The supplier's allowances as networks, overlaps merged (an nftables interval set refuses
    overlapping elements); ValueError naming the bad one."""
    networks: list[Cidr] = []
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


def _egress_network(info: dict[str, Any]) -> EgressNetwork:
    """One of gpunet's egress networks as `podman network inspect` shows it."""
    name, bridge = info.get("name", "?"), info.get("network_interface")
    if info.get("driver") != "bridge" or not bridge:
        raise EgressFilterUnavailable(f"podman's network {name!r} is no bridge: remove it (podman network rm {name})")
    labels = info.get("labels") or {}
    try:
        allowed = parse_cidrs([c for c in labels.get(ALLOW_LABEL, "").split(",") if c])
    except ValueError as e:
        raise EgressFilterUnavailable(f"podman's network {name!r}: {e}: remove it (podman network rm {name})") from None
    gateways = tuple(s["gateway"] for s in info.get("subnets") or [] if s.get("gateway"))
    return EgressNetwork(name=name, bridge=bridge, gateways=gateways, allowed=tuple(allowed))


def _networks(podman: tuple[str, ...], name: str, allowed: Sequence[Cidr]) -> list[EgressNetwork]:
    """Every egress network of gpunet's on this machine (labelled gpunet=egress), `name` first,
    created when missing with `allowed` in its label."""
    try:
        _run([*podman, "network", "inspect", name])
    except EgressFilterUnavailable:
        allow = ",".join(str(n) for n in allowed)
        _run([*podman, "network", "create", "--label", "gpunet=egress", "--label", f"{ALLOW_LABEL}={allow}", name])
    listed = _run([*podman, "network", "ls", "--quiet", "--filter", "label=gpunet=egress"]).split()
    infos = json.loads(_run([*podman, "network", "inspect", name, *(n for n in listed if n != name)]))
    networks = [_egress_network(info) for info in infos]
    ours = next(n for n, info in zip(networks, infos, strict=True) if info.get("name") == name)
    # one made otherwise would be missing from the table another worker writes, or allow other things
    if name not in listed or ours.allowed != tuple(allowed):
        raise EgressFilterUnavailable(
            f"podman's network {name!r} is not the one the worker creates: remove it (podman network rm {name})"
        )
    return [ours, *(n for n in networks if n is not ours)]


def _elements(pairs: Iterable[tuple[str, object]]) -> str:
    return ", ".join(f'"{bridge}" . {address}' for bridge, address in pairs)


def ruleset(networks: Sequence[EgressNetwork]) -> str:
    """The nft script that makes the table what these networks need, in one transaction: its rules
    (the same for every worker), and in its sets the networks' bridges, gateways and allowances."""
    blocked = parse_cidrs(BLOCKED)
    sets = {
        "bridges": ", ".join(f'"{n.bridge}"' for n in networks),
        "blocked4": ", ".join(str(c) for c in blocked if c.version == 4),
        "blocked6": ", ".join(str(c) for c in blocked if c.version == 6),
        "allowed4": _elements((n.bridge, c) for n in networks for c in n.allowed if c.version == 4),
        "allowed6": _elements((n.bridge, c) for n in networks for c in n.allowed if c.version == 6),
        "dns4": _elements((n.bridge, g) for n in networks for g in n.gateways if ipaddress.ip_address(g).version == 4),
        "dns6": _elements((n.bridge, g) for n in networks for g in n.gateways if ipaddress.ip_address(g).version == 6),
    }
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
        *(f"flush chain inet {TABLE} {chain}" for chain in ("forward", "input", "job_forward", "job_input")),
        *(f"flush set inet {TABLE} {name}" for name in sets),
        *(f"add element inet {TABLE} {name} {{ {elements} }}" for name, elements in sets.items() if elements),
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
    ]
    return "\n".join(lines) + "\n"


def install_egress_network(podman: tuple[str, ...], allowed: Sequence[str] = ()) -> EgressNetwork:
    """The network egress containers run on, its filter in force (idempotent; several workers may
    call it at once: a lock orders them, so that none writes the table from a list of networks that
    misses another's); EgressFilterUnavailable saying what to do when it cannot be."""
    if os.geteuid() != 0:
        raise EgressFilterUnavailable(f"the worker does not run as root, so podman is rootless. {_FIX}")
    nft = shutil.which("nft")
    if nft is None:
        raise EgressFilterUnavailable(f"nft (nftables) is not installed. {_FIX}")
    cidrs = parse_cidrs(allowed)
    key = ",".join(str(n) for n in cidrs)
    name = f"{NETWORK}-{hashlib.sha256(key.encode()).hexdigest()[:8]}" if cidrs else NETWORK
    try:
        with open(LOCK, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes (or the process dies)
            networks = _networks(podman, name, cidrs)
            _run([nft, "-f", "-"], ruleset(networks))
    except OSError as e:
        raise EgressFilterUnavailable(f"{LOCK}: {e.strerror or e}. {_FIX}") from None
    except EgressFilterUnavailable as e:
        raise EgressFilterUnavailable(f"{e}. {_FIX}") from None
    return networks[0]
