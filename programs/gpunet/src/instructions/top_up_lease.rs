//! `top_up_lease`: the client extends a lease, escrowing the extra time at its maximum price.
//! A running lease past its end can only be closed: extending it then would make the time
//! after its end billable after the fact.
use anchor_lang::prelude::*;
use anchor_spl::token::{Token, TokenAccount};

use crate::errors::GpunetError;
use crate::events::LeaseToppedUp;
use crate::math;
use crate::state::*;
use crate::vault;

#[derive(Accounts)]
pub struct TopUpLease<'info> {
    pub client: Signer<'info>,
    #[account(seeds = [SEED_CONFIG], bump = config.bump)]
    pub config: Account<'info, Config>,
    #[account(
        mut, has_one = client,
        seeds = [SEED_LEASE, lease.client.as_ref(), lease.lease_id.to_le_bytes().as_ref()],
        bump = lease.bump
    )]
    pub lease: Box<Account<'info, Lease>>,
    #[account(mut, seeds = [SEED_LEASE_VAULT, lease.key().as_ref()], bump = lease.vault_bump)]
    pub lease_vault: Account<'info, TokenAccount>,
    #[account(
        mut,
        token::mint = config.io_mint,
        token::authority = client
    )]
    pub client_tokens: Account<'info, TokenAccount>,
    pub token_program: Program<'info, Token>,
}

impl<'info> TopUpLease<'info> {
    pub fn validate(&self, extra_seconds: i64) -> Result<()> {
        require!(!self.lease.is_closed(), GpunetError::LeaseClosed);
        if self.lease.status == LeaseStatus::Active {
            let ends_at = self.lease.ends_at().ok_or(GpunetError::ArithmeticOverflow)?;
            require!(Clock::get()?.unix_timestamp < ends_at, GpunetError::LeaseExpired);
        }
        require_gt!(extra_seconds, 0, GpunetError::ZeroAmount);
        Ok(())
    }

    #[access_control(ctx.accounts.validate(extra_seconds))]
    pub fn handler(ctx: Context<Self>, extra_seconds: i64) -> Result<()> {
        let terms = ctx.accounts.lease.terms;
        let amount = math::escrow_for(terms.max_price_per_gpu_hour, terms.gpu_count, extra_seconds)
            .ok_or(GpunetError::ArithmeticOverflow)?;
        let a = &ctx.accounts;
        vault::deposit(&a.token_program, &a.client_tokens, &a.lease_vault, &a.client, amount)?;

        let lease = &mut ctx.accounts.lease;
        lease.terms.duration_seconds =
            lease.terms.duration_seconds.checked_add(extra_seconds).ok_or(GpunetError::ArithmeticOverflow)?;
        lease.deposited = lease.deposited.checked_add(amount).ok_or(GpunetError::ArithmeticOverflow)?;
        emit!(LeaseToppedUp { lease: lease.key(), amount, extra_seconds, deposited: lease.deposited });
        Ok(())
    }
}
