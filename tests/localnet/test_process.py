"""Starting gpunet-localnet from Python (gpunet.localnet.LocalnetProcess)."""

from __future__ import annotations

import socket

import pytest

from gpunet.localnet import LocalnetError, LocalnetProcess


def test_a_first_start_moves_to_new_ports_when_one_was_taken_meanwhile(localnet_bin, tmp_path):
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        node = LocalnetProcess(tmp_path / "node.log", binary=localnet_bin)
        node.rpc_port = taken  # as if another process had taken it after it was picked
        try:
            node.start()
            assert node.rpc_port != taken and node.call("getHealth")["result"] == "ok"
            assert b"Address already in use" in (tmp_path / "node.log").read_bytes()

            # A restart keeps its ports (callers hold its URL): a taken one is an error, not a move.
            node.stop()
            node.rpc_port = taken
            with pytest.raises(LocalnetError, match="exited with 1"):
                node.start()
        finally:
            node.stop()
