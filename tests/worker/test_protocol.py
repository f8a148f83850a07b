"""gpunet.protocol: every message round-trips, strict validation with clear errors, version
mismatch and its close code, challenge answers bound to their nonce and node key."""

from __future__ import annotations

import json
import os

import pytest
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from gpunet.protocol import (
    CLOSE_MALFORMED,
    CLOSE_VERSION_MISMATCH,
    MAX_MESSAGE_BYTES,
    PROTOCOL_VERSION,
    Ack,
    Cancel,
    Challenge,
    ClusterPeer,
    Dispatch,
    Error,
    GpuTelemetry,
    Heartbeat,
    Hello,
    JobLog,
    JobSpec,
    JobStatus,
    LeaseEnd,
    MemoryBlock,
    PortRange,
    ProtocolError,
    RowOpening,
    UsageAck,
    Verify,
    VerifyCommit,
    VerifyMemory,
    VerifyMemoryOpenings,
    VerifyOpen,
    VerifyOpenings,
    Welcome,
    answer_challenge,
    encode,
    job_message,
    parse_coordinator_message,
    parse_worker_message,
    verify_challenge_answer,
)
from gpunet.usage import Receipt
from worker.metering import sign_receipt
from worker.simulate import SimulatedGpus

LEASE = str(Pubkey.new_unique())
NODE = Keypair()


def worker_messages() -> list:
    inventory = SimulatedGpus.parse("L4:1:24", "n").inventory()
    return [
        Hello(simulated=True, version=PROTOCOL_VERSION, node_key=str(NODE.pubkey()), inventory=inventory),
        answer_challenge(NODE, Challenge(nonce=os.urandom(32).hex()), simulated=True),
        Heartbeat(
            simulated=False,
            healthy=False,
            gpus=[GpuTelemetry(uuid="GPU-1", healthy=False, problems=["lost"])],
            running=[LEASE],
            held=[LEASE],
        ),
        JobStatus(
            simulated=False, lease=LEASE, job_number=2, state="failed", exit_code=1, restarts=2, detail="exited with 1"
        ),
        JobLog(simulated=False, lease=LEASE, job_number=2, stream="stderr", line="CUDA out of memory"),
        sign_receipt(NODE, LEASE, Receipt(1, 120, 160), simulated=False),
        Ack(simulated=False, of="dispatch", lease=LEASE, error="8 GPUs asked for, 2 free", unable=True),
        VerifyCommit(simulated=True, id="ab" * 16, root="cd" * 32),
        VerifyOpenings(
            simulated=True,
            id="ab" * 16,
            openings=[RowOpening(product=3, row=17, chunk=[0, 2**32 - 1], path=["ef" * 32])],
        ),
        VerifyMemoryOpenings(
            simulated=True,
            id="ab" * 16,
            blocks=[
                MemoryBlock(lane=2, block=9, chunk=[7, 2**32 - 1], path=["ef" * 32]),
                MemoryBlock(lane=2, block=8, content="AAEC/w==", chunk=[7], path=[]),
            ],
        ),
        Hello(
            simulated=True,
            version=PROTOCOL_VERSION,
            node_key=str(NODE.pubkey()),
            inventory=inventory,
            advertise_addr="fd00::2",
            cluster_ports=PortRange(first=29500, last=29599),
        ),
    ]


def coordinator_messages() -> list:
    return [
        Challenge(nonce=os.urandom(32).hex()),
        Welcome(heartbeat_seconds=2, usage_period_seconds=60),
        Dispatch(
            lease=LEASE,
            gpus=8,
            job=JobSpec(image="nvcr.io/nvidia/pytorch:24.05-py3", command=["torchrun", "t.py"]),
            rank=1,
            world_size=2,
            peers=["10.0.0.1:29500", "[fd00::2]:29500"],
            cluster=[
                ClusterPeer(host="10.0.0.1", ports=PortRange(first=29500, last=29599)),
                ClusterPeer(host="fd00::2"),
            ],
            job_number=3,
            job_ended=True,
            ends_at=1_700_003_600,
        ),
        Cancel(lease=LEASE, reason="lease closed"),
        LeaseEnd(lease=LEASE, ends_at=1_700_007_200),
        UsageAck(lease=LEASE, epoch=2, gpu_seconds=120, through=160),
        Error(message="node is jailed", code=4401),
        Verify(id="ab" * 16, gpu=1, seed="01" * 16, n=4096, depth=8192, products=14392, expected_seconds=8.0),
        VerifyMemory(
            id="ab" * 16, gpu=0, seed="02" * 16, lanes=65536, blocks=512, block_bytes=2048, expected_seconds=0.7
        ),
        VerifyOpen(id="ab" * 16, rows=[[3, 17], [0, 0]]),
    ]


@pytest.mark.parametrize("message", worker_messages(), ids=lambda m: m.type)
def test_worker_messages_round_trip(message) -> None:
    assert parse_worker_message(encode(message)) == message


@pytest.mark.parametrize("message", coordinator_messages(), ids=lambda m: m.type)
def test_coordinator_messages_round_trip(message) -> None:
    assert parse_coordinator_message(encode(message)) == message


def test_each_direction_knows_only_its_own_types() -> None:
    with pytest.raises(ProtocolError, match="unknown worker message type 'dispatch'"):
        parse_worker_message(encode(coordinator_messages()[2]))
    with pytest.raises(ProtocolError, match="unknown coordinator message type 'heartbeat'"):
        parse_coordinator_message(encode(worker_messages()[2]))


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (lambda m: m | {"simulated": "false"}, "simulated: Input should be a valid boolean"),
        (lambda m: m | {"simulated": 0}, "simulated: Input should be a valid boolean"),
        (lambda m: {k: v for k, v in m.items() if k != "simulated"}, "simulated: Field required"),
        (lambda m: m | {"gpu_seconds": -1}, "gpu_seconds: Input should be greater than or equal to 0"),
        (lambda m: m | {"gpu_seconds": 2**64}, "gpu_seconds: Input should be less than"),
        (lambda m: m | {"epoch": 0}, "epoch: Input should be greater than or equal to 1"),
        (lambda m: m | {"signature": "abc"}, "signature: Value error, not a base58 Ed25519 signature"),
        (lambda m: m | {"lease": "0" * 44}, "lease: Value error, not a base58 public key"),
        (lambda m: m | {"extra": 1}, "extra: Extra inputs are not permitted"),
    ],
)
def test_a_bad_field_is_named_in_the_error(change, error) -> None:
    usage = json.loads(encode(worker_messages()[5]))
    with pytest.raises(ProtocolError, match=error) as refused:
        parse_worker_message(json.dumps(change(usage)))
    assert str(refused.value).startswith("bad usage_receipt message: ") and refused.value.close_code == CLOSE_MALFORMED


def test_unreadable_and_oversized_messages() -> None:
    for raw, error in [
        ("{", "not JSON"),
        ("[1]", "must be a JSON object"),
        ('{"lease": 1}', "has no 'type'"),
        (b"\xff\xfe", "not JSON"),
        ("x" * (MAX_MESSAGE_BYTES + 1), "over the"),
    ]:
        with pytest.raises(ProtocolError, match=error):
            parse_worker_message(raw)


def test_another_protocol_version_gets_its_close_code() -> None:
    hello = json.loads(encode(worker_messages()[0])) | {"version": PROTOCOL_VERSION + 1}
    with pytest.raises(ProtocolError, match=f"protocol version {PROTOCOL_VERSION + 1} is not {PROTOCOL_VERSION}") as e:
        parse_worker_message(json.dumps(hello))
    assert e.value.close_code == CLOSE_VERSION_MISMATCH


def test_a_challenge_answer_is_bound_to_its_nonce_and_node_key() -> None:
    nonce = os.urandom(32).hex()
    answer = answer_challenge(NODE, Challenge(nonce=nonce), simulated=False)
    assert verify_challenge_answer(NODE.pubkey(), nonce, answer)
    assert not verify_challenge_answer(NODE.pubkey(), os.urandom(32).hex(), answer)  # replayed to a new nonce
    assert not verify_challenge_answer(Keypair().pubkey(), nonce, answer)
    with pytest.raises(ProtocolError, match="nonce must be 32 bytes"):
        parse_coordinator_message('{"type": "challenge", "nonce": "00"}')


def test_a_usage_report_verifies_only_for_its_node_and_content() -> None:
    message = worker_messages()[5]
    assert message.verify(NODE.pubkey()) and not message.verify(Keypair().pubkey())
    tampered = message.model_copy(update={"gpu_seconds": message.gpu_seconds + 1})
    assert not tampered.verify(NODE.pubkey())


@pytest.mark.parametrize(
    ("dispatch", "error"),
    [
        ({"rank": 2, "world_size": 2, "peers": ["a:1", "b:1"]}, "rank 2 is not below world_size 2"),
        ({"world_size": 2, "peers": ["a:1"]}, "a cluster of 2 needs 2 peers, got 1"),
        ({"gpus": 0}, "gpus: Input should be greater than or equal to 1"),
        ({"job": {"command": ["x"], "env": {"GPUNET_LEASE": "x"}}}, "GPUNET_LEASE is set by the worker"),
        ({"job": {"command": ["x"], "env": {"1BAD": "x"}}}, "env name '1BAD' is not a valid variable name"),
        ({"job": {"image": "x; rm -rf /"}}, "job.image: String should match pattern"),
        (
            {"job": {"command": ["x"], "restart_policy": "always"}},
            "job.restart_policy: Input should be 'never' or 'on-failure'",
        ),
        ({"job": {"command": ["x"], "inputs": [{"path": "../x", "url": "https://e/x", "sha256": "0" * 64}]}}, "path"),
        (
            {"job": {"command": ["x"], "inputs": [{"path": "x", "url": "file:///etc/passwd", "sha256": "0" * 64}]}},
            "url",
        ),
        ({"job": {"command": ["x"], "time_limit_seconds": 0}}, "time_limit_seconds: Input should be greater than 0"),
    ],
)
def test_bad_job_specs_are_refused(dispatch, error) -> None:
    raw = {"type": "dispatch", "lease": LEASE, "gpus": 1, "job": {"command": ["python", "train.py"]}} | dispatch
    with pytest.raises(ProtocolError, match=error):
        parse_coordinator_message(json.dumps(raw))


@pytest.mark.parametrize(
    ("hello", "error"),
    [
        ({"advertise_addr": "10.0.0.1; rm -rf /"}, "advertise_addr: Value error, must be an IP address or a DNS name"),
        ({"advertise_addr": "-bad.example"}, "must be an IP address or a DNS name"),
        ({"cluster_ports": {"first": 29599, "last": 29500}}, "the port range 29599-29500 is empty"),
        (
            {"cluster_ports": {"first": 0, "last": 10}},
            "cluster_ports.first: Input should be greater than or equal to 1",
        ),
        ({"cluster_ports": {"first": 1, "last": 65536}}, "cluster_ports.last: Input should be less than or equal to"),
    ],
)
def test_a_bad_advertised_address_or_port_range_is_refused(hello, error) -> None:
    raw = json.loads(encode(worker_messages()[0])) | hello
    with pytest.raises(ProtocolError, match=error):
        parse_worker_message(json.dumps(raw))


def test_a_port_range_reads_as_a_supplier_writes_it() -> None:
    assert PortRange.parse("29500-29599") == PortRange(first=29500, last=29599)
    assert PortRange.parse("29500") == PortRange(first=29500, last=29500)
    for bad in ("29599-29500", "a-b", "70000-70001"):
        with pytest.raises(ValueError, match="is not a port range such as 29500-29599"):
            PortRange.parse(bad)


def test_older_messages_without_the_job_number_or_the_lease_end_still_parse() -> None:
    dispatch = parse_coordinator_message(
        json.dumps({"type": "dispatch", "lease": LEASE, "gpus": 1, "job": {"command": ["x"]}})
    )
    assert (dispatch.job_number, dispatch.job_ended, dispatch.ends_at) == (1, False, None)
    status = parse_worker_message(
        json.dumps({"type": "job_status", "simulated": True, "lease": LEASE, "state": "running"})
    )
    assert status.job_number == 1
    with pytest.raises(ProtocolError, match="job_number: Input should be greater than or equal to 1"):
        parse_coordinator_message(
            json.dumps({"type": "dispatch", "lease": LEASE, "gpus": 1, "job": {"command": ["x"]}, "job_number": 0})
        )


def test_an_older_worker_s_heartbeat_without_gpu_error_counts_still_parses() -> None:
    gpu = {"uuid": "GPU-1", "healthy": True, "utilization_pct": 5, "ecc_uncorrected": 0}  # as version 1 sent it
    beat = parse_worker_message(json.dumps({"type": "heartbeat", "simulated": False, "healthy": True, "gpus": [gpu]}))
    [sample] = beat.gpus
    assert (sample.xid_errors, sample.last_xid, sample.ecc_corrected, sample.ecc_corrected_aggregate) == (None,) * 4
    newer = {**gpu, "xid_errors": 2, "last_xid": 79, "ecc_corrected": 5}
    beat = parse_worker_message(json.dumps({"type": "heartbeat", "simulated": False, "healthy": True, "gpus": [newer]}))
    assert (beat.gpus[0].xid_errors, beat.gpus[0].last_xid, beat.gpus[0].ecc_corrected) == (2, 79, 5)
    with pytest.raises(ProtocolError, match=r"gpus\.0\.xid_errors: Input should be greater than or equal to 0"):
        parse_worker_message(
            json.dumps({"type": "heartbeat", "simulated": False, "healthy": True, "gpus": [{**gpu, "xid_errors": -1}]})
        )


def test_a_job_signature_is_bound_to_its_job_number() -> None:
    client, lease, spec = Keypair(), Pubkey.new_unique(), JobSpec(command=["python", "train.py"])
    signature = client.sign_message(job_message(lease, spec, 2, job_number=1))
    assert signature.verify(client.pubkey(), job_message(lease, spec, 2, job_number=1))
    assert not signature.verify(client.pubkey(), job_message(lease, spec, 2, job_number=2))  # no replay as a later job


def test_a_worker_advertises_the_address_of_its_interface_that_routes_to_the_gateway() -> None:
    from worker.network import advertised_address

    assert advertised_address("ws://127.0.0.1:8910/worker") == "127.0.0.1"
    assert advertised_address("wss://no-such-host.invalid/worker") is None  # then the gateway's view, said in the log
