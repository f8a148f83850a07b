"""A job's inputs, fetched by the agent on the host under the egress policy's rules (worker/inputs.py),
from a hostile server on another machine (tests/worker/outside.py, tests/worker/input_server.py):
never from the machine itself, the LAN or the metadata endpoint, redirects included, and a refused
address reads the same whether a port is open there or not; bounded in bytes and in time."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from solders.pubkey import Pubkey

from gpunet.protocol import Dispatch, InputFile, JobSpec, JobStatus
from tests.worker.outside import HOST_PUBLIC, INPUT_SERVER, INTERNET, LAN, METADATA, missing, other_machine
from tests.worker.sandboxes import host_jobs
from tests.worker.test_runner import Recorder
from worker.egress import parse_cidrs
from worker.inputs import DEFAULT_LIMITS, InputLimits, InputRefused, address_allowed, fetch_inputs
from worker.runner import JobDirs, JobRunner

HELLO = b"hello gpus\n"
MIB = 2**20
READ = "print(open('data/in.txt').read().strip())"


@pytest.fixture
def server() -> Iterator[int]:
    """The hostile input server's port, on every address of the other machine."""
    if reason := missing():
        pytest.skip(reason)
    with other_machine(INPUT_SERVER) as port:
        yield port


def _closed_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as sock:
        return int(sock.getsockname()[1])


def _redirect(port: int, to: str) -> str:
    return f"http://{INTERNET}:{port}/to?url={quote(to, safe='')}"


def _input(url: str, body: bytes = HELLO) -> InputFile:
    return InputFile(path="data/in.txt", url=url, sha256=hashlib.sha256(body).hexdigest())


async def _job(
    tmp_path: Path, *inputs: InputFile, limits: InputLimits = DEFAULT_LIMITS, command: str = READ
) -> tuple[JobStatus, Recorder, Path]:
    """The job reading its input, run by the runner: its final status, messages and working directory."""
    dispatch = Dispatch(
        lease=str(Pubkey.new_unique()),
        gpus=1,
        job=JobSpec(command=[sys.executable, "-c", command], inputs=list(inputs)),
    )
    rec, dirs = Recorder(), JobDirs.of(tmp_path / "state", dispatch)
    sandbox = dataclasses.replace(host_jobs(), inputs=limits)
    runner = JobRunner(dispatch, ["GPU-sim-a"], dirs, simulated=True, send=rec.send, sandbox=sandbox)
    final = await asyncio.wait_for(runner.run(), 60)
    return final, rec, dirs.workdir


def _seen(port: int) -> list[list[str]]:
    with urllib.request.urlopen(f"http://{INTERNET}:{port}/seen", timeout=10) as answer:
        return json.loads(answer.read())


def _refused(final: JobStatus, rec: Recorder, workdir: Path) -> None:
    assert final.state == "failed" and final.detail.startswith("inputs: "), final
    assert "running" not in rec.states(), rec.states()
    assert not [p for p in workdir.rglob("*") if p.is_file()], list(workdir.rglob("*"))  # nothing partial stays


async def test_an_input_from_the_internet_is_fetched_redirects_included(tmp_path, server) -> None:
    for url in (f"http://{INTERNET}:{server}/hello", _redirect(server, f"http://{INTERNET}:{server}/hello")):
        final, rec, _ = await _job(tmp_path, _input(url))
        assert final.state == "succeeded" and rec.lines() == ["hello gpus"], (final, rec.lines("stderr"))
    # a digest that does not match: refused, nothing kept
    bad = InputFile(path="data/in.txt", url=f"http://{INTERNET}:{server}/hello", sha256="0" * 64)
    final, rec, workdir = await _job(tmp_path, bad)
    _refused(final, rec, workdir)
    assert final.detail == f"inputs: data/in.txt: the content of {bad.url} does not match its sha256", final


HTTPS_SERVER = """
import http.server, ssl, sys
class Hello(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "11")
        self.end_headers()
        self.wfile.write(b"hello gpus\\n")
server = http.server.HTTPServer(("0.0.0.0", 0), Hello)
tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
tls.load_cert_chain(sys.argv[1], sys.argv[2])
server.socket = tls.wrap_socket(server.socket, server_side=True)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


async def test_an_https_input_is_fetched_from_the_checked_address_with_its_certificate_checked(
    tmp_path, monkeypatch
) -> None:
    if reason := missing():
        pytest.skip(reason)
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert, "-days", "1",
         "-subj", f"/CN={INTERNET}", "-addext", f"subjectAltName=IP:{INTERNET}"],
        check=True, capture_output=True,
    )  # fmt: skip
    with other_machine(HTTPS_SERVER, str(cert), str(key)) as port:
        url = f"https://{INTERNET}:{port}/"
        final, rec, workdir = await _job(tmp_path, _input(url))
        _refused(final, rec, workdir)  # a certificate no authority of this machine's signed
        assert "CERTIFICATE_VERIFY_FAILED" in final.detail, final
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # the control: its authority trusted
        final, rec, _ = await _job(tmp_path, _input(url))
        assert final.state == "succeeded" and rec.lines() == ["hello gpus"], (final, rec.lines("stderr"))


async def test_a_redirect_to_the_machine_itself_reads_the_same_whether_its_port_is_open_or_closed(
    tmp_path, server, counting_listener
) -> None:
    open_port, accepted = counting_listener
    details = []
    for port in (open_port, _closed_port()):
        for target in (
            f"http://127.0.0.1:{port}/",
            f"http://[::ffff:127.0.0.1]:{port}/",
            f"http://{HOST_PUBLIC}:{port}/",
            f"http://localhost:{port}/",  # a name: what it resolves to is checked, and connected to
        ):
            final, rec, workdir = await _job(tmp_path, _input(_redirect(server, target)))
            _refused(final, rec, workdir)
            assert "private, loopback, link-local or metadata address" in final.detail, final
            details.append(final.detail.replace(str(port), "PORT"))
    assert details[:4] == details[4:], details  # open or closed: the same words
    assert accepted == []  # and nothing of this machine was ever connected to


async def test_the_lan_and_the_metadata_endpoint_are_refused_unless_the_supplier_allows_the_lan(
    tmp_path, server, counting_listener
) -> None:
    port, accepted = counting_listener
    for address in (LAN, METADATA):
        for url in (f"http://{address}:{server}/hello", _redirect(server, f"http://{address}:{server}/hello")):
            final, rec, workdir = await _job(tmp_path, _input(url))
            _refused(final, rec, workdir)
    assert [address for address, _ in _seen(server)] == [INTERNET, INTERNET]  # only the redirects were asked
    # --egress-allow opens the same private ranges to the inputs as to the jobs: the LAN, then, but
    # never the machine itself, even where allowed
    allowing = InputLimits(allowed=("10.213.0.0/24", "127.0.0.0/8", f"{HOST_PUBLIC}/32"))
    final, rec, _ = await _job(tmp_path, _input(f"http://{LAN}:{server}/hello"), limits=allowing)
    assert final.state == "succeeded" and rec.lines() == ["hello gpus"], (final, rec.lines("stderr"))
    for url in (f"http://{METADATA}:{server}/hello", f"http://127.0.0.1:{port}/", f"http://{HOST_PUBLIC}:{port}/"):
        final, rec, workdir = await _job(tmp_path, _input(url), limits=allowing)
        _refused(final, rec, workdir)
    assert accepted == []


async def test_inputs_over_the_size_limit_are_refused_and_one_at_the_limit_is_fetched(tmp_path, server) -> None:
    limits = InputLimits(max_bytes=MIB)
    exactly = b"x" * MIB
    base = f"http://{INTERNET}:{server}"
    final, _, _ = await _job(tmp_path, _input(f"{base}/big?n={MIB}&announce=0", exactly), limits=limits, command="pass")
    assert final.state == "succeeded", final  # the control: at the limit
    for path in ("/endless", f"/big?n={MIB + 1}&announce=0", f"/big?n={MIB + 1}&announce=1"):
        final, rec, workdir = await _job(tmp_path, _input(base + path, exactly), limits=limits, command="pass")
        _refused(final, rec, workdir)
        assert final.detail == f"inputs: the inputs are over this node's limit of {MIB} bytes", final
    # the limit is the inputs' together: two of half a MiB and one byte more are over it
    half = b"x" * (MIB // 2)
    both = [
        InputFile(path=f"{n}.bin", url=f"{base}/big?n={MIB // 2}", sha256=hashlib.sha256(half).hexdigest())
        for n in "ab"
    ]
    final, _, _ = await _job(tmp_path, *both, limits=limits, command="pass")
    assert final.state == "succeeded", final
    one_more = InputFile(path="c.bin", url=f"{base}/hello", sha256=hashlib.sha256(HELLO).hexdigest())
    final, rec, workdir = await _job(tmp_path, *both, one_more, limits=limits, command="pass")
    assert final.state == "failed" and "over this node's limit" in final.detail, final


async def test_a_slow_server_is_cut_off_at_the_time_limit(tmp_path, server) -> None:
    limits = InputLimits(seconds=2)
    for path in ("/slow", "/slow-headers"):
        started = time.monotonic()
        final, rec, workdir = await _job(tmp_path, _input(f"http://{INTERNET}:{server}{path}"), limits=limits)
        _refused(final, rec, workdir)
        assert final.detail == "inputs: the inputs took longer than this node's limit of 2 s", final
        assert time.monotonic() - started < 10


async def test_links_a_job_left_in_its_workdir_are_not_followed(tmp_path, server) -> None:
    """A job's restart fetches its inputs again: a link it left where an input goes must not make the
    agent write (or read) anywhere else on the machine."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "in.txt").write_text("the supplier's\n")
    url = f"http://{INTERNET}:{server}/hello"
    dispatch_dir = await _job(tmp_path, _input(url))
    workdir = dispatch_dir[2]
    # the same lease's workdir, as the job left it: data/ a link to elsewhere
    (workdir / "data" / "in.txt").unlink()
    (workdir / "data").rmdir()
    (workdir / "data").symlink_to(elsewhere)
    with pytest.raises(InputRefused, match=r"^data/in\.txt: "):
        fetch_inputs(str(workdir), [_input(url)], DEFAULT_LIMITS)
    (workdir / "data").unlink()
    (workdir / "data").mkdir()
    (workdir / "data" / "in.txt").symlink_to(elsewhere / "in.txt")  # the file a link
    fetch_inputs(str(workdir), [_input(url)], DEFAULT_LIMITS)
    assert (workdir / "data" / "in.txt").read_bytes() == HELLO and not (workdir / "data" / "in.txt").is_symlink()
    assert (elsewhere / "in.txt").read_text() == "the supplier's\n"


def test_the_addresses_refused_and_allowed() -> None:
    refused = [
        "127.0.0.1", "127.1.2.3", "::1", "0.0.0.0", "::", "::ffff:127.0.0.1", "::ffff:169.254.169.254",
        "169.254.169.254", "fd00:ec2::254", "fe80::1", "100.64.0.1", "100.100.100.200", "168.63.129.16",
        "10.1.2.3", "172.16.0.1", "192.168.1.1", "2002:7f00:1::1", "2002:a9fe:a9fe::1", "64:ff9b::a9fe:a9fe",
        "224.0.0.1", "ff02::1",
    ]  # fmt: skip
    assert [a for a in refused if address_allowed(a)] == []
    assert all(address_allowed(a) for a in ("8.8.8.8", "2001:4860:4860::8888", INTERNET))  # the control
    allowed = parse_cidrs(["10.1.0.0/16", "127.0.0.0/8"])
    assert address_allowed("10.1.2.3", allowed) and not address_allowed("127.0.0.1", allowed)
