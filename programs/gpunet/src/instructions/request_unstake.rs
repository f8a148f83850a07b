//! `request_unstake`: free stake starts unbonding; it stays slashable until withdrawn. Refused while
//! stake is already unbonding (withdraw that first).
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
        // What is left must still back the nodes (with the delegated stake it lets count) and the
        // delegations: own stake is the first-loss tranche, so a supplier cannot leave its
        // delegators holding the risk alone.
        let mut after = (*self.provider).clone();
        after.staked = after.staked.checked_sub(amount).ok_or(GpunetError::InsufficientFreeStake)?;
        require!(after.is_collateralised(), GpunetError::InsufficientFreeStake);
        require!(after.delegated <= after.delegation_cap(), GpunetError::DelegationsRelyOnStake);
        // One clock per provider: a second request would move the date the stake already
        // unbonding was promised for. Keeping the old date for the new amount would let fresh
        // stake leave before its own unbonding period (less time to slash it). So the provider
        // withdraws what is unbonding first, then asks again.
        require!(self.provider.unbonding == 0, GpunetError::AlreadyUnbonding);
        Ok(())
    }
}

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
