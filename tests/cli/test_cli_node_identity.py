"""A node has two addresses: its worker's key (what `gpunet node` commands, the worker and the
coordinator's answers name) and its account (the PDA events and settlements name). Every CLI table
that shows a node shows its key, labelled "node key", with the account labelled apart where the chain
names the node by it; --json keeps both."""

from __future__ import annotations

import asyncio
import json

from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed

from gpunet.cli import app
from gpunet.testbed import Market


def _settled_lease(url: str) -> tuple[str, str, str]:
    """(lease, node key, node account): a lease of one node with one settlement."""

    async def build() -> tuple[str, str, str]:
        async with AsyncClient(url, commitment=Confirmed) as chain:
            market = await Market.create(chain, usage_period_seconds=60)
            ada = await market.supplier()
            lease = await market.open_lease(await market.client(), 1, gpus=2)
            await market.assign(lease, [(ada, 2)])
            await market.settle(lease, ada)
            return str(lease), str(ada.node_key.pubkey()), str(ada.node)

    return asyncio.run(build())


def test_tables_name_a_node_by_its_key_and_label_its_account(gpunet) -> None:
    lease, key, account = _settled_lease(gpunet.node.url)

    def run(*args: str) -> str:
        result = gpunet.runner.invoke(app, [*args, "--url", gpunet.node.url], env={"COLUMNS": "400"})
        assert result.exit_code == 0, result.output
        return result.stdout

    [settled] = json.loads(run("settlements", "list", "--lease", lease, "--json"))
    assert (settled["node_key"], settled["node"]) == (key, account)
    table = run("settlements", "list", "--lease", lease)
    assert "node key" in table and key in table and account not in table

    shown = run("lease", "show", lease)
    assert f"node key {key}" in shown and f"node account {account}" in shown

    audited = run("audit", "--lease", lease)
    assert f"GPU-seconds of node key {key}" in audited and f"gpu_seconds {account}" not in audited
    [per_node] = [c for c in json.loads(run("audit", "--lease", lease, "--json"))["checks"] if "node" in c]
    assert (per_node["node"], per_node["node_key"], per_node["ok"]) == (account, key, True)
