//! `open_pool`: a provider opens its pool to delegators (and to rewards, from the next epoch on)
//! with a commission.
//! `set_commission` changes it: a cut applies from the current epoch, a raise only after a full
//! epoch's notice (from the epoch after next), so a raise just before a credit never applies to it.
use anchor_lang::prelude::*;

use crate::errors::GpunetError;
use crate::events::{CommissionSet, PoolOpened};
use crate::state::*;

#[derive(Accounts)]
pub struct OpenPool<'info> {
    #[account(mut)]
    pub authority: Signer<'info>,
    #[account(seeds = [SEED_STAKING], bump = staking.bump)]
    pub staking: Account<'info, Staking>,
    #[account(
        mut, seeds = [SEED_PROVIDER, authority.key().as_ref()], bump = provider.bump,
        has_one = authority
    )]
    pub provider: Account<'info, Provider>,
    #[account(init, payer = authority, space = 8 + Pool::INIT_SPACE, seeds = [SEED_POOL, provider.key().as_ref()], bump)]
    pub pool: Account<'info, Pool>,
    pub system_program: Program<'info, System>,
}

impl<'info> OpenPool<'info> {
    pub fn handler(ctx: Context<Self>, commission_bps: u16) -> Result<()> {
        let staking = &ctx.accounts.staking;
        require!(commission_bps <= staking.max_commission_bps, GpunetError::CommissionTooHigh);
        let now_epoch = staking.epoch_at(Clock::get()?.unix_timestamp);
        let provider = &mut ctx.accounts.provider;
        provider.has_pool = true;
        let pool = &mut ctx.accounts.pool;
        pool.provider = provider.key();
        pool.opened_epoch = now_epoch;
        // like a delegation, a pool earns from the epoch after it opened
        pool.credited_through = now_epoch;
        pool.rolled_epoch = now_epoch - 1;
        pool.commission = Schedule::starting(now_epoch, u64::from(commission_bps));
        pool.bump = ctx.bumps.pool;
        pool.roll(now_epoch, provider.delegated_shares)?;
        emit!(PoolOpened { provider: provider.key(), commission_bps, epoch: now_epoch });
        Ok(())
    }
}

#[derive(Accounts)]
pub struct SetCommission<'info> {
    pub authority: Signer<'info>,
    #[account(seeds = [SEED_STAKING], bump = staking.bump)]
    pub staking: Account<'info, Staking>,
    #[account(seeds = [SEED_PROVIDER, authority.key().as_ref()], bump = provider.bump, has_one = authority)]
    pub provider: Account<'info, Provider>,
    #[account(mut, seeds = [SEED_POOL, provider.key().as_ref()], bump = pool.bump)]
    pub pool: Account<'info, Pool>,
}

impl<'info> SetCommission<'info> {
    pub fn handler(ctx: Context<Self>, commission_bps: u16) -> Result<()> {
        let staking = &ctx.accounts.staking;
        require!(commission_bps <= staking.max_commission_bps, GpunetError::CommissionTooHigh);
        let now_epoch = staking.epoch_at(Clock::get()?.unix_timestamp);
        let pool = &mut ctx.accounts.pool;
        let current = pool.commission.at(now_epoch).unwrap_or(0);
        let from_epoch = if u64::from(commission_bps) <= current { now_epoch } else { now_epoch + 2 };
        pool.commission.cancel_after(now_epoch);
        let oldest_needed = pool.credited_through + 1;
        pool.commission.set(from_epoch, u64::from(commission_bps), oldest_needed)?;
        emit!(CommissionSet { provider: pool.provider, commission_bps, from_epoch });
        Ok(())
    }
}
