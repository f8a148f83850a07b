"""Co-staking through the `gpunet` CLI on gpunet-localnet with the real program: the admin's staking
config, a supplier's pool, and a token holder's positions from delegation to withdrawal (with a
reward root posted and claimed through the SDK, as the coordinator does), the IO counted to the
base unit; then bad input, each refused with what to do and nothing sent."""

from __future__ import annotations

import asyncio
import time

from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solders.pubkey import Pubkey

from gpunet import staking
from gpunet.amounts import IO
from gpunet.cli.common import Exit
from gpunet.client import TransactionFailed, send_and_confirm
from gpunet.keys import load_keypair
from gpunet.limits import BPS_DENOMINATOR
from gpunet.pda import provider_pda
from gpunet.rewards import RewardLeaf, RewardTree

EPOCH = 4  # seconds: the story waits about three epochs (its first commands must land in epoch 0)
COMMISSION = 500
SUPPLIER_PART, DELEGATORS_PART = 2 * IO, 5 * IO  # epoch 1's reward for the supplier's pool


def _wait_until(unix: float) -> None:
    time.sleep(max(0.0, unix - time.time()))


def _reward_epoch_one(g, provider: Pubkey) -> None:
    """The coordinator's part (the admin is the attester): posts epoch 1's root with one leaf for
    the pool and, past the root's timelock, claims it (anyone may)."""
    admin = load_keypair(g.key("admin"))
    mint = Pubkey.from_string(g.json("admin", "show")["io_mint"])

    async def send() -> None:
        async with AsyncClient(g.node.url, commitment=Confirmed) as client:
            tree = RewardTree([RewardLeaf(1, provider, SUPPLIER_PART, DELEGATORS_PART)], mint)
            post = staking.post_reward_root(admin.pubkey(), 1, tree.root, tree.total, 1)
            await send_and_confirm(client, admin, [post])
            for _ in range(40):
                try:
                    await send_and_confirm(
                        client, admin, [staking.claim_reward(admin.pubkey(), tree.leaves[0], tree.proof(0))]
                    )
                    return
                except TransactionFailed as e:
                    if e.program_error is None or e.program_error.name != "RootTimelocked":
                        raise
                    await asyncio.sleep(0.25)
            raise TimeoutError("the root never left its timelock")

    asyncio.run(send())


def _per_share(amount: int, shares: int) -> int:
    return (amount << 64) // shares  # the program's reward_per_share


def reward_of(shares: int, per_share: int) -> int:
    return (shares * per_share) >> 64  # what a position collects, rounded down


def test_a_delegation_from_the_staking_config_to_its_withdrawal(market) -> None:
    g = market
    supplier = g.pubkey("supplier")
    provider = provider_pda(Pubkey.from_string(supplier))
    fan = g.wallet("fan")
    g("admin", "mint", fan, "1000", wallet="admin")
    g("admin", "mint", g.pubkey("admin"), "100", wallet="admin")

    # Epoch 0 begins with the config: the pool opens and both positions land in it (they earn epoch 1)
    g(
        "admin",
        "staking",
        "configure",
        "--epoch",
        f"{EPOCH}s",
        "--root-timelock",
        "1s",
        "--emission",
        "10",
        wallet="admin",
    )
    g("provider", "open-pool", "--commission-bps", "1000", wallet="supplier")
    g("provider", "commission", str(COMMISSION), wallet="supplier")  # a cut applies at once
    g("provider", "commission", "800", wallet="supplier")  # a raise only after a full epoch's notice
    first = g.json("stake", "delegate", supplier, "250", wallet="fan")
    assert (first["nonce"], first["amount"], first["shares"], first["earns_from_epoch"]) == (0, 250 * IO, 250 * IO, 1)
    second = g.json("stake", "delegate", str(provider), "50", wallet="fan")  # the provider account names it too
    assert (second["nonce"], second["shares"]) == (1, 50 * IO)
    left = g.json("stake", "undelegate", supplier, "--nonce", "1", wallet="fan")
    [gone] = left["positions"]
    assert (gone["nonce"], gone["amount"]) == (1, 50 * IO)
    early = g("stake", "withdraw", supplier, wallet="fan", expect=Exit.BAD_INPUT)
    assert "nothing to withdraw yet: position 1 (50 IO) is unbonding until" in early.stderr, early.stderr

    defaults = staking.StakingParams(emission_per_epoch=0)
    g("admin", "staking", "fund", "50", wallet="admin")
    g("admin", "staking", "update", "--emission", "20", wallet="admin")
    config = g.json("admin", "staking", "show")
    assert (config["epoch_seconds"], config["root_timelock_seconds"], config["emission_per_epoch"]) == (
        EPOCH,
        1,
        10 * IO,
    )
    assert (config["max_commission_bps"], config["slash_cap_bps"], config["claim_epochs"]) == (
        defaults.max_commission_bps,
        defaults.slash_cap_bps,
        defaults.claim_epochs,
    )
    assert [c["emission_per_epoch"] for c in config["scheduled_emission"]] == [20 * IO]
    assert config["reward_funded"] == config["reward_vault_balance"] == config["reward_free"] == 50 * IO

    shown = g.json("stake", "show", supplier, wallet="fan")
    pool = shown["pool"]
    assert (pool["commission_bps"], pool["own_stake"], pool["delegated"], pool["cap"], pool["delegated_unbonding"]) == (
        COMMISSION,
        600 * IO,
        250 * IO,
        600 * IO,
        50 * IO,
    )
    assert [c["commission_bps"] for c in pool["scheduled_commission"]] == [800]
    assert pool["scheduled_commission"][0]["from_epoch"] >= 2
    assert [(p["nonce"], p["state"], p["amount"]) for p in shown["positions"]] == [
        (0, "active", 250 * IO),
        (1, "unbonding", 50 * IO),
    ]
    assert g.json("balance", fan)["io"] == 700 * IO
    table = g("stake", "show", supplier, wallet="fan").stdout
    assert "600 IO (350 IO more fits)" in table and "unbonding until" in table, table

    # Epoch 2: epoch 1's reward, shared over the shares in the pool when epoch 1 began
    _wait_until(config["genesis"] + 2 * EPOCH + 1.2)
    _reward_epoch_one(g, provider)
    commission = DELEGATORS_PART * COMMISSION // BPS_DENOMINATOR
    eligible = 250 * IO if gone["exit_epoch"] == 0 else 300 * IO  # position 1 earned epoch 1 if it left in it
    per_share = _per_share(DELEGATORS_PART - commission, eligible)
    reward = {0: reward_of(250 * IO, per_share), 1: reward_of(50 * IO, per_share) if eligible > 250 * IO else 0}
    everywhere = g.json("stake", "show", wallet="fan")  # every pool: the same positions
    assert [(p["nonce"], p["rewards_to_collect"]) for p in everywhere["positions"]] == [(0, reward[0]), (1, reward[1])]
    collected = g.json("stake", "collect", supplier, "--nonce", "0", wallet="fan")
    assert collected["rewards"] == reward[0]
    withdrawn = g.json("provider", "withdraw-rewards", wallet="supplier")
    assert withdrawn["amount"] == SUPPLIER_PART + commission

    # A third position (the next free nonce), then every active one leaves in one go; once their
    # cohort has unbonded all three come back
    assert g.json("stake", "delegate", supplier, "20", wallet="fan")["nonce"] == 2
    out = g.json("stake", "undelegate", supplier, wallet="fan")
    assert [(r["nonce"], r["amount"]) for r in out["positions"]] == [(0, 250 * IO), (2, 20 * IO)]
    _wait_until(max(r["withdrawable_at"] for r in out["positions"]) + 1.5)  # the chain's clock lags by up to 1 s
    back = g.json("stake", "withdraw", supplier, wallet="fan")
    assert {r["nonce"]: r["amount"] for r in back["positions"]} == {0: 250 * IO, 1: 50 * IO, 2: 20 * IO}
    assert g.json("balance", fan)["io"] == 1000 * IO + reward[0] + reward[1]
    after = g.json("stake", "show", supplier, wallet="fan")
    assert after["pool"]["delegated"] == after["pool"]["delegated_unbonding"] == 0
    assert all(p["state"] == "withdrawn" and p["amount"] == 0 for p in after["positions"])


def test_bad_stake_input_is_refused_and_changes_nothing(market) -> None:
    g = market
    supplier = g.pubkey("supplier")
    fan = g.wallet("fan")
    g("admin", "mint", fan, "100", wallet="admin")

    def refused(*args: str, expect: Exit, says: str, wallet: str = "fan") -> None:
        before = g.signatures_of(wallet)
        out = g(*args, wallet=wallet, expect=expect).stderr
        assert says in out, out
        assert g.signatures_of(wallet) == before

    refused("stake", "delegate", supplier, "10", expect=Exit.NOT_FOUND, says="`gpunet admin staking configure")
    refused(
        "admin", "staking", "configure", "--epoch", "1h", "--emission", "1", expect=Exit.BAD_INPUT,
        says="the root timelock (6h00m) must be shorter than an epoch (1h00m)", wallet="admin",
    )  # fmt: skip
    refused(
        "admin", "staking", "configure", "--emission", "1", expect=Exit.BAD_INPUT,
        says="only gpunet's admin", wallet="supplier",
    )  # fmt: skip
    g("admin", "staking", "configure", "--epoch", "1h", "--root-timelock", "1m", "--emission", "1", wallet="admin")
    refused(
        "admin", "staking", "update", "--epoch", "2h", expect=Exit.BAD_INPUT, says="epoch length is fixed",
        wallet="admin",
    )  # fmt: skip
    refused("stake", "delegate", supplier, "10", expect=Exit.NOT_FOUND, says="has not opened a pool")
    refused(
        "provider", "open-pool", "--commission-bps", "2001", expect=Exit.BAD_INPUT,
        says="above the staking config's bound", wallet="supplier",
    )  # fmt: skip
    g("provider", "open-pool", "--commission-bps", "0", wallet="supplier")

    refused("stake", "delegate", supplier, "600.000001", expect=Exit.BAD_INPUT, says="(DelegationCapExceeded)")
    refused("stake", "delegate", supplier, "0", expect=Exit.BAD_INPUT, says="more than zero")
    refused("stake", "delegate", supplier, "ten", expect=Exit.BAD_INPUT, says="'ten' is not an amount of IO")
    refused(
        "stake",
        "delegate",
        supplier,
        "101",
        expect=Exit.FUNDS,
        says="needs 101 IO but the wallet's IO account holds 100 IO",
    )
    stranger = str(Pubkey.from_bytes(bytes(range(32))))
    refused("stake", "delegate", stranger, "1", expect=Exit.NOT_FOUND, says="neither a provider account nor")
    refused("stake", "delegate", "nobody", "1", expect=Exit.BAD_INPUT, says="not a valid provider wallet")
    refused("stake", "undelegate", supplier, expect=Exit.BAD_INPUT, says="you have no active position")
    refused("stake", "withdraw", supplier, expect=Exit.BAD_INPUT, says="you have no undelegated stake")
    refused("stake", "collect", supplier, expect=Exit.BAD_INPUT, says="you hold no position")
    refused("provider", "withdraw-rewards", expect=Exit.BAD_INPUT, says="no rewards of yours", wallet="supplier")
    assert g.json("stake", "show", wallet="fan")["positions"] == []
    assert g.json("balance", fan)["io"] == 100 * IO
