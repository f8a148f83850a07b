//! `claim_reward`: anyone credits a pool with its leaf of an epoch's accepted root (a permissionless
//! crank). A pool is credited epoch by epoch in order, so a leaf is credited once and an epoch's
//! reward reaches exactly the shares that were in the pool when the epoch began.
//!
//! The supplier's amount, and the commission on the delegators' amount and on the pool's lease
//! income of the epoch (at the commission in force in that epoch), go to the supplier's unclaimed
//! rewards; the rest is spread over the epoch's eligible shares (all to the supplier when there
//! were none). `skip_reward_epoch`: once an epoch's claim window is over, anyone moves a pool past
//! it (no root, or its leaf unclaimed), crediting its lease income the same way.
use anchor_lang::prelude::*;
use anchor_spl::token::{Token, TokenAccount};

use crate::errors::GpunetError;
use crate::events::{RewardClaimed, RewardEpochSkipped};
use crate::merkle::{self, RewardLeaf};
use crate::state::*;
use crate::vault;

#[derive(Accounts)]
#[instruction(epoch: i64)]
pub struct ClaimReward<'info> {
    #[account(mut)]
    pub cranker: Signer<'info>,
    #[account(seeds = [SEED_CONFIG], bump = config.bump)]
    pub config: Box<Account<'info, Config>>,
    #[account(mut, seeds = [SEED_STAKING], bump = staking.bump)]
    pub staking: Box<Account<'info, Staking>>,
    #[account(mut, seeds = [SEED_REWARD_VAULT], bump = staking.vault_bump)]
    pub reward_vault: Box<Account<'info, TokenAccount>>,
    #[account(mut, seeds = [SEED_REWARD_ROOT, epoch.to_le_bytes().as_ref()], bump = reward_root.bump)]
    pub reward_root: Box<Account<'info, RewardRoot>>,
    #[account(seeds = [SEED_PROVIDER, provider.authority.as_ref()], bump = provider.bump)]
    pub provider: Box<Account<'info, Provider>>,
    #[account(mut, seeds = [SEED_POOL, provider.key().as_ref()], bump = pool.bump)]
    pub pool: Box<Account<'info, Pool>>,
    #[account(mut, seeds = [SEED_STAKE_VAULT, provider.key().as_ref()], bump = provider.vault_bump)]
    pub stake_vault: Box<Account<'info, TokenAccount>>,
    #[account(
        init, payer = cranker, space = 8 + RewardIndex::INIT_SPACE,
        seeds = [SEED_REWARD_INDEX, provider.key().as_ref(), epoch.to_le_bytes().as_ref()], bump
    )]
    pub reward_index: Box<Account<'info, RewardIndex>>,
    pub token_program: Program<'info, Token>,
    pub system_program: Program<'info, System>,
}

impl<'info> ClaimReward<'info> {
    pub fn handler(
        ctx: Context<Self>,
        epoch: i64,
        supplier_amount: u64,
        delegators_amount: u64,
        proof: Vec<[u8; 32]>,
    ) -> Result<()> {
        let a = &ctx.accounts;
        let now = Clock::get()?.unix_timestamp;
        let now_epoch = a.staking.epoch_at(now);
        require!(now >= a.reward_root.claimable_at, GpunetError::RootTimelocked);
        require!(a.staking.claim_open(epoch, now_epoch), GpunetError::EpochNotClaimable);
        require!(proof.len() <= usize::from(MAX_PROOF_LEN), GpunetError::InvalidProof);
        let leaf = RewardLeaf { epoch, provider: a.provider.key(), supplier_amount, delegators_amount };
        require!(merkle::verify(leaf.hash(&a.config.io_mint), &proof, &a.reward_root.root), GpunetError::InvalidProof);
        require_eq!(epoch, a.pool.credited_through + 1, GpunetError::WrongRewardEpoch);
        let amount = supplier_amount.checked_add(delegators_amount).ok_or(GpunetError::ArithmeticOverflow)?;
        let claimed = a.reward_root.claimed.checked_add(amount).ok_or(GpunetError::ArithmeticOverflow)?;
        require!(claimed <= a.reward_root.total, GpunetError::RootOverClaimed);

        let seeds: &[&[u8]] = &[SEED_STAKING, &[a.staking.bump]];
        vault::pay_out(&a.token_program, &a.reward_vault, &a.stake_vault, a.staking.to_account_info(), seeds, amount)?;

        let shares_now = a.provider.delegated_shares;
        let pool = &mut ctx.accounts.pool;
        let (income, to_supplier, to_delegators, eligible) =
            pool.credit(epoch, supplier_amount, delegators_amount, shares_now)?;
        pool.roll(now_epoch, shares_now)?;
        ctx.accounts.reward_index.acc = pool.acc;
        ctx.accounts.reward_index.bump = ctx.bumps.reward_index;

        let staking = &mut ctx.accounts.staking;
        staking.reward_reserved -= amount;
        staking.reward_paid = staking.reward_paid.checked_add(amount).ok_or(GpunetError::ArithmeticOverflow)?;
        ctx.accounts.reward_root.claimed = claimed;
        emit!(RewardClaimed {
            epoch,
            provider: ctx.accounts.provider.key(),
            income,
            to_supplier,
            to_delegators,
            eligible_shares: eligible,
        });
        Ok(())
    }
}

#[derive(Accounts)]
pub struct SkipRewardEpoch<'info> {
    #[account(mut)]
    pub cranker: Signer<'info>,
    #[account(seeds = [SEED_STAKING], bump = staking.bump)]
    pub staking: Box<Account<'info, Staking>>,
    #[account(seeds = [SEED_PROVIDER, provider.authority.as_ref()], bump = provider.bump)]
    pub provider: Box<Account<'info, Provider>>,
    #[account(mut, seeds = [SEED_POOL, provider.key().as_ref()], bump = pool.bump)]
    pub pool: Box<Account<'info, Pool>>,
    #[account(
        init, payer = cranker, space = 8 + RewardIndex::INIT_SPACE,
        seeds = [SEED_REWARD_INDEX, provider.key().as_ref(), (pool.credited_through + 1).to_le_bytes().as_ref()], bump
    )]
    pub reward_index: Box<Account<'info, RewardIndex>>,
    pub system_program: Program<'info, System>,
}

impl<'info> SkipRewardEpoch<'info> {
    pub fn handler(ctx: Context<Self>) -> Result<()> {
        let staking = &ctx.accounts.staking;
        let now_epoch = staking.epoch_at(Clock::get()?.unix_timestamp);
        let shares_now = ctx.accounts.provider.delegated_shares;
        let pool = &mut ctx.accounts.pool;
        let epoch = pool.credited_through + 1;
        require!(now_epoch > epoch && !staking.claim_open(epoch, now_epoch), GpunetError::ClaimWindowOpen);
        let (income, to_supplier, to_delegators, eligible) = pool.credit(epoch, 0, 0, shares_now)?;
        pool.roll(now_epoch, shares_now)?;
        ctx.accounts.reward_index.acc = pool.acc;
        ctx.accounts.reward_index.bump = ctx.bumps.reward_index;
        emit!(RewardEpochSkipped {
            epoch,
            provider: pool.provider,
            income,
            to_supplier,
            to_delegators,
            eligible_shares: eligible,
        });
        Ok(())
    }
}
