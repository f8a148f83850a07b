"""The committed IDL (gpunet/idl/gpunet.json): parses with anchorpy3, matches the program, usable by the SDK."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest
from anchorpy import Context, Program, Provider, Wallet
from solana.rpc.async_api import AsyncClient
from solders.pubkey import Pubkey

from gpunet import limits
from gpunet.events import EVENT_NAMES
from gpunet.idl import IDL_RESOURCE, PROGRAM_ID, idl_constants, idl_json, load_idl
from gpunet.localnet import cargo_target_dir
from gpunet.protocol import Dispatch, JobSpec

REPO = Path(__file__).resolve().parent.parent
COMMITTED_IDL = REPO / "gpunet" / "idl" / "gpunet.json"

INSTRUCTIONS = {
    "finalize_lease",
    "reclaim_lease",
    "initialize",
    "update_config",
    "register_provider",
    "stake",
    "request_unstake",
    "withdraw_unstaked",
    "register_node",
    "update_node",
    "deregister_node",
    "release_node",
    "unjail_node",
    "set_node_draining",
    "record_verification",
    "open_lease",
    "assign_lease",
    "top_up_lease",
    "reassign_lease",
    "close_lease",
    "settle_usage",
    "sweep_fees",
    "slash_provider",
    # co-staking and rewards
    "configure_staking",
    "update_staking",
    "fund_rewards",
    "open_pool",
    "set_commission",
    "delegate",
    "undelegate",
    "withdraw_delegation",
    "collect_rewards",
    "withdraw_pool_rewards",
    "post_reward_root",
    "veto_reward_root",
    "claim_reward",
    "skip_reward_epoch",
    "expire_reward_root",
}
ACCOUNTS = {
    "Config",
    "Provider",
    "Node",
    "Lease",
    "Evidence",
    "Staking",
    "Pool",
    "Cohort",
    "Delegation",
    "RewardIndex",
    "RewardRoot",
}
EVENTS = {
    "LeaseFinalized",
    "LeaseReclaimed",
    "ConfigInitialized",
    "ConfigUpdated",
    "ProviderRegistered",
    "Staked",
    "UnstakeRequested",
    "UnstakeWithdrawn",
    "NodeRegistered",
    "NodeUpdated",
    "NodeDeregistered",
    "NodeReleased",
    "NodeUnjailed",
    "NodeDrainingSet",
    "NodeVerified",
    "LeaseOpened",
    "LeaseAssigned",
    "LeaseToppedUp",
    "LeaseReassigned",
    "LeaseClosed",
    "UsageSettled",
    "FeesSwept",
    "ProviderSlashed",
    "StakingConfigured",
    "RewardsFunded",
    "PoolOpened",
    "CommissionSet",
    "Delegated",
    "Undelegated",
    "DelegationWithdrawn",
    "RewardsCollected",
    "PoolRewardsWithdrawn",
    "RewardRootPosted",
    "RewardRootVetoed",
    "RewardRootExpired",
    "RewardClaimed",
    "RewardEpochSkipped",
}

# The program's #[constant]s. programs/gpunet/tests/limits.rs checks, from the committed IDL, that
# the program accepts each at its bound and refuses it one step past.
CONSTANTS = {
    "ANY": 0,
    "BPS_DENOMINATOR": 10_000,
    "DELEGATION_CAP_BPS": 10_000,
    "MAX_ATTESTERS": 4,
    "MAX_COHORTS": 8,
    "MAX_COMMISSION_BPS": 5_000,
    "MAX_DOWNTIME_TOLERANCE_SECONDS": 3_600,
    "MAX_GPUS_PER_NODE": 16,
    "MAX_LEASE_GPUS": 128,
    "MAX_LEASE_NODES": 8,
    "MAX_PROOF_LEN": 32,
    "MAX_PROTOCOL_FEE_BPS": 2_000,
    "MAX_VERIFICATION_SECONDS": 30 * 86_400,
    "MAX_VERIFICATION_TIER": 3,
    "MIN_DOWNTIME_TOLERANCE_SECONDS": 10,
}

# A cold build of the program with the idl-build feature takes minutes on 2 cores.
CARGO_TIMEOUT_S = 1800


def _discriminator(namespace: str, name: str) -> list[int]:
    return list(hashlib.sha256(f"{namespace}:{name}".encode()).digest()[:8])


def _run_idl_check(path: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["CARGO_TARGET_DIR"] = str(cargo_target_dir())
    return subprocess.run(
        ["cargo", "run", "-q", "-p", "gpunet-localnet", "--bin", "gpunet-idl", "--", "--check", str(path)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=CARGO_TIMEOUT_S,
    )


def test_package_data_is_the_committed_file() -> None:
    assert Path(str(IDL_RESOURCE)).resolve() == COMMITTED_IDL
    assert idl_json() == COMMITTED_IDL.read_text(encoding="utf-8")


def test_idl_parses_with_anchorpy3() -> None:
    idl = load_idl()
    assert idl.name == "gpunet"
    assert str(PROGRAM_ID) == "DUaGWuMPftjSLiWWJYjqdte7boRZ8vqT77vf372eqHj4"
    assert idl.address == str(PROGRAM_ID)

    names = [ix.name for ix in idl.instructions]
    assert len(names) == len(INSTRUCTIONS)
    assert set(names) == INSTRUCTIONS
    assert {acc.name for acc in idl.accounts} == ACCOUNTS
    # Account definitions resolve to real structs, not anchorpy3's empty stubs.
    assert all(acc.ty.fields for acc in idl.accounts)
    assert idl.events is not None
    assert {ev.name for ev in idl.events} == EVENTS
    assert idl.errors


def test_discriminators_follow_anchor_convention() -> None:
    raw = json.loads(idl_json())
    for ix in raw["instructions"]:
        assert ix["discriminator"] == _discriminator("global", ix["name"]), ix["name"]
    for acc in raw["accounts"]:
        assert acc["discriminator"] == _discriminator("account", acc["name"]), acc["name"]
    for ev in raw["events"]:
        assert ev["discriminator"] == _discriminator("event", ev["name"]), ev["name"]


def test_constants_are_the_limits_the_sdk_uses() -> None:
    assert idl_constants() == CONSTANTS
    # gpunet.limits names every constant of the IDL, with the IDL's value
    assert set(limits.__all__) == set(CONSTANTS)
    assert {name: getattr(limits, name) for name in limits.__all__} == CONSTANTS
    assert CONSTANTS["MAX_LEASE_GPUS"] == CONSTANTS["MAX_LEASE_NODES"] * CONSTANTS["MAX_GPUS_PER_NODE"]


def test_the_worker_protocol_takes_its_bounds_from_the_idl() -> None:
    job = JobSpec(command=["true"])
    peers = [f"10.0.0.{i}:29500" for i in range(limits.MAX_LEASE_NODES)]
    ok = Dispatch(
        lease=str(PROGRAM_ID), gpus=limits.MAX_GPUS_PER_NODE, job=job, world_size=limits.MAX_LEASE_NODES, peers=peers
    )
    assert (ok.gpus, ok.world_size) == (limits.MAX_GPUS_PER_NODE, limits.MAX_LEASE_NODES)
    for too_many in (
        {"gpus": limits.MAX_GPUS_PER_NODE + 1},
        {"world_size": limits.MAX_LEASE_NODES + 1},
        {"peers": [*peers, "10.0.0.99:29500"]},
    ):
        with pytest.raises(ValueError):
            Dispatch(**{"lease": str(PROGRAM_ID), "gpus": 1, "job": job, **too_many})


def test_event_names_are_the_idls() -> None:
    assert set(EVENT_NAMES) == EVENTS
    assert len(EVENT_NAMES) == len(EVENTS)


async def test_anchorpy3_builds_an_instruction_from_the_idl() -> None:
    idl = load_idl()
    stake = next(ix for ix in idl.instructions if ix.name == "stake")
    accounts = {acc.name: Pubkey.new_unique() for acc in stake.accounts}
    provider = Provider(AsyncClient("http://127.0.0.1:9"), Wallet.dummy())
    async with Program(idl, PROGRAM_ID, provider) as program:
        ix = program.instruction["stake"](1_234_567, ctx=Context(accounts=accounts))

    raw_stake = next(i for i in json.loads(idl_json())["instructions"] if i["name"] == "stake")
    assert ix.program_id == PROGRAM_ID
    assert ix.data[:8] == bytes(raw_stake["discriminator"])
    assert ix.data[8:] == (1_234_567).to_bytes(8, "little")
    assert [meta.pubkey for meta in ix.accounts] == [accounts[acc.name] for acc in stake.accounts]
    authority = ix.accounts[0]
    assert authority.is_signer


@pytest.mark.timeout(CARGO_TIMEOUT_S)
def test_committed_idl_matches_program() -> None:
    """Drift test: the committed IDL is exactly what the program generates."""
    result = _run_idl_check(COMMITTED_IDL)
    assert result.returncode == 0, f"gpunet-idl --check failed:\n{result.stderr}"


@pytest.mark.timeout(CARGO_TIMEOUT_S)
def test_idl_check_detects_drift(tmp_path: Path) -> None:
    raw = json.loads(COMMITTED_IDL.read_text(encoding="utf-8"))
    raw["instructions"] = [ix for ix in raw["instructions"] if ix["name"] != "slash_provider"]
    modified = tmp_path / "gpunet.json"
    modified.write_text(json.dumps(raw, indent=2) + "\n", encoding="utf-8")

    result = _run_idl_check(modified)
    assert result.returncode == 1, result.stderr
    assert "IDL drift" in result.stderr
    assert "scripts/idl" in result.stderr
