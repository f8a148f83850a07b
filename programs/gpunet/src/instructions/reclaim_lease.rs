//! `reclaim_lease`: a finalized lease's account is closed after the retention period, its rent
//! going back to the client. Its history stays in the events. Anyone may call it.
use anchor_lang::prelude::*;

use crate::errors::GpunetError;
use crate::events::LeaseReclaimed;
use crate::state::*;

#[derive(Accounts)]
pub struct ReclaimLease<'info> {
    pub reclaimer: Signer<'info>,
    #[account(seeds = [SEED_CONFIG], bump = config.bump)]
    pub config: Account<'info, Config>,
    #[account(
        mut, close = client, has_one = client @ GpunetError::AccountMismatch,
        seeds = [SEED_LEASE, lease.client.as_ref(), lease.lease_id.to_le_bytes().as_ref()],
        bump = lease.bump
    )]
    pub lease: Box<Account<'info, Lease>>,
    /// CHECK: the lease's client (checked by `has_one`), receives the rent.
    #[account(mut)]
    pub client: UncheckedAccount<'info>,
}

impl<'info> ReclaimLease<'info> {
    pub fn handler(ctx: Context<Self>) -> Result<()> {
        let now = Clock::get()?.unix_timestamp;
        let lease = &ctx.accounts.lease;
        let kept_until = lease
            .finalized_at
            .checked_add(ctx.accounts.config.lease_retention_seconds)
            .ok_or(GpunetError::ArithmeticOverflow)?;
        require!(lease.status == LeaseStatus::Closed && now >= kept_until, GpunetError::LeaseRetained);
        emit!(LeaseReclaimed { lease: lease.key(), client: lease.client, reclaimed_by: ctx.accounts.reclaimer.key() });
        Ok(())
    }
}
