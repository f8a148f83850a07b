//! Every error the program returns, grouped by concern.
use anchor_lang::prelude::*;

#[error_code]
pub enum GpunetError {
    // --- authority and configuration
    #[msg("Only the config admin may do this")]
    NotAdmin,
    #[msg("The signer is not one of the configured attesters")]
    NotAttester,
    #[msg("The protocol fee may not exceed 2,000 basis points (20%)")]
    FeeTooHigh,
    #[msg("A basis-point value exceeds 10,000")]
    InvalidBasisPoints,
    #[msg("Durations must not be negative; the usage period and the settlement window must be positive; the verification validity at most 30 days, and positive when a tier is required")]
    InvalidDuration,
    #[msg("Give between 1 and 4 attester keys")]
    InvalidAttesters,
    #[msg("The protocol is paused: no new leases until the admin unpauses it")]
    Paused,
    #[msg("The token account does not belong to the expected owner")]
    WrongTokenOwner,
    #[msg("This is not the configured treasury account")]
    WrongTreasury,

    // --- stake
    #[msg("The amount must be greater than zero")]
    ZeroAmount,
    #[msg("Not enough free stake: stake more or deregister nodes first")]
    InsufficientFreeStake,
    #[msg("Nothing is unbonding")]
    NothingUnbonding,
    #[msg("The unbonding period has not ended yet")]
    StillUnbonding,

    // --- nodes
    #[msg("A node needs a GPU model, 1 to 16 GPUs, VRAM, a region and a non-zero price")]
    InvalidNodeSpec,
    #[msg("The node belongs to another provider")]
    NotNodeProvider,
    #[msg("The node still has GPUs assigned to leases")]
    NodeLeased,
    #[msg("The node is jailed")]
    NodeJailed,
    #[msg("The node is not jailed")]
    NodeNotJailed,
    #[msg("The node's jail cool-down has not ended")]
    JailNotOver,
    #[msg("The node's provider does not hold enough stake for its nodes")]
    ProviderUndercollateralised,

    // --- leases
    #[msg("A lease needs 1 to 128 GPUs, a positive duration and a non-zero maximum price")]
    InvalidLeaseTerms,
    #[msg("The lease is not open for assignment")]
    LeaseNotOpen,
    #[msg("The lease is not active")]
    LeaseNotActive,
    #[msg("The lease is closed")]
    LeaseClosed,
    #[msg("Give between 1 and 8 nodes, each with a GPU share, summing to the lease's GPU count")]
    InvalidAssignment,
    #[msg("The same node appears twice in the lease")]
    DuplicateNode,
    #[msg("The node does not meet the lease's GPU model, VRAM, region or price")]
    NodeDoesNotQualify,
    #[msg("The node does not have that many free GPUs")]
    NotEnoughFreeGpus,
    #[msg("The node is not assigned to this lease")]
    NodeNotInLease,
    #[msg("Pass every node account of the lease, in assignment order")]
    LeaseNodesMismatch,
    #[msg("Only the client may close the lease before it expires or its escrow is spent")]
    LeaseNotExpired,
    #[msg("The account passed is not the expected one")]
    AccountMismatch,

    // --- usage settlement
    #[msg("The receipt's GPU-seconds are not above the last settled receipt's")]
    BadSequence,
    #[msg("The receipt does not run past the last settled one, runs ahead of the clock or past the billing end")]
    BadPeriod,
    #[msg("Claimed GPU-seconds exceed the wall time since the assignment times the share's GPUs")]
    OverClaimed,
    #[msg("The instruction before settle_usage must be an Ed25519 verification of this receipt")]
    MissingEd25519Instruction,
    #[msg("The Ed25519 instruction is malformed or its offsets point outside its own data")]
    MalformedEd25519Instruction,
    #[msg("The usage receipt was not signed by the node's key")]
    WrongSigner,
    #[msg("The signed message is not this usage receipt")]
    MessageMismatch,

    // --- arithmetic
    #[msg("Arithmetic overflow")]
    ArithmeticOverflow,

    // --- closing, slashing and deployment rules (appended, so earlier codes stay stable)
    #[msg("The lease is not closing")]
    LeaseNotClosing,
    #[msg("The lease's settlement window is still open and usage up to its close is not all settled")]
    SettlementWindowOpen,
    #[msg("The lease's settlement window has ended")]
    SettlementWindowOver,
    #[msg("The lease has passed its end: it can only be closed")]
    LeaseExpired,
    #[msg("The lease is not finalized, or its retention period has not ended")]
    LeaseRetained,
    #[msg("The node's price is not the one the placement expected")]
    PriceChanged,
    #[msg("The node is neither found lost (slashed, so jailed) nor draining: its share cannot be moved")]
    NodeNotLost,
    #[msg("The lease is neither active nor in its settlement window")]
    LeaseNotLive,
    #[msg("Only the program's upgrade authority may initialize gpunet")]
    NotUpgradeAuthority,
    #[msg("The IO mint has a freeze authority, which could freeze every vault")]
    MintHasFreezeAuthority,
    #[msg("settle_usage must be a top-level instruction, not a cross-program call")]
    CalledByCpi,

    // --- announced maintenance (appended, so earlier codes stay stable)
    #[msg("The node is draining (its supplier's announced maintenance): it takes no new leases")]
    NodeDraining,

    // --- per-lease downtime tolerance (appended, so earlier codes stay stable)
    #[msg("The downtime tolerance must be 0 (the network's default) or between 10 and 3,600 seconds")]
    InvalidDowntimeTolerance,

    // --- verified supply (appended, so earlier codes stay stable)
    #[msg("The node has no valid verification at the tier the config requires")]
    NodeNotVerified,
    #[msg("The verification tier must be between 1 and 3 (a config's minimum: between 0 and 3)")]
    InvalidVerificationTier,
    #[msg("A verification must be valid until a time in the future, at most max_verification_seconds ahead")]
    InvalidVerificationExpiry,
    #[msg("The verified inventory is not the node's registered inventory")]
    InventoryMismatch,

    // --- cumulative receipts (appended, so earlier codes stay stable)
    #[msg("The receipt is for another assignment of the node to this lease (its epoch is not the share's)")]
    WrongAssignment,

    // --- the hostile world, second pass (appended, so earlier codes stay stable)
    #[msg("The node is deregistered: it takes no leases, and release_node frees its stake once the unbonding period has passed")]
    NodeDeregistered,
    #[msg("The node is not deregistered: deregister it first")]
    NodeNotDeregistered,
    #[msg("The deregistered node's stake stays bonded, and slashable, until the unbonding period after its deregistration has passed")]
    NodeStillBonded,
    #[msg("Stake is already unbonding: withdraw it once its unbonding period ends, then request more")]
    AlreadyUnbonding,
    #[msg("The lease was never placed, so it has no end yet: only its client may close it")]
    LeaseNotPlaced,

    // --- co-staking and rewards (appended, so earlier codes stay stable)
    #[msg("Own stake cannot fall below the delegated stake it backs: ask delegators to undelegate first")]
    DelegationsRelyOnStake,
    #[msg("The provider has not opened a pool")]
    NoPool,
    #[msg("The provider's pool must be passed: it holds stake and rewards this instruction changes")]
    PoolMissing,
    #[msg("The delegation would exceed the pool's cap (1x the provider's own active stake)")]
    DelegationCapExceeded,
    #[msg("The amount buys no share of the pool: delegate more")]
    ZeroShares,
    #[msg("The pool's delegated stake was slashed to nothing: it takes no new delegations")]
    PoolWipedOut,
    #[msg("The commission exceeds the staking config's bound")]
    CommissionTooHigh,
    #[msg("A scheduled value can only change from a later epoch on")]
    ScheduleInPast,
    #[msg("Too many pending changes: wait until the pool's earlier epochs are credited")]
    ScheduleFull,
    #[msg("The pool's share history is full: crank its pending reward epochs (claim or skip) first")]
    PoolHistoryFull,
    #[msg("The pool has too many unbonding cohorts: wait for the oldest to mature")]
    TooManyCohorts,
    #[msg("The delegation is already undelegated")]
    AlreadyUndelegated,
    #[msg("The delegation is still active: undelegate it first")]
    DelegationActive,
    #[msg("Pass the unbonding cohorts of the pool still slashable for this fault, in the pool's order")]
    CohortsMismatch,
    #[msg("The fault time must not be in the future")]
    InvalidFaultTime,
    #[msg("The epoch has not ended, or its claim window is over")]
    EpochNotClaimable,
    #[msg("The root's total exceeds the epoch's emission")]
    OverEmission,
    #[msg("The reward vault's free funds do not cover the root")]
    RewardsUnfunded,
    #[msg("The reward root is still in its timelock")]
    RootTimelocked,
    #[msg("The reward root is past its timelock: it can no longer be vetoed")]
    RootAccepted,
    #[msg("The Merkle proof does not prove this leaf under the epoch's root")]
    InvalidProof,
    #[msg("The pool's next epoch to credit is another one")]
    WrongRewardEpoch,
    #[msg("The claim would exceed the root's total")]
    RootOverClaimed,
    #[msg("The epoch's claim window is not over yet")]
    ClaimWindowOpen,
    #[msg("Pass the reward index of the epoch the position needs")]
    RewardIndexMissing,
    #[msg("The epoch length of the staking config cannot change")]
    EpochLengthFixed,
}
