//! `sweep_fees`: moves the protocol fees a lease has collected from its vault to the treasury.
//! Anyone may call it, at any time before the lease is finalized (which sweeps them itself).
//!
//! Settlements leave their fee in the lease's vault so that none of them writes the treasury (one
//! account shared by every lease would cap the settlements per block); this moves them in one
//! write per lease, as rarely as the treasury likes.
use anchor_lang::prelude::*;
use anchor_spl::token::{Token, TokenAccount};

use crate::errors::GpunetError;
use crate::events::FeesSwept;
use crate::state::*;
use crate::vault;

#[derive(Accounts)]
pub struct SweepFees<'info> {
    pub sweeper: Signer<'info>,
    #[account(seeds = [SEED_CONFIG], bump = config.bump)]
    pub config: Box<Account<'info, Config>>,
    #[account(
        mut,
        seeds = [SEED_LEASE, lease.client.as_ref(), lease.lease_id.to_le_bytes().as_ref()],
        bump = lease.bump
    )]
    pub lease: Box<Account<'info, Lease>>,
    #[account(mut, seeds = [SEED_LEASE_VAULT, lease.key().as_ref()], bump = lease.vault_bump)]
    pub lease_vault: Box<Account<'info, TokenAccount>>,
    #[account(mut, address = config.treasury @ GpunetError::WrongTreasury)]
    pub treasury: Box<Account<'info, TokenAccount>>,
    pub token_program: Program<'info, Token>,
}

impl<'info> SweepFees<'info> {
    pub fn handler(ctx: Context<Self>) -> Result<()> {
        let a = &ctx.accounts;
        // A finalized lease's vault is closed; its fees went to the treasury then.
        require!(a.lease.status != LeaseStatus::Closed, GpunetError::LeaseClosed);
        let amount = a.lease.fees_unswept()?;
        let lease_id = a.lease.lease_id.to_le_bytes();
        let seeds: &[&[u8]] = &[SEED_LEASE, a.lease.client.as_ref(), &lease_id, &[a.lease.bump]];
        vault::pay_out(&a.token_program, &a.lease_vault, &a.treasury, a.lease.to_account_info(), seeds, amount)?;
        let lease = &mut ctx.accounts.lease;
        lease.fees_swept = lease.fees;
        emit!(FeesSwept { lease: lease.key(), amount, fees_swept: lease.fees_swept });
        Ok(())
    }
}
