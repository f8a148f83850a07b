//! The protocol's single configuration account.
use anchor_lang::prelude::*;

use crate::errors::GpunetError;

// The limits below are `#[constant]`s so the IDL carries them: clients read them from there
// instead of copying the numbers.

/// How many coordinator keys may act as attesters at once.
#[constant]
pub const MAX_ATTESTERS: u8 = 4;
/// The protocol fee can never exceed 20 %.
#[constant]
pub const MAX_PROTOCOL_FEE_BPS: u16 = 2_000;
/// Basis points in a whole: no slash fraction or client share may exceed it.
#[constant]
pub const BPS_DENOMINATOR: u64 = 10_000;
/// The highest verification tier (see `Node::verification_tier`).
#[constant]
pub const MAX_VERIFICATION_TIER: u8 = 3;
/// The longest a recorded verification may stay valid, and so the most `max_verification_seconds`
/// may be: 30 days.
#[constant]
pub const MAX_VERIFICATION_SECONDS: i64 = 30 * 86_400;

/// Why a provider is slashed; each kind has its own configured fraction.
#[derive(AnchorSerialize, AnchorDeserialize, Clone, Copy, Debug, PartialEq, Eq, InitSpace)]
pub enum FaultKind {
    /// The node stopped heartbeating while it held a lease.
    MissedHeartbeats,
    /// The node's hardware did not match its signed inventory.
    FailedVerification,
    /// The node signed usage it did not deliver.
    InvalidUsage,
}

impl FaultKind {
    pub fn index(self) -> usize {
        match self {
            FaultKind::MissedHeartbeats => 0,
            FaultKind::FailedVerification => 1,
            FaultKind::InvalidUsage => 2,
        }
    }
}

/// The admin-settable parameters, shared by `initialize` and `update_config`.
#[derive(AnchorSerialize, AnchorDeserialize, Clone, Debug, PartialEq, Eq)]
pub struct ConfigParams {
    /// IO token account that receives protocol fees and slashed stake.
    pub treasury: Pubkey,
    /// Protocol fee taken from every settlement, in basis points (<= 2,000).
    pub protocol_fee_bps: u16,
    /// Free stake a provider needs for each GPU it registers, in IO base units.
    pub min_stake_per_gpu: u64,
    /// Seconds between `request_unstake` and `withdraw_unstaked`.
    pub unbonding_seconds: i64,
    /// How often (seconds) a worker sends its newest usage receipt to the attester (it signs one
    /// every metering tick; settlement does not depend on it).
    pub usage_period_seconds: i64,
    /// Seconds a slashed node stays jailed before its provider may unjail it.
    pub jail_seconds: i64,
    /// Fraction of stake slashed per fault kind, in basis points, indexed by `FaultKind::index`.
    pub slash_bps: [u16; 3],
    /// Share of a slash paid to the affected lease's client, in basis points; the rest goes to the treasury.
    pub slash_client_share_bps: u16,
    /// Coordinator keys allowed to assign leases, settle usage and slash.
    pub attesters: Vec<Pubkey>,
    /// While paused no new lease can be opened; withdrawals, refunds and settlement still work.
    pub paused: bool,
    /// Seconds after a lease's end before anyone (not only its client) may close it.
    pub close_grace_seconds: i64,
    /// Seconds after a close during which the attester settles the lease's final usage.
    pub settle_window_seconds: i64,
    /// Seconds a finalized lease account is kept before its rent may be reclaimed.
    pub lease_retention_seconds: i64,
    /// The least verification tier a node needs to be assigned a lease (0: verification not required).
    pub min_verification_tier: u8,
    /// The longest an attester may declare a verification valid, in seconds (<= MAX_VERIFICATION_SECONDS;
    /// 0, no verification can be recorded, only while `min_verification_tier` is 0).
    pub max_verification_seconds: i64,
}

impl ConfigParams {
    pub fn validate(&self) -> Result<()> {
        require!(self.protocol_fee_bps <= MAX_PROTOCOL_FEE_BPS, GpunetError::FeeTooHigh);
        require!(
            self.slash_bps.iter().all(|bps| u64::from(*bps) <= BPS_DENOMINATOR)
                && u64::from(self.slash_client_share_bps) <= BPS_DENOMINATOR,
            GpunetError::InvalidBasisPoints
        );
        require!(
            self.unbonding_seconds >= 0
                && self.jail_seconds >= 0
                && self.usage_period_seconds > 0
                && self.close_grace_seconds >= 0
                && self.settle_window_seconds > 0
                && self.lease_retention_seconds >= 0,
            GpunetError::InvalidDuration
        );
        require!(self.min_verification_tier <= MAX_VERIFICATION_TIER, GpunetError::InvalidVerificationTier);
        require!(
            (0..=MAX_VERIFICATION_SECONDS).contains(&self.max_verification_seconds)
                && (self.min_verification_tier == 0 || self.max_verification_seconds > 0),
            GpunetError::InvalidDuration
        );
        require!(
            !self.attesters.is_empty() && self.attesters.len() <= usize::from(MAX_ATTESTERS),
            GpunetError::InvalidAttesters
        );
        Ok(())
    }
}

/// PDA `[SEED_CONFIG]`: one per deployment.
#[account]
#[derive(InitSpace)]
pub struct Config {
    /// May change this configuration.
    pub admin: Pubkey,
    /// The IO SPL token mint every stake, escrow and payout is denominated in.
    pub io_mint: Pubkey,
    /// IO token account receiving fees and slashes.
    pub treasury: Pubkey,
    /// Protocol fee in basis points.
    pub protocol_fee_bps: u16,
    /// Free stake needed per registered GPU.
    pub min_stake_per_gpu: u64,
    /// Unbonding delay in seconds.
    pub unbonding_seconds: i64,
    /// How often (seconds) a worker sends its newest usage receipt to the attester (it signs one
    /// every metering tick; settlement does not depend on it).
    pub usage_period_seconds: i64,
    /// Jail cool-down in seconds.
    pub jail_seconds: i64,
    /// Slash fraction per fault kind, in basis points.
    pub slash_bps: [u16; 3],
    /// Client's share of a slash, in basis points.
    pub slash_client_share_bps: u16,
    /// Number of valid entries in `attesters`.
    pub attester_count: u8,
    /// Coordinator keys; only the first `attester_count` are valid.
    pub attesters: [Pubkey; MAX_ATTESTERS as usize],
    /// New leases refused while set.
    pub paused: bool,
    /// Canonical bump of this PDA.
    pub bump: u8,
    /// Seconds after a lease's end before anyone may close it.
    pub close_grace_seconds: i64,
    /// Seconds after a close for settling the lease's final usage.
    pub settle_window_seconds: i64,
    /// Seconds a finalized lease is kept before its rent may be reclaimed.
    pub lease_retention_seconds: i64,
    /// The least verification tier a node needs to be assigned (0: not required). Appended last
    /// with `max_verification_seconds` so earlier fields keep their offsets.
    pub min_verification_tier: u8,
    /// The longest a recorded verification may be valid, in seconds.
    pub max_verification_seconds: i64,
}

impl Config {
    pub fn apply(&mut self, params: &ConfigParams) {
        self.treasury = params.treasury;
        self.protocol_fee_bps = params.protocol_fee_bps;
        self.min_stake_per_gpu = params.min_stake_per_gpu;
        self.unbonding_seconds = params.unbonding_seconds;
        self.usage_period_seconds = params.usage_period_seconds;
        self.jail_seconds = params.jail_seconds;
        self.slash_bps = params.slash_bps;
        self.slash_client_share_bps = params.slash_client_share_bps;
        self.attesters = [Pubkey::default(); MAX_ATTESTERS as usize];
        self.attesters[..params.attesters.len()].copy_from_slice(&params.attesters);
        self.attester_count = params.attesters.len() as u8;
        self.paused = params.paused;
        self.close_grace_seconds = params.close_grace_seconds;
        self.settle_window_seconds = params.settle_window_seconds;
        self.lease_retention_seconds = params.lease_retention_seconds;
        self.min_verification_tier = params.min_verification_tier;
        self.max_verification_seconds = params.max_verification_seconds;
    }

    pub fn is_attester(&self, key: &Pubkey) -> bool {
        self.attesters[..usize::from(self.attester_count)].contains(key)
    }

    /// How long a deregistered node's stake stays bonded, and the node slashable: the unbonding
    /// period (the time the protocol gives evidence to land against stake its owner wants back),
    /// and at least the settlement window, so a fault found in its last lease's window is still
    /// slashable whatever the two settings are.
    pub fn deregistered_bond_seconds(&self) -> i64 {
        self.unbonding_seconds.max(self.settle_window_seconds)
    }
}
