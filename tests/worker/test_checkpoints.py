"""Checkpoints that move with a lease: the agent sends its job's checkpoint directory when it
changes, and a job dispatched elsewhere with `restore` resumes from it (real subprocesses)."""

from __future__ import annotations

import base64
import logging
import shutil
from pathlib import Path

import pytest
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from coordinator.checkpoints import DiskBlobs
from gpunet.checkpoint import lease_key, seal_key
from gpunet.protocol import Checkpoint, CheckpointFile, Dispatch, Hello, JobLog, JobStatus
from tests.coordinator.test_checkpoint_store import CLIENT, LEASE, Server
from tests.worker.gateway import FakeGateway
from tests.worker.sandboxes import host_jobs
from tests.worker.test_agent import final_status, job, running_agent
from worker import checkpoints
from worker.checkpoints import CheckpointStoreClient, CheckpointTooLarge, UploadStats, restore, snapshot
from worker.runner import JobDirs, JobRunner


async def test_the_checkpoint_travels_to_the_coordinator_and_a_new_node_resumes_from_it(tmp_path) -> None:
    lease = str(Pubkey.new_unique())
    async with FakeGateway() as gateway:
        async with running_agent(gateway, tmp_path / "first", Keypair()):
            await gateway.send(Dispatch(lease=lease, gpus=1, job=job(steps=4, step_seconds=0.3)))
            await gateway.wait_for(lambda: final_status(gateway, lease), what="the first run's end")
            last = await gateway.wait_for(
                lambda: [c for c in gateway.messages(Checkpoint) if c.files[0].content() == b"4"], what="step 4"
            )
        files = last[-1].files
        assert [f.path for f in files] == ["step"]

        # Another node (empty state) gets the lease with the checkpoint and starts from step 4.
        gateway.received.clear()
        async with running_agent(gateway, tmp_path / "second", Keypair()):
            await gateway.wait_for(lambda: gateway.messages(Hello), what="the second node's session")
            await gateway.send(Dispatch(lease=lease, gpus=1, job=job(steps=6, step_seconds=0.1), restore=files))
            status = await gateway.wait_for(lambda: final_status(gateway, lease), what="the resumed run's end")
        assert status.state == "succeeded"
        stdout = [m.line for m in gateway.messages(JobLog) if m.stream == "stdout"]
        assert stdout[0] == "resumed from 4" and stdout[1:3] == ["step 5", "step 6"]


async def test_a_lease_whose_client_sealed_a_key_never_sends_its_checkpoint_in_the_clear(tmp_path) -> None:
    """Without --api (no checkpoint store) the gateway is the only way out, unencrypted: a lease whose
    client sealed a checkpoint key keeps its checkpoints on the node instead. The control is the test
    above: without a key, the same job's checkpoints travel."""
    lease, node = str(Pubkey.new_unique()), Keypair()
    sealed = seal_key(node.pubkey(), lease_key(Keypair(), lease))
    async with FakeGateway() as gateway:
        async with running_agent(gateway, tmp_path / "node", node):
            await gateway.send(Dispatch(lease=lease, gpus=1, job=job(steps=4, step_seconds=0.3), checkpoint_key=sealed))
            status = await gateway.wait_for(lambda: final_status(gateway, lease), what="the run's end")
    assert status.state == "succeeded"
    assert "step 4" in [m.line for m in gateway.messages(JobLog) if m.stream == "stdout"]
    assert not gateway.messages(Checkpoint)


def test_restore_checks_every_file_and_never_overwrites_the_nodes_own_state(tmp_path) -> None:
    good = CheckpointFile.of("model/weights.bin", b"\x00\x01")
    bad = CheckpointFile(path="step", sha256=good.sha256, data_b64=base64.b64encode(b"tampered").decode())
    with pytest.raises(ValueError, match="does not match its sha256"):
        restore(tmp_path / "a", [good, bad])
    assert not (tmp_path / "a" / "model").exists()  # nothing written when one file is bad
    assert restore(tmp_path / "b", [good]) == 1
    assert (tmp_path / "b" / "model" / "weights.bin").read_bytes() == b"\x00\x01"
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "step").write_text("9")
    assert restore(tmp_path / "c", [CheckpointFile.of("step", b"4")]) == 0
    assert (tmp_path / "c" / "step").read_text() == "9"


def test_a_checkpoint_too_large_for_a_message_stays_local(tmp_path) -> None:
    (tmp_path / "big").write_bytes(b"\x00" * (512 * 1024 + 1))
    with pytest.raises(CheckpointTooLarge):
        snapshot(tmp_path)


async def test_a_corrupt_restore_fails_the_job_with_the_reason(tmp_path) -> None:
    messages = []
    bad = CheckpointFile(path="step", sha256="0" * 64, data_b64=base64.b64encode(b"4").decode())
    d = Dispatch(lease=str(Pubkey.new_unique()), gpus=1, job=job(steps=1), restore=[bad])
    runner = JobRunner(
        d, ["GPU-sim"], JobDirs.of(tmp_path, d), simulated=True, send=messages.append, sandbox=host_jobs()
    )
    final = await runner.run()
    assert final.state == "failed" and "restoring the checkpoint" in final.detail
    assert not [m for m in messages if isinstance(m, JobStatus) and m.state == "running"]


async def test_checkpoint_uploads_are_debug_lines_summed_up_at_info_when_the_job_ends(tmp_path, caplog) -> None:
    # Each upload to the checkpoint store was an info line (hundreds for a small job that checkpoints
    # often). They are debug lines; one info line at the job's end says how many went.
    caplog.set_level(logging.DEBUG)
    node = Keypair()
    store = Server(DiskBlobs(tmp_path / "store"), {str(node.pubkey())})
    sealed = seal_key(node.pubkey(), lease_key(CLIENT, LEASE))
    dispatch = Dispatch(
        lease=LEASE,
        gpus=1,
        job=job(steps=5, step_seconds=0.4),
        checkpoint_key=sealed,
        checkpoint_signers=[str(node.pubkey())],
    )

    def lines(event: str) -> list[logging.LogRecord]:
        return [r for r in caplog.records if isinstance(r.msg, dict) and r.msg["event"] == event]

    try:
        async with FakeGateway() as gateway:
            async with running_agent(gateway, tmp_path / "node", node, api_url=store.url):
                await gateway.send(dispatch)
                await gateway.wait_for(lambda: final_status(gateway, LEASE), what="the job's end")
                [summary] = await gateway.wait_for(lambda: lines("checkpoint.uploads"), what="the summary")
    finally:
        store.stop()
    uploads = lines("checkpoint.uploaded")
    assert len(uploads) >= 2 and {r.levelno for r in uploads} == {logging.DEBUG}
    # (the meter clock may start one more upload as the last one ends: it is not the job's to count)
    before = [r for r in uploads if caplog.records.index(r) < caplog.records.index(summary)]
    assert summary.levelno == logging.INFO and summary.msg["checkpoints"] == len(before) >= 2
    assert store.store.manifest_seqs(LEASE)  # the control: they were stored


def _swapped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A checkpoint directory listed by the agent, whose job then (running, as a uid of its own)
    swapped its file for a link to a file of root's, and its directory for a link to root's
    directory; the listing (the agent's, at the module's boundary) stays what it was."""
    roots = tmp_path / "roots"
    roots.mkdir()
    (roots / "shadow").write_text("root's secret")
    (roots / "state").write_text("root's secret")
    ckpt = tmp_path / "ckpt"
    (ckpt / "sub").mkdir(parents=True)
    (ckpt / "step").write_text("4")
    (ckpt / "sub" / "state").write_text("s")
    listed = checkpoints._files(ckpt)
    assert [p.relative_to(ckpt).as_posix() for p in listed] == ["step", "sub/state"]
    (ckpt / "step").unlink()
    (ckpt / "step").symlink_to(roots / "shadow")
    shutil.rmtree(ckpt / "sub")
    (ckpt / "sub").symlink_to(roots)
    monkeypatch.setattr(checkpoints, "_files", lambda directory: listed)
    return ckpt


def test_the_agent_follows_no_link_the_job_swapped_in_after_the_listing(tmp_path, monkeypatch) -> None:
    honest = tmp_path / "honest"
    (honest / "sub").mkdir(parents=True)
    (honest / "step").write_text("4")
    (honest / "sub" / "state").write_text("s")
    assert {f.path: f.content() for f in snapshot(honest)} == {"step": b"4", "sub/state": b"s"}  # the control
    ckpt = _swapped(tmp_path, monkeypatch)
    assert snapshot(ckpt) == []
    # the checkpoint store's path: nothing of root's is sealed either
    store = CheckpointStoreClient("http://127.0.0.1:9", Keypair(), str(Pubkey.new_unique()), bytes(32), signers=set())
    with store:
        assert [(e.path, e.size) for e in store._seal_directory(ckpt, UploadStats())] == []


async def test_the_job_s_end_is_said_after_its_last_checkpoint_has_gone(tmp_path) -> None:
    """A client told the job ended fetches its checkpoint: that must be the last one the job wrote.
    The meter clock's own sends are out of the way (a tick longer than the test), so only the send at
    the job's end carries step 4."""
    lease = str(Pubkey.new_unique())
    async with FakeGateway() as gateway:
        async with running_agent(gateway, tmp_path / "node", Keypair(), meter_tick_seconds=60):
            await gateway.send(Dispatch(lease=lease, gpus=1, job=job(steps=4, step_seconds=0.1)))
            ended = await gateway.wait_for(lambda: final_status(gateway, lease), what="the job's end")
            received = [m for _, m in gateway.received]
            last = [i for i, m in enumerate(received) if isinstance(m, Checkpoint) and m.files[0].content() == b"4"]
    assert ended.state == "succeeded"
    assert last and last[-1] < received.index(ended), "the job's end came before its last checkpoint"
