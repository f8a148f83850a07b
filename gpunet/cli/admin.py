"""`gpunet admin init|update|show|mint`: the protocol's configuration, set by its admin."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table
from solders.pubkey import Pubkey

from gpunet import instructions as ix
from gpunet.accounts import fetch_config, upgrade_authority
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
    pubkey_arg,
)
from gpunet.cluster import is_local
from gpunet.keys import KeypairFileError, load_keypair
from gpunet.limits import BPS_DENOMINATOR, MAX_ATTESTERS, MAX_VERIFICATION_TIER
from gpunet.localnet import localnet_deployer
from gpunet.tokens import create_mint, ensure_io_account, io_account, mint_authority, mint_io

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
        help="Stop allowing this key (repeatable). Refused for the last attester, and, without "
        "--force, for the key of the coordinator configured here (GPUNET_ATTESTER_KEYPAIR).",
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
    """Initialise gpunet on a cluster: the IO mint, the treasury and the protocol parameters. Only the
    program's upgrade authority (the key that deployed it) may do this."""

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
    """Change some protocol parameters; the others keep their values (attesters are added and removed
    one by one: --add-attester, --remove-attester)."""

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
