//! One event per state change, carrying what an indexer needs to rebuild state without reading accounts.
use anchor_lang::prelude::*;

use crate::state::{Assignment, ConfigParams, FaultKind, LeaseTerms, NodeSpec, StakingParams};

#[event]
pub struct ConfigInitialized {
    pub admin: Pubkey,
    pub io_mint: Pubkey,
    pub params: ConfigParams,
}

#[event]
pub struct ConfigUpdated {
    pub admin: Pubkey,
    pub params: ConfigParams,
}

#[event]
pub struct ProviderRegistered {
    pub provider: Pubkey,
    pub authority: Pubkey,
}

#[event]
pub struct Staked {
    pub provider: Pubkey,
    pub amount: u64,
    pub staked: u64,
}

#[event]
pub struct UnstakeRequested {
    pub provider: Pubkey,
    pub amount: u64,
    pub staked: u64,
    pub unbonding: u64,
    pub unbonding_ends_at: i64,
}

#[event]
pub struct UnstakeWithdrawn {
    pub provider: Pubkey,
    pub amount: u64,
}

#[event]
pub struct NodeRegistered {
    pub node: Pubkey,
    pub provider: Pubkey,
    pub node_key: Pubkey,
    pub spec: NodeSpec,
    pub bonded_stake: u64,
}

#[event]
pub struct NodeUpdated {
    pub node: Pubkey,
    pub region: u16,
    pub price_per_gpu_hour: u64,
    pub inventory_hash: [u8; 32],
}

/// The node takes no more leases; its stake stays bonded, and slashable, until `release_node`
/// (the unbonding period after `deregistered_at`).
#[event]
pub struct NodeDeregistered {
    pub node: Pubkey,
    pub provider: Pubkey,
    pub bonded_stake: u64,
    pub deregistered_at: i64,
}

/// A deregistered node's stake was freed and its account closed.
#[event]
pub struct NodeReleased {
    pub node: Pubkey,
    pub provider: Pubkey,
    pub released_stake: u64,
}

#[event]
pub struct LeaseOpened {
    pub lease: Pubkey,
    pub client: Pubkey,
    pub lease_id: u64,
    pub terms: LeaseTerms,
    pub deposit: u64,
    /// Seconds a node may be silent before it is treated as lost (0: the network's default).
    pub downtime_tolerance_seconds: u32,
}

#[event]
pub struct LeaseAssigned {
    pub lease: Pubkey,
    pub attester: Pubkey,
    pub assignments: Vec<Assignment>,
    pub started_at: i64,
}

#[event]
pub struct LeaseToppedUp {
    pub lease: Pubkey,
    pub amount: u64,
    pub extra_seconds: i64,
    pub deposited: u64,
}

#[event]
pub struct LeaseReassigned {
    pub lease: Pubkey,
    pub attester: Pubkey,
    pub from_node: Pubkey,
    pub assignment: Assignment,
}

/// A share's usage was settled up to a receipt. The provider's lifetime earnings are the sum of
/// `payout` over its events (no account counts them: a settlement writes no shared account).
#[event]
pub struct UsageSettled {
    pub lease: Pubkey,
    pub node: Pubkey,
    pub provider: Pubkey,
    /// The assignment the receipt is for.
    pub epoch: u64,
    /// The receipt's cumulative GPU-seconds since the assignment.
    pub receipt_gpu_seconds: u64,
    /// The moment the receipt runs through.
    pub through: i64,
    /// GPU-seconds paid for by this settlement (the receipt's increment, less what the attester
    /// did not accept).
    pub gpu_seconds: u64,
    /// Gross amount charged to the escrow (payout + fee); less than the cost of `gpu_seconds`
    /// only where the escrow ran out.
    pub amount: u64,
    /// What the usage paid the provider's side: the supplier's wallet got `payout - to_pool`.
    pub payout: u64,
    /// The delegators' part of `payout`, paid into the stake vault as the pool's lease income of
    /// `income_epoch` (0 without a pool or delegated stake).
    pub to_pool: u64,
    pub income_epoch: i64,
    /// The protocol fee, kept in the lease's vault until it is swept to the treasury.
    pub fee: u64,
    pub escrow_left: u64,
}

/// The fees a lease had collected were moved from its vault to the treasury (`sweep_fees`, or
/// `finalize_lease`).
#[event]
pub struct FeesSwept {
    pub lease: Pubkey,
    pub amount: u64,
    /// All the lease's fees moved to the treasury so far.
    pub fees_swept: u64,
}

/// The lease was closed for use: its nodes are free and `refund` went back to the client now;
/// `retained` stays in the vault for usage up to `billable_until`, settled until `settle_deadline`.
#[event]
pub struct LeaseClosed {
    pub lease: Pubkey,
    pub closed_by: Pubkey,
    pub refund: u64,
    pub paid: u64,
    pub fees: u64,
    pub retained: u64,
    pub billable_until: i64,
    pub settle_deadline: i64,
}

/// The closing lease was finalized: `refund` (the escrow left) and `donations` (tokens sent to
/// the vault from outside) went to the client, and the vault was closed.
#[event]
pub struct LeaseFinalized {
    pub lease: Pubkey,
    pub finalized_by: Pubkey,
    pub refund: u64,
    pub donations: u64,
    pub paid: u64,
    pub fees: u64,
    /// Everything refunded over the lease's life (at close and now).
    pub refunded: u64,
    /// The fees moved to the treasury now (the rest went before, by `sweep_fees`).
    pub fees_to_treasury: u64,
}

/// A finalized lease's account was closed and its rent returned to the client.
#[event]
pub struct LeaseReclaimed {
    pub lease: Pubkey,
    pub client: Pubkey,
    pub reclaimed_by: Pubkey,
}

#[event]
pub struct ProviderSlashed {
    pub provider: Pubkey,
    pub node: Pubkey,
    pub attester: Pubkey,
    pub fault: FaultKind,
    pub evidence_hash: [u8; 32],
    pub amount: u64,
    pub to_treasury: u64,
    pub to_client: u64,
    pub lease: Option<Pubkey>,
    pub jail_ends_at: i64,
    /// When the fault was committed (unbonding that began later still pays for it).
    pub fault_at: i64,
    /// Where `amount` came from: the supplier's unclaimed rewards, its own stake, its delegators.
    pub from_rewards: u64,
    pub from_own: u64,
    pub from_delegated: u64,
}

#[event]
pub struct NodeUnjailed {
    pub node: Pubkey,
    pub provider: Pubkey,
}

/// A provider started (`draining`) or ended its node's announced maintenance.
#[event]
pub struct NodeDrainingSet {
    pub node: Pubkey,
    pub provider: Pubkey,
    pub draining: bool,
}

#[event]
pub struct NodeVerified {
    pub node: Pubkey,
    pub node_key: Pubkey,
    pub provider: Pubkey,
    pub tier: u8,
    pub valid_until: i64,
    pub evidence_hash: [u8; 32],
}

// --- co-staking and rewards

#[event]
pub struct StakingConfigured {
    pub genesis: i64,
    pub params: StakingParams,
}

#[event]
pub struct RewardsFunded {
    pub funder: Pubkey,
    pub amount: u64,
    pub funded: u64,
}

#[event]
pub struct PoolOpened {
    pub provider: Pubkey,
    pub commission_bps: u16,
    pub epoch: i64,
}

/// A commission change, in force from `from_epoch` (at once for a cut, after a full epoch for a raise).
#[event]
pub struct CommissionSet {
    pub provider: Pubkey,
    pub commission_bps: u16,
    pub from_epoch: i64,
}

#[event]
pub struct Delegated {
    pub provider: Pubkey,
    pub delegator: Pubkey,
    pub delegation: Pubkey,
    pub amount: u64,
    pub shares: u64,
    /// The first epoch the position earns in.
    pub since_epoch: i64,
}

#[event]
pub struct Undelegated {
    pub provider: Pubkey,
    pub delegation: Pubkey,
    /// What its shares were worth when it left, now unbonding (slashes may still lower it).
    pub amount: u64,
    pub exit_epoch: i64,
    pub withdrawable_at: i64,
}

#[event]
pub struct DelegationWithdrawn {
    pub provider: Pubkey,
    pub delegation: Pubkey,
    pub amount: u64,
}

#[event]
pub struct RewardsCollected {
    pub provider: Pubkey,
    pub delegation: Pubkey,
    pub amount: u64,
    pub through_epoch: i64,
}

#[event]
pub struct PoolRewardsWithdrawn {
    pub provider: Pubkey,
    pub amount: u64,
}

#[event]
pub struct RewardRootPosted {
    pub epoch: i64,
    pub root: [u8; 32],
    pub total: u64,
    pub leaves: u32,
    pub posted_by: Pubkey,
    pub claimable_at: i64,
}

#[event]
pub struct RewardRootVetoed {
    pub epoch: i64,
    pub root: [u8; 32],
    pub total: u64,
}

#[event]
pub struct RewardRootExpired {
    pub epoch: i64,
    /// Unclaimed rewards returned to the vault's free funds.
    pub returned: u64,
}

#[event]
pub struct RewardClaimed {
    pub epoch: i64,
    pub provider: Pubkey,
    /// The delegators' part of the pool's lease income of the epoch, credited with its reward.
    pub income: u64,
    /// The supplier's amount and the commission, added to its unclaimed rewards.
    pub to_supplier: u64,
    /// Spread over `eligible_shares` (the rounding dust stays in the pool).
    pub to_delegators: u64,
    pub eligible_shares: u64,
}

/// An epoch passed without a claim: only its lease income (`income`) is credited.
#[event]
pub struct RewardEpochSkipped {
    pub epoch: i64,
    pub provider: Pubkey,
    pub income: u64,
    pub to_supplier: u64,
    pub to_delegators: u64,
    pub eligible_shares: u64,
}
