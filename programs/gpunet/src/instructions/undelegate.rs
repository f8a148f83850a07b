//! `undelegate`: a position leaves the pool. Its stake moves, at the pool's current share value,
//! into the cohort of this epoch's exits: it earns rewards through this epoch, stays slashable for
//! faults committed before the epoch ends, and may be withdrawn an unbonding period after that.
use anchor_lang::prelude::*;

use crate::errors::GpunetError;
use crate::events::Undelegated;
use crate::state::*;

#[derive(Accounts)]
pub struct Undelegate<'info> {
    #[account(mut)]
    pub delegator: Signer<'info>,
    #[account(seeds = [SEED_CONFIG], bump = config.bump)]
    pub config: Box<Account<'info, Config>>,
    #[account(seeds = [SEED_STAKING], bump = staking.bump)]
    pub staking: Box<Account<'info, Staking>>,
    #[account(mut, address = delegation.provider @ GpunetError::AccountMismatch)]
    pub provider: Box<Account<'info, Provider>>,
    #[account(mut, seeds = [SEED_POOL, provider.key().as_ref()], bump = pool.bump)]
    pub pool: Box<Account<'info, Pool>>,
    #[account(
        mut, has_one = delegator,
        seeds = [SEED_DELEGATION, provider.key().as_ref(), delegator.key().as_ref(), delegation.nonce.to_le_bytes().as_ref()],
        bump = delegation.bump
    )]
    pub delegation: Box<Account<'info, Delegation>>,
    #[account(
        init_if_needed, payer = delegator, space = 8 + Cohort::INIT_SPACE,
        seeds = [SEED_COHORT, provider.key().as_ref(), staking.epoch_at(Clock::get()?.unix_timestamp).to_le_bytes().as_ref()],
        bump
    )]
    pub cohort: Box<Account<'info, Cohort>>,
    pub system_program: Program<'info, System>,
}

impl<'info> Undelegate<'info> {
    pub fn handler(ctx: Context<Self>) -> Result<()> {
        require!(ctx.accounts.delegation.is_active(), GpunetError::AlreadyUndelegated);
        let now = Clock::get()?.unix_timestamp;
        let now_epoch = ctx.accounts.staking.epoch_at(now);
        let provider_key = ctx.accounts.provider.key();

        let cohort = &mut ctx.accounts.cohort;
        if cohort.provider == Pubkey::default() {
            let starts_at = ctx.accounts.staking.epoch_start(now_epoch + 1)?;
            cohort.provider = provider_key;
            cohort.exit_epoch = now_epoch;
            cohort.starts_at = starts_at;
            cohort.ends_at =
                starts_at.checked_add(ctx.accounts.config.unbonding_seconds).ok_or(GpunetError::ArithmeticOverflow)?;
            cohort.bump = ctx.bumps.cohort;
        }
        require!(cohort.stake > 0 || cohort.shares == 0, GpunetError::PoolWipedOut);
        let cohort_ref = CohortRef { exit_epoch: now_epoch, starts_at: cohort.starts_at, ends_at: cohort.ends_at };

        let pool = &mut ctx.accounts.pool;
        pool.roll(now_epoch, ctx.accounts.provider.delegated_shares)?;
        pool.drop_matured(now);
        pool.add_cohort(cohort_ref)?;

        let shares = ctx.accounts.delegation.shares;
        let provider = &mut ctx.accounts.provider;
        let value = provider.value_of(shares).ok_or(GpunetError::ArithmeticOverflow)?;
        provider.delegated -= value;
        provider.delegated_shares -= shares;
        provider.delegated_unbonding =
            provider.delegated_unbonding.checked_add(value).ok_or(GpunetError::ArithmeticOverflow)?;

        let cohort = &mut ctx.accounts.cohort;
        let cohort_shares = if cohort.shares == 0 {
            value
        } else {
            u64::try_from(u128::from(value) * u128::from(cohort.shares) / u128::from(cohort.stake))
                .map_err(|_| GpunetError::ArithmeticOverflow)?
        };
        cohort.shares = cohort.shares.checked_add(cohort_shares).ok_or(GpunetError::ArithmeticOverflow)?;
        cohort.stake = cohort.stake.checked_add(value).ok_or(GpunetError::ArithmeticOverflow)?;

        let delegation = &mut ctx.accounts.delegation;
        delegation.exit_epoch = now_epoch;
        delegation.cohort_shares = cohort_shares;
        emit!(Undelegated {
            provider: provider_key,
            delegation: delegation.key(),
            amount: value,
            exit_epoch: now_epoch,
            withdrawable_at: cohort.ends_at,
        });
        Ok(())
    }
}
