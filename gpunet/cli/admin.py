"""`gpunet admin init|update|show|mint`: the protocol's configuration, set by its admin; and
`gpunet admin staking configure|update|show|fund`: the co-staking config and its reward vault."""

from __future__ import annotations

import os
from dataclasses import MISSING, fields, replace
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table
from solders.pubkey import Pubkey

from gpunet import instructions as ix
from gpunet import staking as sx
from gpunet.accounts import chain_clock, fetch_config, upgrade_authority
from gpunet.amounts import format_io, parse_io
from gpunet.cli import clock
from gpunet.cli.common import (
    DEFAULT_KEYPAIR,
    BadInput,
    CommitmentOpt,
    ExplorerOpt,
    JsonOpt,
    KeypairOpt,
    Session,
    UrlOpt,
    duration_arg,
    io_balance_check,
    pubkey_arg,
)
from gpunet.cli.stake import bps_text
from gpunet.cluster import is_local
from gpunet.keys import KeypairFileError, load_keypair
from gpunet.limits import BPS_DENOMINATOR, MAX_ATTESTERS, MAX_COMMISSION_BPS, MAX_VERIFICATION_TIER
from gpunet.localnet import localnet_deployer
from gpunet.pda import reward_vault_pda, staking_pda
from gpunet.positions import epoch_at, epoch_start, fetch_staking, schedule_at, scheduled_after
from gpunet.tokens import create_mint, ensure_io_account, io_account, io_balance, mint_authority, mint_io, token_balance

app = typer.Typer(help="Protocol configuration (admin only).", no_args_is_help=True)

# Options shared by init and update; None = keep (update) or the default (init).
MintOpt = Annotated[
    str | None,
    typer.Option(
        "--mint",
        help="IO token mint. init without it creates a new mint whose authority is the admin (for local clusters).",
    ),
]
TreasuryOpt = Annotated[
    str | None,
    typer.Option("--treasury", help="IO token account receiving fees and slashes (default: the admin's IO account)."),
]
FeeOpt = Annotated[int | None, typer.Option("--fee-bps", help="Protocol fee in basis points (default 500).")]
MinStakeOpt = Annotated[str | None, typer.Option("--min-stake-per-gpu", help="IO per registered GPU (default 100).")]
UnbondingOpt = Annotated[str | None, typer.Option("--unbonding", help="Unstake delay, e.g. 7d (default 7d).")]
PeriodOpt = Annotated[
    str | None, typer.Option("--usage-period", help="How often workers send their newest usage receipt (default 60s).")
]
JailOpt = Annotated[str | None, typer.Option("--jail", help="Jail time after a slash (default 1h).")]
SlashOpt = Annotated[
    str | None,
    typer.Option(
        "--slash-bps",
        help="Slash per fault kind: missed heartbeats, failed verification, invalid usage (default 1000,2000,5000).",
    ),
]
ClientShareOpt = Annotated[
    int | None, typer.Option("--slash-client-share-bps", help="Client's share of a slash (default 5000).")
]
AttesterOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--attester", help="Coordinator key allowed to assign, settle and slash; repeat for several (default: admin)."
    ),
]
AddAttesterOpt = Annotated[
    list[str] | None,
    typer.Option("--add-attester", help="Also allow this coordinator key to assign, settle and slash (repeatable)."),
]
RemoveAttesterOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--remove-attester",
        help="Stop allowing this key (repeatable). Refused for the last attester, and, without --force, for the "
        "key of the coordinator configured here (the keypair file $GPUNET_ATTESTER_KEYPAIR names, else "
        "~/.config/solana/id.json).",
    ),
]
# `update --attester` used to replace the whole list: following the coordinator's old hint cut the
# running coordinator off. It stays only to say what to use instead.
ReplacedAttesterOpt = Annotated[list[str] | None, typer.Option("--attester", hidden=True)]
ForceOpt = Annotated[bool, typer.Option("--force", help="Remove the configured coordinator's attester key anyway.")]
# Where the coordinator on this machine takes its attester key from (coordinator/settings.py).
COORDINATOR_KEYPAIR = "GPUNET_ATTESTER_KEYPAIR"
PauseOpt = Annotated[bool | None, typer.Option("--pause/--unpause", help="Stop (or resume) new leases.")]
GraceOpt = Annotated[
    str | None,
    typer.Option("--close-grace", help="After a lease's end, how long only its client may close it (default 60s)."),
]
WindowOpt = Annotated[
    str | None,
    typer.Option(
        "--settle-window", help="After a close, how long the attester may settle the lease's last usage (default 5m)."
    ),
]
RetentionOpt = Annotated[
    str | None,
    typer.Option(
        "--lease-retention",
        help="How long a finalized lease account is kept before its rent may be reclaimed (default 7d).",
    ),
]
TierOpt = Annotated[
    int | None,
    typer.Option(
        "--min-verification-tier",
        help="The least verification tier a node needs to get leases: 0 none (any node, verified or not), "
        "1 simulated GPUs or better, 2 real GPUs (compute and memory checked), 3 confidential computing. "
        "init's default: 1 on a local cluster (its workers simulate GPUs), else 2.",
    ),
]


def default_tier(rpc_url: str) -> int:
    """The tier `admin init` requires unless told: every node verified before its first lease; on a
    local cluster simulated GPUs pass (its workers have no others), elsewhere only real ones."""
    return ix.TIER_SIMULATED if is_local(rpc_url) else ix.TIER_GPU


def _slash_bps(text: str) -> tuple[int, int, int]:
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        values = ()
    if len(values) != 3 or any(not 0 <= v <= BPS_DENOMINATOR for v in values):
        raise BadInput(f"--slash-bps takes three basis points 0..{BPS_DENOMINATOR} separated by commas, got {text!r}")
    return values


def _params(
    base: ix.ConfigParams,
    treasury: str | None,
    fee_bps: int | None,
    min_stake: str | None,
    unbonding: str | None,
    period: str | None,
    jail: str | None,
    slash: str | None,
    client_share: int | None,
    attesters: list[str] | None,
    pause: bool | None,
    *,
    grace: str | None = None,
    window: str | None = None,
    retention: str | None = None,
    tier: int | None = None,
) -> ix.ConfigParams:
    changes: dict[str, Any] = {}
    if tier is not None:
        if not 0 <= tier <= MAX_VERIFICATION_TIER:
            raise BadInput(f"--min-verification-tier must be 0..{MAX_VERIFICATION_TIER}, got {tier}")
        changes["min_verification_tier"] = tier
    if treasury is not None:
        changes["treasury"] = pubkey_arg(treasury, "treasury token account")
    if fee_bps is not None:
        changes["protocol_fee_bps"] = fee_bps
    if min_stake is not None:
        changes["min_stake_per_gpu"] = parse_io(min_stake)
    if unbonding is not None:
        changes["unbonding_seconds"] = duration_arg(unbonding)
    if period is not None:
        changes["usage_period_seconds"] = duration_arg(period)
    if jail is not None:
        changes["jail_seconds"] = duration_arg(jail)
    if slash is not None:
        changes["slash_bps"] = _slash_bps(slash)
    if client_share is not None:
        changes["slash_client_share_bps"] = client_share
    if attesters:
        changes["attesters"] = [pubkey_arg(a, "attester key") for a in attesters]
    if pause is not None:
        changes["paused"] = pause
    for name, value in (
        ("close_grace_seconds", grace),
        ("settle_window_seconds", window),
        ("lease_retention_seconds", retention),
    ):
        if value is not None:
            changes[name] = duration_arg(value)
    for name in ("protocol_fee_bps", "slash_client_share_bps"):
        if not 0 <= changes.get(name, 0) <= BPS_DENOMINATOR:
            raise BadInput(f"{name.replace('_', '-')} must be 0..{BPS_DENOMINATOR} basis points")
    return replace(base, **changes)


def params_of(config: Any) -> ix.ConfigParams:
    return ix.ConfigParams(
        treasury=config.treasury,
        protocol_fee_bps=config.protocol_fee_bps,
        min_stake_per_gpu=config.min_stake_per_gpu,
        unbonding_seconds=config.unbonding_seconds,
        usage_period_seconds=config.usage_period_seconds,
        jail_seconds=config.jail_seconds,
        slash_bps=tuple(config.slash_bps),
        slash_client_share_bps=config.slash_client_share_bps,
        attesters=list(config.attesters)[: config.attester_count],
        paused=config.paused,
        close_grace_seconds=config.close_grace_seconds,
        settle_window_seconds=config.settle_window_seconds,
        lease_retention_seconds=config.lease_retention_seconds,
        min_verification_tier=config.min_verification_tier,
        max_verification_seconds=config.max_verification_seconds,
    )


def _check_upgrade_authority(wallet: Pubkey, authority: Pubkey | None, wallet_file: object) -> None:
    """Refuses, before anything is sent (not even the IO mint), a wallet the program would refuse
    with NotUpgradeAuthority, saying whose key it wants and how to get there. A program without an
    upgrade authority is left to the program to judge."""
    if authority is None or authority == wallet:
        return
    if authority == localnet_deployer().pubkey():
        why = (
            "the local node was started before this wallet existed, so it made its own deployer key the "
            "upgrade authority: stop `gpunet localnet` and start it again now that the wallet exists (it makes "
            "the wallet it finds then the authority; `gpunet localnet --keypair PATH` names another)"
        )
    else:
        why = (
            "on a local node, `gpunet localnet` made the wallet it was started with the authority: restart it "
            "with this wallet (`gpunet localnet --keypair PATH`), or pass that wallet with -k; on a real cluster, "
            "sign with the key that deployed the program"
        )
    raise BadInput(
        f"your wallet {wallet} ({wallet_file}) is not the gpunet program's upgrade authority on this cluster "
        f"({authority} is), and only it may `gpunet admin init`; nothing was sent. {why}"
    )


@app.command("init")
def init(
    mint: MintOpt = None,
    treasury: TreasuryOpt = None,
    fee_bps: FeeOpt = None,
    min_stake_per_gpu: MinStakeOpt = None,
    unbonding: UnbondingOpt = None,
    usage_period: PeriodOpt = None,
    jail: JailOpt = None,
    slash_bps: SlashOpt = None,
    slash_client_share_bps: ClientShareOpt = None,
    attester: AttesterOpt = None,
    close_grace: GraceOpt = None,
    settle_window: WindowOpt = None,
    lease_retention: RetentionOpt = None,
    min_verification_tier: TierOpt = None,
    url: UrlOpt = None,
    keypair: KeypairOpt = DEFAULT_KEYPAIR,
    json_output: JsonOpt = False,
) -> None:
    """Initialise gpunet on a cluster: the IO mint, the treasury and the protocol parameters.

    Only the program's upgrade authority (the key that deployed it) may do this:
    another wallet is refused (exit 2) before anything is sent, not even the mint,
    and so is a bad option. Without --mint it creates an IO mint whose authority
    is the admin (for local clusters).

    Leases then go only to nodes verified at --min-verification-tier or above: by
    default 1 (simulated GPUs pass) on a local cluster, 2 (real GPUs) elsewhere; 0
    turns verification off."""

    async def command(s: Session) -> None:
        admin = s.wallet
        defaults = ix.ConfigParams(
            treasury=Pubkey.default(),  # the admin's IO account, once the mint is known
            protocol_fee_bps=500,
            min_stake_per_gpu=parse_io("100"),
            unbonding_seconds=7 * 86_400,
            usage_period_seconds=60,
            jail_seconds=3_600,
            slash_bps=(1_000, 2_000, 5_000),
            slash_client_share_bps=5_000,
            attesters=[admin.pubkey()],
            min_verification_tier=default_tier(s.cluster.rpc_url),
        )
        # every option checked before anything is sent (a mint created for a refused init is waste)
        params = _params(
            defaults,
            None,
            fee_bps,
            min_stake_per_gpu,
            unbonding,
            usage_period,
            jail,
            slash_bps,
            slash_client_share_bps,
            attester,
            None,
            grace=close_grace,
            window=settle_window,
            retention=lease_retention,
            tier=min_verification_tier,
        )
        async with s.client() as client:
            await s.check_fee(client)
            _check_upgrade_authority(admin.pubkey(), await upgrade_authority(client), s.wallet_path)
            if mint is None:
                with s.waiting("Creating the IO mint"):
                    io_mint = await create_mint(client, admin)
            else:
                io_mint = pubkey_arg(mint, "mint")
            treasury_account = (
                pubkey_arg(treasury, "treasury token account")
                if treasury
                else await ensure_io_account(client, admin, admin.pubkey(), io_mint)
            )
            params = replace(params, treasury=treasury_account)
            sig = await s.send(client, "Initialising gpunet", [ix.initialize(admin.pubkey(), io_mint, params)])
        tier = params.min_verification_tier
        s.done(
            f"gpunet initialised: IO mint {io_mint}, treasury {treasury_account}; "
            + (f"leases go only to nodes verified at tier {tier} or above" if tier else "no verification required"),
            sig,
            io_mint=io_mint,
            treasury=treasury_account,
            min_verification_tier=tier,
        )

    Session(url, keypair, json_output).run(command)


@app.command("update")
def update(
    treasury: TreasuryOpt = None,
    fee_bps: FeeOpt = None,
    min_stake_per_gpu: MinStakeOpt = None,
    unbonding: UnbondingOpt = None,
    usage_period: PeriodOpt = None,
    jail: JailOpt = None,
    slash_bps: SlashOpt = None,
    slash_client_share_bps: ClientShareOpt = None,
    add_attester: AddAttesterOpt = None,
    remove_attester: RemoveAttesterOpt = None,
    force: ForceOpt = False,
    attester: ReplacedAttesterOpt = None,
    pause: PauseOpt = None,
    close_grace: GraceOpt = None,
    settle_window: WindowOpt = None,
    lease_retention: RetentionOpt = None,
    min_verification_tier: TierOpt = None,
    url: UrlOpt = None,
    keypair: KeypairOpt = DEFAULT_KEYPAIR,
    json_output: JsonOpt = False,
) -> None:
    """Change some protocol parameters; the others keep their values.

    Attesters are added and removed one by one (--add-attester,
    --remove-attester); the list is never replaced. Removing the last attester is
    refused, and so is removing, without --force, the key of the coordinator
    configured on this machine (the keypair file $GPUNET_ATTESTER_KEYPAIR names,
    else ~/.config/solana/id.json). An update that changes nothing is refused
    (exit 2)."""

    async def command(s: Session) -> None:
        if attester:
            raise BadInput(
                "`admin update --attester` is gone (it replaced the whole list, cutting off the running "
                "coordinator): use --add-attester KEY and --remove-attester KEY"
            )
        async with s.client() as client:
            current = params_of(await fetch_config(client))
            attesters = _changed_attesters(current.attesters, add_attester or [], remove_attester or [], force)
            params = _params(
                current,
                treasury,
                fee_bps,
                min_stake_per_gpu,
                unbonding,
                usage_period,
                jail,
                slash_bps,
                slash_client_share_bps,
                None,
                pause,
                grace=close_grace,
                window=settle_window,
                retention=lease_retention,
                tier=min_verification_tier,
            )
            params = replace(params, attesters=attesters)
            if params == current:
                raise BadInput("nothing to change: give at least one option (see --help)")
            sig = await s.send(client, "Updating the configuration", [ix.update_config(s.wallet.pubkey(), params)])
        s.done("configuration updated", sig)

    Session(url, keypair, json_output).run(command)


def _changed_attesters(current: list[Pubkey], add: list[str], remove: list[str], force: bool) -> list[Pubkey]:
    """The attester list after adding and removing keys, refusing what would stop the network: an
    empty list, more than the program holds, or (unless forced) the configured coordinator's key."""
    result = list(current)
    for key in (pubkey_arg(k, "attester key") for k in add):
        if key in result:
            raise BadInput(f"{key} is already an attester")
        result.append(key)
    for key in (pubkey_arg(k, "attester key") for k in remove):
        if key not in result:
            raise BadInput(f"{key} is not an attester (they are: {', '.join(map(str, current))})")
        result.remove(key)
        if not force and key == _coordinator_key():
            raise BadInput(
                f"{key} is the attester key of the coordinator configured here "
                f"({COORDINATOR_KEYPAIR}={_coordinator_keypair_path()}): removing it stops that coordinator "
                "from placing, settling and slashing. Add its successor (--add-attester NEW_KEY), restart the "
                f"coordinator with {COORDINATOR_KEYPAIR} set to it, then remove this key with --force"
            )
    if not result:
        raise BadInput(
            "that removes the last attester: without one no lease is placed, settled or closed at its "
            "end; add its successor in the same command (--add-attester NEW_KEY)"
        )
    if len(result) > MAX_ATTESTERS:
        raise BadInput(
            f"the config holds at most {MAX_ATTESTERS} attesters, this would make {len(result)}: "
            "remove one (--remove-attester KEY)"
        )
    return result


def _coordinator_keypair_path() -> Path:
    return Path(
        os.environ.get(COORDINATOR_KEYPAIR, "~/.config/solana/id.json")
    ).expanduser()  # the coordinator's default


def _coordinator_key() -> Pubkey | None:
    """The attester key a coordinator started here would use, when its keypair file can be read."""
    try:
        return load_keypair(_coordinator_keypair_path()).pubkey()
    except KeypairFileError:
        return None


@app.command("show")
def show(
    url: UrlOpt = None, commitment: CommitmentOpt = None, explorer: ExplorerOpt = None, json_output: JsonOpt = False
) -> None:
    """The protocol configuration on this cluster."""

    async def command(s: Session) -> None:
        async with s.client() as client:
            c = await fetch_config(client)
        data = {
            "admin": c.admin,
            "io_mint": c.io_mint,
            "treasury": c.treasury,
            "protocol_fee_bps": c.protocol_fee_bps,
            "min_stake_per_gpu": c.min_stake_per_gpu,
            "unbonding_seconds": c.unbonding_seconds,
            "usage_period_seconds": c.usage_period_seconds,
            "jail_seconds": c.jail_seconds,
            "slash_bps": list(c.slash_bps),
            "slash_client_share_bps": c.slash_client_share_bps,
            "attesters": list(c.attesters)[: c.attester_count],
            "paused": c.paused,
            "close_grace_seconds": c.close_grace_seconds,
            "settle_window_seconds": c.settle_window_seconds,
            "lease_retention_seconds": c.lease_retention_seconds,
            "min_verification_tier": c.min_verification_tier,
            "max_verification_seconds": c.max_verification_seconds,
        }

        def table() -> Table:
            t = Table("parameter", "value", title=f"gpunet on {s.cluster.rpc_url}")
            for key, value in data.items():
                shown = (
                    format_io(value)
                    if key == "min_stake_per_gpu"
                    else clock.span(value)
                    if key.endswith("_seconds")
                    else value
                )  # seconds stay in --json
                values = shown if isinstance(shown, list) else [shown]
                t.add_row(key, ", ".join(s.link("address", v) if isinstance(v, Pubkey) else str(v) for v in values))
            return t

        s.show(data, table)

    Session(url, json_output=json_output, commitment_flag=commitment, explorer_flag=explorer).run(command)


@app.command("mint")
def mint_tokens(
    wallet: Annotated[str, typer.Argument(help="Wallet to receive IO.")],
    amount: Annotated[str, typer.Argument(help="IO to mint, e.g. 1000 or 12.5.")],
    url: UrlOpt = None,
    keypair: KeypairOpt = DEFAULT_KEYPAIR,
    json_output: JsonOpt = False,
) -> None:
    """Mint IO to a wallet (local clusters: needs the mint authority, which `admin init` gives the admin)."""

    async def command(s: Session) -> None:
        owner = pubkey_arg(wallet, "wallet")
        units = parse_io(amount)
        async with s.client() as client:
            io_mint = (await fetch_config(client)).io_mint
            await s.check_fee(client)
            # before the recipient's IO account is created: a refused mint changes nothing
            if (authority := await mint_authority(client, io_mint)) != s.wallet.pubkey():
                raise BadInput(
                    f"your wallet {s.wallet.pubkey()} is not the IO mint's authority ("
                    + (f"{authority} is" if authority else "nobody may mint it any more")
                    + "): only it mints IO (on a local node, the wallet that ran `gpunet admin init`); nothing "
                    f"was sent. Elsewhere IO is bought, or sent from a wallet that holds some: `gpunet transfer "
                    f"{amount} {owner}`"
                )
            account = await ensure_io_account(client, s.wallet, owner, io_mint)
            with s.waiting(f"Minting {format_io(units)}"):
                await mint_io(client, s.wallet, io_mint, account, units)
        s.show(
            {"wallet": owner, "io_account": io_account(owner, io_mint), "amount": units},
            lambda: f"[green]✓[/] minted {format_io(units)} to {owner}",
        )

    Session(url, keypair, json_output).run(command)


# --- `gpunet admin staking`: the co-staking config (gpunet.staking.StakingParams) and its reward vault

staking_app = typer.Typer(
    help="Co-staking: the staking config (epochs, commission bound, slash cap, emission) and its reward vault.",
    no_args_is_help=True,
)
app.add_typer(staking_app, name="staking")

# The network's defaults, from the one place they are set (never repeated here).
STAKING_DEFAULTS: dict[str, Any] = {f.name: f.default for f in fields(sx.StakingParams) if f.default is not MISSING}
_DEFAULT_TIMELOCK = clock.span(STAKING_DEFAULTS["root_timelock_seconds"])
EpochOpt = Annotated[
    str | None,
    typer.Option(
        "--epoch",
        help="Length of a staking epoch, e.g. 1d or 3s: rewards are credited per epoch "
        f"(configure's default {clock.span(STAKING_DEFAULTS['epoch_seconds'])}). Fixed once configured.",
    ),
]
MaxCommissionOpt = Annotated[
    int | None,
    typer.Option(
        "--max-commission-bps",
        min=0,
        help=f"The highest commission a pool may charge its delegators, in basis points, at most "
        f"{MAX_COMMISSION_BPS} (configure's default {STAKING_DEFAULTS['max_commission_bps']}).",
    ),
]
SlashCapOpt = Annotated[
    int | None,
    typer.Option(
        "--slash-cap-bps",
        min=0,
        help=f"The most of a provider's stake slashes may take in one epoch, in basis points "
        f"(configure's default {STAKING_DEFAULTS['slash_cap_bps']}).",
    ),
]
RootTimelockOpt = Annotated[
    str | None,
    typer.Option(
        "--root-timelock",
        help="How long after an epoch's reward root is posted before it can be claimed: the window to audit "
        f"and veto it; shorter than an epoch (configure's default {_DEFAULT_TIMELOCK}).",
    ),
]
ClaimEpochsOpt = Annotated[
    int | None,
    typer.Option(
        "--claim-epochs",
        min=1,
        help="Epochs after an epoch's end in which its root may be posted and claimed; then its unclaimed "
        f"rewards return to the vault (configure's default {STAKING_DEFAULTS['claim_epochs']}).",
    ),
]


def _staking_params(
    base: sx.StakingParams,
    epoch: str | None,
    max_commission_bps: int | None,
    slash_cap_bps: int | None,
    emission: str | None,
    root_timelock: str | None,
    claim_epochs: int | None,
) -> sx.StakingParams:
    """`base` with the options given, checked as the program checks them (StakingParams::validate),
    before anything is sent."""
    changes: dict[str, Any] = {}
    if epoch is not None:
        changes["epoch_seconds"] = duration_arg(epoch)
    if max_commission_bps is not None:
        changes["max_commission_bps"] = max_commission_bps
    if slash_cap_bps is not None:
        changes["slash_cap_bps"] = slash_cap_bps
    if emission is not None:
        changes["emission_per_epoch"] = parse_io(emission, allow_zero=True)
    if root_timelock is not None:
        changes["root_timelock_seconds"] = duration_arg(root_timelock)
    if claim_epochs is not None:
        changes["claim_epochs"] = claim_epochs
    params = replace(base, **changes)
    if params.max_commission_bps > MAX_COMMISSION_BPS:
        raise BadInput(f"--max-commission-bps must be 0..{MAX_COMMISSION_BPS}, got {params.max_commission_bps}")
    if params.slash_cap_bps > BPS_DENOMINATOR:
        raise BadInput(f"--slash-cap-bps must be 0..{BPS_DENOMINATOR}, got {params.slash_cap_bps}")
    if params.claim_epochs >= 2**32 or params.epoch_seconds >= 2**62:
        raise BadInput("--claim-epochs must be below 2^32, and --epoch below 2^62 seconds")
    if params.root_timelock_seconds >= params.epoch_seconds:
        raise BadInput(
            f"the root timelock ({clock.span(params.root_timelock_seconds)}) must be shorter than an epoch "
            f"({clock.span(params.epoch_seconds)}): pass a shorter --root-timelock"
        )
    return params


def _staking_params_of(staking: Any) -> sx.StakingParams:
    """The config's parameters as an update keeps them: the emission is the last one scheduled."""
    entries = list(staking.emission.entries)[: staking.emission.len]
    return sx.StakingParams(
        emission_per_epoch=entries[-1].value,
        epoch_seconds=staking.epoch_seconds,
        max_commission_bps=staking.max_commission_bps,
        slash_cap_bps=staking.slash_cap_bps,
        root_timelock_seconds=staking.root_timelock_seconds,
        claim_epochs=staking.claim_epochs,
    )


def _check_admin(wallet: Pubkey, admin: Pubkey, what: str) -> None:
    if wallet != admin:
        raise BadInput(
            f"only gpunet's admin ({admin}, see `gpunet admin show`) may {what}; your wallet is {wallet}: "
            "pass the admin's keypair with -k. Nothing was sent"
        )


@staking_app.command("configure")
def staking_configure(
    emission: Annotated[
        str, typer.Option("--emission", help="IO emitted as rewards per epoch, e.g. 1000 (0: none for now).")
    ],
    epoch: EpochOpt = None,
    max_commission_bps: MaxCommissionOpt = None,
    slash_cap_bps: SlashCapOpt = None,
    root_timelock: RootTimelockOpt = None,
    claim_epochs: ClaimEpochsOpt = None,
    url: UrlOpt = None,
    keypair: KeypairOpt = DEFAULT_KEYPAIR,
    json_output: JsonOpt = False,
) -> None:
    """Create the staking config and its reward vault (once; admin only).

    Epoch 0 begins now. Fund the vault afterwards with `gpunet admin staking fund
    AMOUNT`. Every value is checked as the program checks it before anything is
    sent."""

    async def command(s: Session) -> None:
        params = _staking_params(
            sx.StakingParams(emission_per_epoch=0),
            epoch,
            max_commission_bps,
            slash_cap_bps,
            emission,
            root_timelock,
            claim_epochs,
        )
        async with s.client() as client:
            config = await fetch_config(client)
            _check_admin(s.wallet.pubkey(), config.admin, "configure staking")
            if (await client.get_account_info(staking_pda())).value is not None:
                raise BadInput(
                    "staking is already configured on this cluster (see `gpunet admin staking show`): change it "
                    "with `gpunet admin staking update`"
                )
            sig = await s.send(
                client, "Configuring staking", [sx.configure_staking(s.wallet.pubkey(), config.io_mint, params)]
            )
            staking = await fetch_staking(client)
        s.done(
            f"staking configured: epochs of {clock.span(params.epoch_seconds)} from "
            f"{clock.at(staking.genesis)}, {format_io(params.emission_per_epoch)} emitted per epoch; fund the "
            "reward vault with `gpunet admin staking fund AMOUNT`",
            sig,
            genesis=staking.genesis,
            reward_vault=reward_vault_pda(),
            **_params_data(params),
        )

    Session(url, keypair, json_output).run(command)


def _params_data(params: sx.StakingParams) -> dict[str, int]:
    return {f.name: getattr(params, f.name) for f in fields(params)}


@staking_app.command("update")
def staking_update(
    emission: Annotated[
        str | None, typer.Option("--emission", help="IO emitted as rewards per epoch, from the next epoch on.")
    ] = None,
    epoch: EpochOpt = None,
    max_commission_bps: MaxCommissionOpt = None,
    slash_cap_bps: SlashCapOpt = None,
    root_timelock: RootTimelockOpt = None,
    claim_epochs: ClaimEpochsOpt = None,
    url: UrlOpt = None,
    keypair: KeypairOpt = DEFAULT_KEYPAIR,
    json_output: JsonOpt = False,
) -> None:
    """Change some staking parameters (admin only); the others keep their values.

    The epoch length cannot change; a new emission applies from the next epoch.
    Every value is checked as the program checks it before anything is sent."""

    async def command(s: Session) -> None:
        async with s.client() as client:
            config = await fetch_config(client)
            staking = await fetch_staking(client)
            current = _staking_params_of(staking)
            params = _staking_params(
                current, epoch, max_commission_bps, slash_cap_bps, emission, root_timelock, claim_epochs
            )
            if params.epoch_seconds != current.epoch_seconds:
                raise BadInput(
                    f"the epoch length is fixed once staking is configured (it is {clock.span(current.epoch_seconds)}):"
                    " leave --epoch out"
                )
            if params == current:
                raise BadInput("nothing to change: give at least one option with a new value (see --help)")
            _check_admin(s.wallet.pubkey(), config.admin, "update staking")
            sig = await s.send(client, "Updating staking", [sx.update_staking(s.wallet.pubkey(), params)])
            after = await fetch_staking(client)
        # the program's schedule says from which epoch the emission applies (the epoch may have turned)
        from_epoch = list(after.emission.entries)[after.emission.len - 1].from_epoch
        changed = {k: v for k, v in _params_data(params).items() if getattr(current, k) != v}
        said = ", ".join(
            f"{k.replace('_', ' ')} {format_io(v) if k == 'emission_per_epoch' else v}" for k, v in changed.items()
        )
        s.done(
            f"staking updated: {said}"
            + (
                f" (the new emission applies from epoch {from_epoch}, {clock.until(epoch_start(after, from_epoch))})"
                if "emission_per_epoch" in changed
                else ""
            ),
            sig,
            **_params_data(params),
        )

    Session(url, keypair, json_output).run(command)


@staking_app.command("show")
def staking_show(
    url: UrlOpt = None, commitment: CommitmentOpt = None, explorer: ExplorerOpt = None, json_output: JsonOpt = False
) -> None:
    """The staking config on this cluster: the epoch clock, the bounds, the emission and the reward vault's books."""

    async def command(s: Session) -> None:
        async with s.client() as client:
            st = await fetch_staking(client)
            now = await chain_clock(client)
            vault = await token_balance(client, reward_vault_pda())
        epoch = epoch_at(st, now)
        data = {
            "genesis": st.genesis,
            "epoch_seconds": st.epoch_seconds,
            "epoch": epoch,
            "next_epoch_at": epoch_start(st, epoch + 1),
            "max_commission_bps": st.max_commission_bps,
            "slash_cap_bps": st.slash_cap_bps,
            "emission_per_epoch": schedule_at(st.emission, epoch) or 0,
            "scheduled_emission": [
                {"emission_per_epoch": value, "from_epoch": e} for e, value in scheduled_after(st.emission, epoch)
            ],
            "root_timelock_seconds": st.root_timelock_seconds,
            "claim_epochs": st.claim_epochs,
            "reward_vault": reward_vault_pda(),
            "reward_vault_balance": vault,
            "reward_funded": st.reward_funded,
            "reward_reserved": st.reward_reserved,
            "reward_paid": st.reward_paid,
            "reward_free": st.reward_funded - st.reward_paid - st.reward_reserved,
        }

        def table() -> Table:
            t = Table("parameter", "value", title=f"gpunet staking on {s.cluster.rpc_url}")
            t.add_row("epoch", f"{epoch} (of {clock.span(st.epoch_seconds)}, since {clock.at(st.genesis)})")
            t.add_row("next epoch", clock.until(data["next_epoch_at"]))
            t.add_row("max commission", bps_text(st.max_commission_bps))
            t.add_row("slash cap per epoch", bps_text(st.slash_cap_bps))
            t.add_row("emission per epoch", format_io(data["emission_per_epoch"]))
            for change in data["scheduled_emission"]:
                t.add_row(
                    "emission change",
                    f"{format_io(change['emission_per_epoch'])} from epoch {change['from_epoch']}, "
                    f"{clock.until(epoch_start(st, change['from_epoch']))}",
                )
            t.add_row("root timelock", clock.span(st.root_timelock_seconds))
            t.add_row("claim window", f"{st.claim_epochs} epochs")
            t.add_row("reward vault", s.link("address", reward_vault_pda()))
            for key in ("reward_vault_balance", "reward_funded", "reward_reserved", "reward_paid", "reward_free"):
                t.add_row(key.replace("_", " "), format_io(data[key]))
            return t

        s.show(data, table)

    Session(url, json_output=json_output, commitment_flag=commitment, explorer_flag=explorer).run(command)


@staking_app.command("fund")
def staking_fund(
    amount: Annotated[str, typer.Argument(help="IO to add to the reward vault, e.g. 1000.")],
    url: UrlOpt = None,
    keypair: KeypairOpt = DEFAULT_KEYPAIR,
    json_output: JsonOpt = False,
) -> None:
    """Fund the reward vault from your wallet's IO account.

    Any wallet may; a plain transfer to the vault funds nothing. Reward roots are
    paid only from funded IO."""

    async def command(s: Session) -> None:
        units, me = parse_io(amount), s.wallet.pubkey()
        async with s.client() as client:
            io_mint = (await fetch_config(client)).io_mint
            await fetch_staking(client)
            io_balance_check(f"funding {format_io(units)}", units, await io_balance(client, me, io_mint))
            sig = await s.send(
                client,
                f"Funding the reward vault with {format_io(units)}",
                [sx.fund_rewards(me, io_account(me, io_mint), units)],
            )
            st = await fetch_staking(client)
        free = st.reward_funded - st.reward_paid - st.reward_reserved
        s.done(
            f"funded the reward vault with {format_io(units)}; {format_io(free)} is free for reward roots",
            sig,
            amount=units,
            reward_funded=st.reward_funded,
            reward_free=free,
        )

    Session(url, keypair, json_output).run(command)
