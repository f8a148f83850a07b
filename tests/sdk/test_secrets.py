"""Secrets sealed to a node (gpunet.secrets) and the protocol fields that carry them: only the node
they were sealed to opens them, a changed byte is refused, and messages from before secrets parse
and sign as they did."""

from __future__ import annotations

import base64
import json

import pytest
from pydantic import ValidationError
from solders.keypair import Keypair
from solders.signature import Signature

from gpunet.protocol import (
    REQUEST_AT_HEADER,
    REQUEST_NONCE_HEADER,
    REQUEST_SIGNATURE_HEADER,
    REQUEST_WALLET_HEADER,
    Dispatch,
    Expose,
    JobSpec,
    JobStatus,
    job_message,
    request_message,
    sign_request,
)
from gpunet.secrets import SecretError, open_sealed, seal, seal_all


def test_a_secret_opens_with_its_node_s_key_alone() -> None:
    node, other = Keypair(), Keypair()
    sealed = seal(node.pubkey(), "hunter2 ✓")
    assert "hunter2" not in sealed and open_sealed(node, sealed) == "hunter2 ✓"  # control
    assert seal(node.pubkey(), "hunter2 ✓") != sealed  # a fresh ephemeral key each time
    with pytest.raises(SecretError, match="does not open with this node's key"):
        open_sealed(other, sealed)  # sealed to another node
    box = bytearray(base64.b64decode(sealed))
    box[-1] ^= 1
    with pytest.raises(SecretError, match="does not open"):
        open_sealed(node, base64.b64encode(bytes(box)).decode())  # changed
    with pytest.raises(SecretError, match="not base64"):
        open_sealed(node, "not base64!")
    assert {k: open_sealed(node, v) for k, v in seal_all(node.pubkey(), {"A": "1", "B": ""}).items()} == {
        "A": "1",
        "B": "",
    }
    with pytest.raises(SecretError, match="at most"):
        seal(node.pubkey(), "x" * 40_000)


def test_secret_names_are_checked_and_old_messages_parse_and_sign_as_before() -> None:
    assert JobSpec(command=["x"], secrets=["TOKEN"]).secrets == ["TOKEN"]
    for bad, why in [
        ({"secrets": ["A", "A"]}, "named twice"),
        ({"secrets": ["A"], "env": {"A": "1"}}, "both a plain env value and a secret"),
        ({"secrets": ["1A"]}, "not a valid variable name"),
        ({"secrets": ["GPUNET_X"]}, "set by the worker"),
        ({"secrets": ["RAY_AUTH_MODE"]}, "set by the worker"),
        # a Ray job's cluster admits only holders of its token: the job must name it among its secrets
        ({"ray": True}, "names the secret RAY_AUTH_TOKEN"),
        ({"ray": True, "env": {"RAY_AUTH_TOKEN": "plain"}}, "names the secret RAY_AUTH_TOKEN"),
    ]:
        with pytest.raises(ValidationError, match=why):
            JobSpec(command=["x"], **bad)
    old = {"type": "dispatch", "lease": str(Keypair().pubkey()), "gpus": 1, "job": {"command": ["x"]}}
    assert Dispatch.model_validate(old).secrets == {} and Dispatch.model_validate(old).job.secrets == []
    assert JobStatus(simulated=True, lease=old["lease"], state="waiting_secrets").state == "waiting_secrets"
    # a job without secrets signs exactly as before the field existed; one with secrets signs them
    lease = Keypair().pubkey()
    body = {"job": {**JobSpec(command=["x"]).model_dump(mode="json")}, "gpus_per_node": None, "job_number": 1}
    del body["job"]["secrets"], body["job"]["ray"], body["job"]["expose"]  # none of them existed then
    before = b"gpunet-job-v1\x00" + bytes(lease) + json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    assert job_message(lease, JobSpec(command=["x"])) == before
    assert job_message(lease, JobSpec(command=["x"], secrets=["T"])) != before
    assert job_message(lease, JobSpec(command=["x"], expose=[Expose(name="api", port=8000)])) != before
    token = ["RAY_AUTH_TOKEN"]
    ray = JobSpec(command=["x"], ray=True, secrets=token)  # the control: a Ray job naming its token
    assert job_message(lease, ray) != job_message(lease, JobSpec(command=["x"], secrets=token))  # signs that it is one


def test_a_signed_request_binds_its_method_target_body_time_wallet_and_nonce() -> None:
    wallet = Keypair()
    headers = sign_request(wallet, "post", "/leases/x/secrets?a=1", b"{}", 1_000)
    assert headers[REQUEST_AT_HEADER] == "1000" and headers[REQUEST_WALLET_HEADER] == str(wallet.pubkey())
    signature, nonce = Signature.from_string(headers[REQUEST_SIGNATURE_HEADER]), headers[REQUEST_NONCE_HEADER]
    message = request_message("POST", "/leases/x/secrets?a=1", b"{}", 1_000, wallet.pubkey(), nonce)
    assert signature.verify(wallet.pubkey(), message)  # control
    for changed in [
        request_message("GET", "/leases/x/secrets?a=1", b"{}", 1_000, wallet.pubkey(), nonce),
        request_message("POST", "/leases/x/secrets?a=2", b"{}", 1_000, wallet.pubkey(), nonce),
        request_message("POST", "/leases/x/secrets?a=1", b"{ }", 1_000, wallet.pubkey(), nonce),
        request_message("POST", "/leases/x/secrets?a=1", b"{}", 1_001, wallet.pubkey(), nonce),
        request_message("POST", "/leases/x/secrets?a=1", b"{}", 1_000, Keypair().pubkey(), nonce),
        request_message("POST", "/leases/x/secrets?a=1", b"{}", 1_000, wallet.pubkey(), nonce + "0"),
    ]:
        assert not signature.verify(wallet.pubkey(), changed)
    # Two requests alike in the same millisecond (two followers of one lease) never sign alike.
    again = sign_request(wallet, "post", "/leases/x/secrets?a=1", b"{}", 1_000)
    assert again[REQUEST_SIGNATURE_HEADER] != headers[REQUEST_SIGNATURE_HEADER]
