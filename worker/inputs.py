"""Fetching a job's inputs (its `--input` URLs) into its working directory, on the host, under the
egress policy's rules: the agent runs on the supplier's network, so a URL the client chose must not
reach what the job itself may not (worker/egress.py): the machine itself, the LAN, a cloud machine's
metadata endpoint.

Every hop (redirects included, each checked again) connects only to an address that was checked
(the name is resolved once, and the socket is opened to the checked address: no DNS-rebinding gap),
and a refused address is never connected to, so the refusal reads the same whether a port is open
there or not. The bytes are streamed to disk, never held in memory; all of a job's inputs together
are bounded in bytes and in time, and the job's status says which limit was hit.
"""

from __future__ import annotations

import hashlib
import http.client
import ipaddress
import os
import socket
import ssl
import stat
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from urllib.parse import urljoin, urlsplit

from gpunet.protocol import InputFile
from worker.egress import BLOCKED, Cidr, parse_cidrs

__all__ = ["DEFAULT_LIMITS", "InputLimits", "InputRefused", "address_allowed", "fetch_inputs", "registry_refusal"]

MAX_REDIRECTS = 5
CHUNK = 64 * 1024
# Never, whatever the supplier allows: the machine itself (besides its own addresses, found by binding)
_NEVER = parse_cidrs(["127.0.0.0/8", "0.0.0.0/8", "::1/128", "::/128"])
# Refused besides the egress filter's list: what has no business being an input's server
_BLOCKED = parse_cidrs([*BLOCKED, "224.0.0.0/4", "240.0.0.0/4", "ff00::/8", "fec0::/10", "100::/64"])
_NAT64 = ipaddress.ip_network("64:ff9b::/96")  # an IPv4 address behind the network's NAT64


class InputRefused(ValueError):
    """An input could not be fetched; the message is what the client reads in the job's status."""


@dataclass(frozen=True)
class InputLimits:
    """What all of one job's inputs together may take: bytes on disk and seconds of fetching.
    `allowed`: what may be fetched although private (the worker's --egress-allow)."""

    max_bytes: int = 16 * 2**30
    seconds: float = 3600.0
    allowed: tuple[str, ...] = ()
    _allowed: tuple[Cidr, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_allowed", tuple(parse_cidrs(self.allowed)))


DEFAULT_LIMITS = InputLimits()  # the defaults (the worker's settings set its own)


def _own(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Whether the address is one of this machine's: only those can be bound (a machine with
    ip_nonlocal_bind set finds every address its own, and so fetches nothing: it fails closed)."""
    family = socket.AF_INET if address.version == 4 else socket.AF_INET6
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((str(address), 0))
        except OSError:
            return False
    return True


def address_allowed(text: str, allowed: Sequence[Cidr] = ()) -> bool:
    """Whether an input may be fetched from this address: not the machine itself, nor (unless in
    `allowed`) a private, carrier-grade NAT, link-local or metadata address, looking through the
    IPv4 address an IPv6 one carries (IPv4-mapped, 6to4, Teredo, NAT64)."""
    address = ipaddress.ip_address(text.split("%", 1)[0])
    if address.version == 6:
        assert isinstance(address, ipaddress.IPv6Address)
        inner = address.ipv4_mapped or address.sixtofour or (address.teredo or (None, None))[1]
        if inner is None and address in _NAT64:
            inner = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if inner is not None and not address_allowed(str(inner), allowed):
            return False
    if any(address in net for net in _NEVER) or _own(address):
        return False
    if any(address in net for net in allowed):
        return True
    return not any(address in net for net in _BLOCKED)


@dataclass
class _Fetch:
    """One job's inputs being fetched: its limits, the deadline, and the bytes taken so far."""

    limits: InputLimits
    deadline: float
    taken: int = 0
    sock: socket.socket | None = None

    def remaining(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise self.too_slow()
        return left

    def too_slow(self) -> InputRefused:
        return InputRefused(f"the inputs took longer than this node's limit of {self.limits.seconds:g} s")

    def connect(self, host_port: tuple[str, int], timeout: float | None = None, source: object = None) -> socket.socket:
        """http.client's connection, to a checked address only (the one resolved here)."""
        host, port = host_port
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError:
            raise InputRefused(f"{host!r} cannot be resolved") from None
        if not infos or not all(address_allowed(str(info[4][0]), self.limits._allowed) for info in infos):
            raise InputRefused(
                f"{host!r} is a private, loopback, link-local or metadata address (or resolves to one): "
                "inputs come from public addresses only"
            )
        last: OSError | None = None
        for family, kind, proto, _, address in infos:
            sock = socket.socket(family, kind, proto)
            sock.settimeout(min(30.0, self.remaining()))
            self.sock = sock  # the watchdog ends it at the deadline
            try:
                sock.connect(address)
                return sock
            except OSError as e:
                sock.close()
                last = e
        raise InputRefused(f"cannot connect to {host!r}: {last}")

    @contextmanager
    def watchdog(self) -> Iterator[None]:
        """Ends whatever socket is open at the deadline (a server trickling its headers or body
        one byte at a time never lets a read time out)."""
        done = threading.Event()

        def watch() -> None:
            if not done.wait(max(0.0, self.deadline - time.monotonic())) and self.sock is not None:
                try:
                    self.sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

        thread = threading.Thread(target=watch, daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join()


class _Https(http.client.HTTPSConnection):
    fetch: _Fetch

    def connect(self) -> None:
        super().connect()
        self.fetch.sock = self.sock  # TLS's socket from now on: the one to time out and to end


def _request(fetch: _Fetch, url: str) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    """The final answer to GET url, redirects followed (each hop checked); the connection is the
    caller's to close."""
    for _ in range(MAX_REDIRECTS + 1):
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InputRefused(f"{url[:200]!r} is not an http(s) URL")
        timeout = min(30.0, fetch.remaining())
        conn: http.client.HTTPConnection
        if parts.scheme == "https":
            conn = _Https(parts.hostname, parts.port, timeout=timeout, context=ssl.create_default_context())
            conn.fetch = fetch
        else:
            conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
        conn._create_connection = fetch.connect  # type: ignore[attr-defined]  # only to checked addresses
        try:
            conn.request("GET", parts.path + (f"?{parts.query}" if parts.query else "") or "/",
                         headers={"User-Agent": "gpunet-worker"})  # fmt: skip
            response = conn.getresponse()
        except InputRefused:
            conn.close()
            raise
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            late = time.monotonic() >= fetch.deadline
            raise fetch.too_slow() if late else InputRefused(f"{parts.hostname!r}: {e}") from None
        location = response.getheader("Location")
        if response.status in (301, 302, 303, 307, 308) and location:
            conn.close()
            url = urljoin(url, location)
            continue
        if response.status != 200:
            conn.close()
            raise InputRefused(f"{parts.hostname!r} answered HTTP {response.status}")
        return conn, response
    raise InputRefused(f"more than {MAX_REDIRECTS} redirects")


def _open_dir(workdir: str, parts: Sequence[str]) -> int:
    """A descriptor of the input's directory under the workdir, made where missing, following no
    symbolic link (a job may have left one in its workdir, pointing anywhere on the machine)."""
    fd = os.open(workdir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        for part in parts:
            try:
                os.mkdir(part, 0o755, dir_fd=fd)
            except FileExistsError:
                pass
            inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = inner
    except OSError:
        os.close(fd)
        raise
    return fd


def _present(dir_fd: int, name: str, sha256: str) -> bool:
    """Whether the input is there already (fetched before a restart), hashed as it streams."""
    try:  # not blocking on a FIFO the job left there
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError:
        return False
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return False
    digest = hashlib.sha256()
    with os.fdopen(fd, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest() == sha256


def _fetch_one(fetch: _Fetch, item: InputFile, dir_fd: int, name: str) -> None:
    conn, response = _request(fetch, item.url)
    part = f".gpunet-input-{uuid.uuid4().hex}"
    digest = hashlib.sha256()
    try:
        length = response.getheader("Content-Length")
        if length and length.isdigit() and fetch.taken + int(length) > fetch.limits.max_bytes:
            raise _too_large(fetch)
        fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=dir_fd)
        with os.fdopen(fd, "wb") as out:
            while True:
                assert fetch.sock is not None  # (http.client drops conn.sock once the answer has it)
                fetch.sock.settimeout(min(30.0, fetch.remaining()))
                try:
                    chunk = response.read1(CHUNK)
                except (OSError, http.client.HTTPException) as e:
                    if time.monotonic() >= fetch.deadline:
                        raise fetch.too_slow() from None
                    raise InputRefused(f"{item.path}: the download broke off: {e}") from None
                if not chunk:
                    if time.monotonic() >= fetch.deadline:  # the watchdog ended it
                        raise fetch.too_slow()
                    break
                fetch.taken += len(chunk)
                if fetch.taken > fetch.limits.max_bytes:
                    raise _too_large(fetch)
                digest.update(chunk)
                out.write(chunk)
        if digest.hexdigest() != item.sha256:
            raise InputRefused(f"{item.path}: the content of {item.url} does not match its sha256")
        os.replace(part, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)  # a link of the job's is replaced, not followed
    finally:
        conn.close()
        try:
            os.unlink(part, dir_fd=dir_fd)
        except FileNotFoundError:
            pass


def _too_large(fetch: _Fetch) -> InputRefused:
    return InputRefused(f"the inputs are over this node's limit of {fetch.limits.max_bytes} bytes")


def fetch_inputs(workdir: str, inputs: Sequence[InputFile], limits: InputLimits) -> None:
    """Fetches each input not there already into the workdir; InputRefused saying why one could not
    be (nothing partial stays)."""
    fetch = _Fetch(limits, time.monotonic() + limits.seconds)
    with fetch.watchdog():
        for item in inputs:
            *parents, name = PurePosixPath(item.path).parts
            try:
                dir_fd = _open_dir(workdir, parents)
            except OSError as e:
                raise InputRefused(f"{item.path}: {e.strerror or e}") from None
            try:
                if not _present(dir_fd, name, item.sha256):
                    _fetch_one(fetch, item, dir_fd, name)
            except OSError as e:
                raise InputRefused(f"{item.path}: {e.strerror or e}") from None
            finally:
                os.close(dir_fd)


def registry_refusal(image: str, limits: InputLimits) -> str | None:
    """Why the engine may not pull a job's image from the registry it names, or None: the same rules
    as an input's (the engine pulls on the host's network). Only a registry the reference names
    (a first part with a dot or a port, or localhost) is checked; a short name goes to the registries
    the supplier configured. The engine resolves the name again itself and follows the registry's
    redirects unchecked: this stops a reference that names the machine or the LAN, not a hostile
    public registry (docs/supplier/guide.md says so)."""
    first, slash, _ = image.partition("/")
    if not slash or not ("." in first or ":" in first or first == "localhost"):
        return None
    host = first[1 : first.find("]")] if first.startswith("[") else first.rsplit(":", 1)[0]
    try:
        infos = socket.getaddrinfo(host, 443, type=socket.SOCK_STREAM)
    except OSError:
        return None  # the engine says it cannot resolve it
    if all(address_allowed(str(info[4][0]), limits._allowed) for info in infos):
        return None
    return (
        f"its registry {host!r} is a private, loopback, link-local or metadata address (or resolves to "
        "one): images come from public registries"
    )
