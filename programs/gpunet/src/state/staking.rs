//! Co-staking and rewards: the epoch clock, the reward schedule and the reward vault's books.
use anchor_lang::prelude::*;

use crate::errors::GpunetError;

/// Delegated stake may reach at most this share of its provider's own active stake (1×), and
/// counts as collateral up to it: the supplier's own stake is the first-loss tranche.
#[constant]
pub const DELEGATION_CAP_BPS: u64 = 10_000;
/// The most a provider's commission bound may be set to in the staking config.
#[constant]
pub const MAX_COMMISSION_BPS: u16 = 5_000;
/// Epochs a pool's unbonding cohorts may span (unbonding period / epoch length + 2 at most).
#[constant]
pub const MAX_COHORTS: u8 = 8;
/// The longest Merkle proof a claim may carry (2^32 leaves).
#[constant]
pub const MAX_PROOF_LEN: u8 = 32;
/// Entries a schedule (emission, commission) keeps: the value now and changes still needed.
pub const SCHEDULE_LEN: usize = 4;

/// One change of a value that takes effect from an epoch on.
#[derive(AnchorSerialize, AnchorDeserialize, Clone, Copy, Debug, Default, PartialEq, Eq, InitSpace)]
pub struct ScheduleEntry {
    pub from_epoch: i64,
    pub value: u64,
}

/// A value by epoch: changes only ever take effect in the future, and the entries a pending
/// credit may still need are kept, so a late credit for an epoch uses the value of that epoch.
#[derive(AnchorSerialize, AnchorDeserialize, Clone, Copy, Debug, Default, PartialEq, Eq, InitSpace)]
pub struct Schedule {
    pub len: u8,
    pub entries: [ScheduleEntry; SCHEDULE_LEN],
}

impl Schedule {
    pub fn starting(from_epoch: i64, value: u64) -> Self {
        let mut schedule = Schedule::default();
        schedule.entries[0] = ScheduleEntry { from_epoch, value };
        schedule.len = 1;
        schedule
    }

    /// The value in force during `epoch` (`None` before the first entry).
    pub fn at(&self, epoch: i64) -> Option<u64> {
        self.entries[..usize::from(self.len)].iter().rev().find(|e| e.from_epoch <= epoch).map(|e| e.value)
    }

    /// Cancels the changes scheduled after `epoch` (a new setting replaces a pending one).
    pub fn cancel_after(&mut self, epoch: i64) {
        while self.len > 1 && self.entries[usize::from(self.len) - 1].from_epoch > epoch {
            self.len -= 1;
            self.entries[usize::from(self.len)] = ScheduleEntry::default();
        }
    }

    /// Schedules `value` from `from_epoch` (not before the last entry's epoch, which it replaces
    /// when equal). Entries whose whole span lies before `oldest_needed` are dropped first.
    pub fn set(&mut self, from_epoch: i64, value: u64, oldest_needed: i64) -> Result<()> {
        let len = usize::from(self.len);
        let last = self.entries[len - 1];
        require!(from_epoch >= last.from_epoch, GpunetError::ScheduleInPast);
        if from_epoch == last.from_epoch {
            self.entries[len - 1].value = value;
            return Ok(());
        }
        // entry i is still needed while the next one starts after `oldest_needed`
        let drop = (0..len - 1).take_while(|&i| self.entries[i + 1].from_epoch <= oldest_needed).count();
        self.entries.copy_within(drop..len, 0);
        let len = len - drop;
        require!(len < SCHEDULE_LEN, GpunetError::ScheduleFull);
        self.entries[len] = ScheduleEntry { from_epoch, value };
        self.len = (len + 1) as u8;
        Ok(())
    }
}

/// The admin-settable staking parameters (`configure_staking`, `update_staking`).
#[derive(AnchorSerialize, AnchorDeserialize, Clone, Debug, PartialEq, Eq)]
pub struct StakingParams {
    /// Length of an epoch in seconds (fixed once the staking config exists).
    pub epoch_seconds: i64,
    /// The highest commission a pool may charge its delegators, in basis points (<= 5,000).
    pub max_commission_bps: u16,
    /// The most one provider may lose to slashes in one epoch, in basis points of its stake.
    pub slash_cap_bps: u16,
    /// IO emitted as rewards per epoch; an update takes effect from the next epoch.
    pub emission_per_epoch: u64,
    /// Seconds after a reward root is posted before it can be claimed (the audit window, in
    /// which the admin may veto it).
    pub root_timelock_seconds: i64,
    /// Epochs after an epoch's end during which its root may be posted and claimed; after them
    /// its unclaimed rewards return to the vault.
    pub claim_epochs: u32,
}

impl StakingParams {
    pub fn validate(&self) -> Result<()> {
        require!(self.epoch_seconds > 0 && self.root_timelock_seconds >= 0, GpunetError::InvalidDuration);
        require!(self.root_timelock_seconds < self.epoch_seconds, GpunetError::InvalidDuration);
        require!(
            self.max_commission_bps <= MAX_COMMISSION_BPS
                && u64::from(self.slash_cap_bps) <= crate::state::BPS_DENOMINATOR,
            GpunetError::InvalidBasisPoints
        );
        require!(self.claim_epochs > 0, GpunetError::InvalidDuration);
        Ok(())
    }
}

/// PDA `[SEED_STAKING]`: one per deployment. Its reward vault is `[SEED_REWARD_VAULT]`.
#[account]
#[derive(InitSpace)]
pub struct Staking {
    /// When epoch 0 began (unix seconds).
    pub genesis: i64,
    pub epoch_seconds: i64,
    pub max_commission_bps: u16,
    pub slash_cap_bps: u16,
    /// IO emitted per epoch, by epoch.
    pub emission: Schedule,
    pub root_timelock_seconds: i64,
    pub claim_epochs: u32,
    /// IO ever put into the reward vault through `fund_rewards` (a plain transfer is a donation:
    /// it entitles nobody and is never counted).
    pub reward_funded: u64,
    /// IO promised to posted roots and not yet claimed or returned.
    pub reward_reserved: u64,
    /// IO claimed out of the vault.
    pub reward_paid: u64,
    pub bump: u8,
    pub vault_bump: u8,
}

impl Staking {
    /// The epoch `now` falls in (times before genesis are epoch 0's).
    pub fn epoch_at(&self, now: i64) -> i64 {
        // unsigned division (SBF v0 has no signed one); both are non-negative here
        let elapsed = now.saturating_sub(self.genesis).max(0).unsigned_abs();
        (elapsed / self.epoch_seconds.max(1).unsigned_abs()) as i64
    }

    /// When `epoch` begins (unix seconds).
    pub fn epoch_start(&self, epoch: i64) -> Result<i64> {
        epoch
            .checked_mul(self.epoch_seconds)
            .and_then(|s| s.checked_add(self.genesis))
            .ok_or_else(|| error!(GpunetError::ArithmeticOverflow))
    }

    /// Funded IO not promised to any root.
    pub fn reward_free(&self) -> Result<u64> {
        self.reward_funded
            .checked_sub(self.reward_paid)
            .and_then(|left| left.checked_sub(self.reward_reserved))
            .ok_or_else(|| error!(GpunetError::ArithmeticOverflow))
    }

    /// Whether `epoch`'s root may still be posted or claimed at `now_epoch`.
    pub fn claim_open(&self, epoch: i64, now_epoch: i64) -> bool {
        now_epoch > epoch && now_epoch <= epoch.saturating_add(i64::from(self.claim_epochs))
    }

    pub fn apply(&mut self, params: &StakingParams) {
        self.epoch_seconds = params.epoch_seconds;
        self.max_commission_bps = params.max_commission_bps;
        self.slash_cap_bps = params.slash_cap_bps;
        self.root_timelock_seconds = params.root_timelock_seconds;
        self.claim_epochs = params.claim_epochs;
    }
}
