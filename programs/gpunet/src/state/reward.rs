//! A posted reward root: the Merkle root of one epoch's rewards per pool.
use anchor_lang::prelude::*;

/// PDA `[SEED_REWARD_ROOT, epoch]`: posted once by an attester; claimable after the timelock;
/// the admin may veto it (close it) before then; never replaced once claimable.
#[account]
#[derive(InitSpace)]
pub struct RewardRoot {
    pub epoch: i64,
    pub root: [u8; 32],
    /// The sum of its leaves, reserved in the reward vault when posted.
    pub total: u64,
    pub claimed: u64,
    pub leaves: u32,
    pub posted_by: Pubkey,
    pub claimable_at: i64,
    pub bump: u8,
}
