"""Runs the `gpunet` CLI in-process (typer's CliRunner) against a gpunet-localnet node."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from typer.testing import CliRunner, Result

from gpunet import instructions as ix
from gpunet.accounts import fetch
from gpunet.cli import app
from gpunet.client import send_and_confirm
from gpunet.keys import create_keypair_file, load_keypair
from gpunet.localnet import LocalnetProcess, localnet_deployer
from gpunet.pda import node_pda


@dataclass
class Gpunet:
    node: LocalnetProcess
    home: Path
    runner: CliRunner

    def __call__(self, *args: str, wallet: str | None = None, expect: int = 0) -> Result:
        argv = [*args, "--url", self.node.url]
        if wallet is not None:
            argv += ["--keypair", str(self.key(wallet))]
        result = self.runner.invoke(app, argv)
        assert result.exit_code == expect, f"gpunet {' '.join(args)} -> {result.exit_code}\n{result.output}"
        return result

    def json(self, *args: str, wallet: str | None = None) -> Any:
        return json.loads(self(*args, "--json", wallet=wallet).stdout)

    def key(self, name: str) -> Path:
        return self.home / f"{name}.json"

    def pubkey(self, name: str) -> str:
        return str(load_keypair(self.key(name)).pubkey())

    def signatures_of(self, name: str) -> int:
        """How many transactions mention the wallet: unchanged when a command sent nothing."""
        reply = self.node.call("getSignaturesForAddress", [self.pubkey(name)])
        return len(reply["result"])

    def assign(self, lease: str, gpus: int, price: int, node: str = "node1", supplier: str = "supplier") -> None:
        """The coordinator's part (the admin is the attester): places `gpus` GPUs of `node` at `price`."""
        admin, node_key = load_keypair(self.key("admin")), load_keypair(self.key(node))

        async def send() -> None:
            async with AsyncClient(self.node.url, commitment=Confirmed) as client:
                await send_and_confirm(
                    client,
                    admin,
                    [
                        ix.assign_lease(
                            admin.pubkey(),
                            Pubkey.from_string(lease),
                            [ix.Share(node_key.pubkey(), Pubkey.from_string(self.pubkey(supplier)), gpus, price)],
                        )
                    ],
                )

        asyncio.run(send())

    def inventory_hash(self, node: str, gpus: str) -> str:
        """What `gpunet worker inventory` prints for the node's worker simulating `gpus` (MODEL:COUNT:VRAM_GB):
        the hash a supplier registers."""
        result = self.runner.invoke(app, ["worker", "inventory", "-k", str(self.key(node)), "--simulate-gpus", gpus])
        assert result.exit_code == 0, result.output
        return str(json.loads(result.stdout)["inventory_hash"])

    def verify(self, node: str = "node1") -> None:
        """The coordinator's part (the admin is the attester): records the node's GPUs verified (simulated,
        as a local cluster's workers run them) for an hour, for its registered inventory."""
        admin, node_key = load_keypair(self.key("admin")), load_keypair(self.key(node))

        async def send() -> None:
            async with AsyncClient(self.node.url, commitment=Confirmed) as client:
                registered = bytes((await fetch(client, node_pda(node_key.pubkey()), "Node")).spec.inventory_hash)
                until = int(time.time()) + 3600
                evidence = hashlib.sha256(b"the verification evidence the coordinator keeps").digest()
                verify = ix.record_verification(
                    admin.pubkey(), node_key.pubkey(), ix.TIER_SIMULATED, until, evidence, registered
                )
                await send_and_confirm(client, admin, [verify])

        asyncio.run(send())

    def wallet(self, name: str, sol: str = "5", keypair: Keypair | None = None) -> str:
        if keypair is not None:  # a given key, e.g. the node's upgrade authority
            create_keypair_file(self.key(name), keypair)
        else:
            assert self.runner.invoke(app, ["keys", "new", str(self.key(name))]).exit_code == 0
        if sol:
            self("airdrop", sol, wallet=name)
        return self.pubkey(name)


@pytest.fixture
def gpunet(node, tmp_path) -> Gpunet:
    return Gpunet(node, tmp_path, CliRunner())


@pytest.fixture
def market(gpunet: Gpunet) -> Gpunet:
    """Initialised gpunet as `admin init` leaves it (leases only on verified nodes): admin (also the
    attester), a supplier with a 4x H100 node registered with its worker's inventory hash and verified,
    a client with IO."""
    gpunet.wallet("admin", keypair=localnet_deployer())  # only the upgrade authority may `admin init`
    for name in ("supplier", "client"):
        gpunet.wallet(name)
    gpunet.wallet("node1", sol="")
    gpunet("admin", "init", "--usage-period", "60s", "--unbonding", "1s", "--jail", "2s", wallet="admin")
    gpunet("admin", "mint", gpunet.pubkey("supplier"), "1000", wallet="admin")
    gpunet("admin", "mint", gpunet.pubkey("client"), "100", wallet="admin")
    gpunet("provider", "register", wallet="supplier")
    gpunet("provider", "stake", "600", wallet="supplier")
    gpunet(
        "node",
        "register",
        str(gpunet.key("node1")),
        "--gpu",
        "H100",
        "--count",
        "4",
        "--region",
        "us-east",
        "--price",
        "2",
        "--inventory-hash",
        gpunet.inventory_hash("node1", "H100:4:80"),
        wallet="supplier",
    )
    gpunet.verify("node1")
    return gpunet
