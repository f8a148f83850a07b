//! `request_unstake`: free stake starts unbonding; it stays slashable until withdrawn.
use anchor_lang::prelude::*;

use crate::errors::GpunetError;
use crate::events::UnstakeRequested;
use crate::state::*;

#[derive(Accounts)]
pub struct RequestUnstake<'info> {
    pub authority: Signer<'info>,
    #[account(seeds = [SEED_CONFIG], bump = config.bump)]
    pub config: Account<'info, Config>,
    #[account(
        mut, seeds = [SEED_PROVIDER, authority.key().as_ref()], bump = provider.bump,
        has_one = authority
    )]
    pub provider: Account<'info, Provider>,
}

impl RequestUnstake<'_> {
    pub fn validate(&self, amount: u64) -> Result<()> {
        require_gt!(amount, 0, GpunetError::ZeroAmount);
        require!(amount <= self.provider.free_stake(), GpunetError::InsufficientFreeStake);
        Ok(())
    }
}

/// A new request restarts the unbonding clock for everything unbonding (one clock per provider).
impl<'info> RequestUnstake<'info> {
    #[access_control(ctx.accounts.validate(amount))]
    pub fn handler(ctx: Context<Self>, amount: u64) -> Result<()> {
        let now = Clock::get()?.unix_timestamp;
        let unbonding_seconds = ctx.accounts.config.unbonding_seconds;
        let provider = &mut ctx.accounts.provider;
        provider.staked = provider.staked.checked_sub(amount).ok_or(GpunetError::ArithmeticOverflow)?;
        provider.unbonding = provider.unbonding.checked_add(amount).ok_or(GpunetError::ArithmeticOverflow)?;
        provider.unbonding_ends_at = now.checked_add(unbonding_seconds).ok_or(GpunetError::ArithmeticOverflow)?;
        emit!(UnstakeRequested {
            provider: provider.key(),
            amount,
            staked: provider.staked,
            unbonding: provider.unbonding,
            unbonding_ends_at: provider.unbonding_ends_at,
        });
        Ok(())
    }
}
