//! Reward roots. `post_reward_root`: an attester posts an ended epoch's Merkle root of rewards per
//! pool, at most the epoch's emission and covered by the vault's free funds (reserved at once).
//! `veto_reward_root`: the admin removes it during its timelock. `expire_reward_root`: after the
//! claim window anyone returns what was not claimed to the vault's free funds.
use anchor_lang::prelude::*;

use crate::errors::GpunetError;
use crate::events::{RewardRootExpired, RewardRootPosted, RewardRootVetoed};
use crate::state::*;

#[derive(Accounts)]
#[instruction(epoch: i64)]
pub struct PostRewardRoot<'info> {
    #[account(mut)]
    pub attester: Signer<'info>,
    #[account(seeds = [SEED_CONFIG], bump = config.bump)]
    pub config: Box<Account<'info, Config>>,
    #[account(mut, seeds = [SEED_STAKING], bump = staking.bump)]
    pub staking: Box<Account<'info, Staking>>,
    /// Fails to initialise when the epoch already has a root: a posted root is never replaced.
    #[account(
        init, payer = attester, space = 8 + RewardRoot::INIT_SPACE,
        seeds = [SEED_REWARD_ROOT, epoch.to_le_bytes().as_ref()], bump
    )]
    pub reward_root: Box<Account<'info, RewardRoot>>,
    pub system_program: Program<'info, System>,
}

impl<'info> PostRewardRoot<'info> {
    pub fn handler(ctx: Context<Self>, epoch: i64, root: [u8; 32], total: u64, leaves: u32) -> Result<()> {
        let a = &ctx.accounts;
        require!(a.config.is_attester(a.attester.key), GpunetError::NotAttester);
        let now = Clock::get()?.unix_timestamp;
        let staking = &a.staking;
        require!(staking.claim_open(epoch, staking.epoch_at(now)), GpunetError::EpochNotClaimable);
        require!(total <= staking.emission.at(epoch).unwrap_or(0), GpunetError::OverEmission);
        require!(total <= staking.reward_free()?, GpunetError::RewardsUnfunded);
        let claimable_at = now.checked_add(staking.root_timelock_seconds).ok_or(GpunetError::ArithmeticOverflow)?;

        let staking = &mut ctx.accounts.staking;
        staking.reward_reserved = staking.reward_reserved.checked_add(total).ok_or(GpunetError::ArithmeticOverflow)?;
        let reward_root = &mut ctx.accounts.reward_root;
        reward_root.epoch = epoch;
        reward_root.root = root;
        reward_root.total = total;
        reward_root.leaves = leaves;
        reward_root.posted_by = ctx.accounts.attester.key();
        reward_root.claimable_at = claimable_at;
        reward_root.bump = ctx.bumps.reward_root;
        emit!(RewardRootPosted { epoch, root, total, leaves, posted_by: reward_root.posted_by, claimable_at });
        Ok(())
    }
}

#[derive(Accounts)]
pub struct VetoRewardRoot<'info> {
    pub admin: Signer<'info>,
    #[account(seeds = [SEED_CONFIG], bump = config.bump, has_one = admin @ GpunetError::NotAdmin)]
    pub config: Box<Account<'info, Config>>,
    #[account(mut, seeds = [SEED_STAKING], bump = staking.bump)]
    pub staking: Box<Account<'info, Staking>>,
    #[account(
        mut, close = poster,
        seeds = [SEED_REWARD_ROOT, reward_root.epoch.to_le_bytes().as_ref()], bump = reward_root.bump
    )]
    pub reward_root: Box<Account<'info, RewardRoot>>,
    /// CHECK: the root's poster, who paid its rent.
    #[account(mut, address = reward_root.posted_by @ GpunetError::AccountMismatch)]
    pub poster: UncheckedAccount<'info>,
}

impl<'info> VetoRewardRoot<'info> {
    pub fn handler(ctx: Context<Self>) -> Result<()> {
        let root = &ctx.accounts.reward_root;
        require!(Clock::get()?.unix_timestamp < root.claimable_at, GpunetError::RootAccepted);
        let staking = &mut ctx.accounts.staking;
        staking.reward_reserved =
            staking.reward_reserved.checked_sub(root.total).ok_or(GpunetError::ArithmeticOverflow)?;
        emit!(RewardRootVetoed { epoch: root.epoch, root: root.root, total: root.total });
        Ok(())
    }
}

#[derive(Accounts)]
pub struct ExpireRewardRoot<'info> {
    #[account(mut, seeds = [SEED_STAKING], bump = staking.bump)]
    pub staking: Box<Account<'info, Staking>>,
    #[account(
        mut, close = poster,
        seeds = [SEED_REWARD_ROOT, reward_root.epoch.to_le_bytes().as_ref()], bump = reward_root.bump
    )]
    pub reward_root: Box<Account<'info, RewardRoot>>,
    /// CHECK: the root's poster, who paid its rent.
    #[account(mut, address = reward_root.posted_by @ GpunetError::AccountMismatch)]
    pub poster: UncheckedAccount<'info>,
}

impl<'info> ExpireRewardRoot<'info> {
    pub fn handler(ctx: Context<Self>) -> Result<()> {
        let root = &ctx.accounts.reward_root;
        let staking = &ctx.accounts.staking;
        let now_epoch = staking.epoch_at(Clock::get()?.unix_timestamp);
        require!(now_epoch > root.epoch && !staking.claim_open(root.epoch, now_epoch), GpunetError::ClaimWindowOpen);
        let returned = root.total - root.claimed;
        let staking = &mut ctx.accounts.staking;
        staking.reward_reserved =
            staking.reward_reserved.checked_sub(returned).ok_or(GpunetError::ArithmeticOverflow)?;
        emit!(RewardRootExpired { epoch: root.epoch, returned });
        Ok(())
    }
}
