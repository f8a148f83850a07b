"""`gpunet worker status` tells GPUs it could not read (the reason and the fix) from GPUs that differ
from the registration (what differs), from a node registered without an inventory hash. The market's
node1 is registered as 4x H100 with its simulated worker's inventory hash."""

from __future__ import annotations

from worker import cli as worker_cli
from worker.gpus import GpusUnavailable
from worker.simulate import SimulatedGpus


def _status(g, tmp_path, *gpus: str) -> tuple[dict, str]:
    args = ["worker", "status", "-k", str(g.key("node1")), "--state-dir", str(tmp_path / "state"), *gpus]
    return g.json(*args)["inventory_check"], " ".join(g(*args).stdout.split())


def _register_hash(g, spec: str) -> str:
    inventory = SimulatedGpus.parse(spec, g.pubkey("node1")).inventory()
    g("node", "update", g.pubkey("node1"), "--inventory-hash", inventory.hash().hex(), wallet="supplier")
    return inventory.hash().hex()


def test_gpus_that_cannot_be_read_are_not_said_to_differ(market, tmp_path, monkeypatch) -> None:
    _register_hash(market, "H100:4:80")

    def no_driver(simulate, node_key, *, watch_xids=True):
        raise GpusUnavailable("NVML cannot start (NVMLError_LibraryNotFound: NVML Shared Library Not Found)")

    monkeypatch.setattr(worker_cli, "open_gpus", no_driver)
    check, text = _status(market, tmp_path)
    assert check["state"] == "unread"
    assert "could not read this machine's GPUs" in text and "NVMLError_LibraryNotFound" in text
    assert "nvidia-smi" in text and "--simulate-gpus" in text, "what to do about it"
    assert "differs" not in text


def test_gpus_that_differ_say_what_differs_and_how_to_register_them(market, tmp_path) -> None:
    _register_hash(market, "H100:4:80")
    check, text = _status(market, tmp_path, "--simulate-gpus", "H100:2:80")
    now = SimulatedGpus.parse("H100:2:80", market.pubkey("node1")).inventory().hash().hex()
    assert check["state"] == "differs" and "inventory differs" in text
    assert "registered 4x H100, this machine has 2x H100" in text
    assert f"gpunet node update {market.pubkey('node1')} --inventory-hash {now}" in text
    matches, text = _status(market, tmp_path, "--simulate-gpus", "H100:4:80")
    assert (matches, "inventory matches" in text) == ({"state": "matches", "detail": []}, True)


def test_a_node_registered_without_a_hash_is_told_how_to_set_it(market, tmp_path) -> None:
    market("node", "update", market.pubkey("node1"), "--inventory-hash", "00" * 32, wallet="supplier")  # none
    check, text = _status(market, tmp_path, "--simulate-gpus", "H100:4:80")
    assert check["state"] == "no_hash_registered" and "registered without an inventory hash" in text
    assert f"gpunet node update {market.pubkey('node1')} --inventory-hash" in text
