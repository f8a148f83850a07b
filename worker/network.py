"""How this node's cluster peers reach it when its supplier does not say (--advertise-addr): the
address of its own interface that routes to the coordinator's gateway. Never the gateway's view of
the node (the session's remote address): behind NAT or a TLS-terminating proxy that is the proxy's."""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

__all__ = ["advertised_address"]


def advertised_address(gateway_url: str) -> str | None:
    """The local address the kernel would send packets to the gateway from (a UDP socket's
    `connect` picks the route and sends nothing); None when the gateway's host does not resolve or
    has no route from here (the agent says so; the coordinator then falls back to the session's remote
    address)."""
    parts = urlsplit(gateway_url)
    host, port = parts.hostname, parts.port or (443 if parts.scheme == "wss" else 80)
    if not host:
        return None
    try:
        family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0]
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect(address)
            local = probe.getsockname()[0]
    except OSError:
        return None
    return str(local).split("%")[0]  # an IPv6 link-local address's zone means nothing to a peer
