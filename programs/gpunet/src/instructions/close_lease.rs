//! `close_lease`: refunds all unsettled escrow to the client and frees the lease's nodes.
//!
//! The client may close at any time; anyone may close once the lease has run its
//! duration or its escrow is spent. Remaining accounts: every node of the lease, in
//! assignment order, writable.
use anchor_lang::prelude::*;
use anchor_spl::token::{Token, TokenAccount};

use crate::errors::GpunetError;
use crate::events::LeaseClosed;
use crate::instructions::assign_lease::load_node;
use crate::state::*;
use crate::vault;

#[derive(Accounts)]
pub struct CloseLease<'info> {
    pub closer: Signer<'info>,
    #[account(seeds = [SEED_CONFIG], bump = config.bump)]
    pub config: Account<'info, Config>,
    #[account(
        mut, has_one = client @ GpunetError::AccountMismatch,
        seeds = [SEED_LEASE, lease.client.as_ref(), lease.lease_id.to_le_bytes().as_ref()],
        bump = lease.bump
    )]
    pub lease: Box<Account<'info, Lease>>,
    #[account(mut, seeds = [SEED_LEASE_VAULT, lease.key().as_ref()], bump = lease.vault_bump)]
    pub lease_vault: Account<'info, TokenAccount>,
    /// CHECK: the lease's client (checked by `has_one`), receives the vault's rent.
    #[account(mut)]
    pub client: UncheckedAccount<'info>,
    #[account(
        mut,
        token::mint = config.io_mint,
        token::authority = client
    )]
    pub client_tokens: Account<'info, TokenAccount>,
    pub token_program: Program<'info, Token>,
}

impl<'info> CloseLease<'info> {
    pub fn validate(&self) -> Result<()> {
        require!(!self.lease.is_closed(), GpunetError::LeaseClosed);
        if self.closer.key() != self.lease.client {
            let now = Clock::get()?.unix_timestamp;
            let ends_at = self.lease.ends_at().ok_or(GpunetError::ArithmeticOverflow)?;
            require!(now >= ends_at || self.lease.escrow_left()? == 0, GpunetError::LeaseNotExpired);
        }
        Ok(())
    }

    #[access_control(ctx.accounts.validate())]
    pub fn handler(ctx: Context<'_, '_, 'info, 'info, Self>) -> Result<()> {
        let a = &ctx.accounts;
        let shares = a.lease.assignments();
        require!(ctx.remaining_accounts.len() == shares.len(), GpunetError::LeaseNodesMismatch);
        for (info, share) in ctx.remaining_accounts.iter().zip(shares) {
            require_keys_eq!(info.key(), share.node, GpunetError::LeaseNodesMismatch);
            let mut node = load_node(info)?;
            node.gpus_leased = node.gpus_leased.checked_sub(share.gpus).ok_or(GpunetError::ArithmeticOverflow)?;
            node.exit(&crate::ID)?;
        }

        let refund = a.lease.escrow_left()?;
        let lease_id = a.lease.lease_id.to_le_bytes();
        let seeds: &[&[u8]] = &[SEED_LEASE, a.lease.client.as_ref(), &lease_id, &[a.lease.bump]];
        let authority = a.lease.to_account_info();
        vault::pay_out(&a.token_program, &a.lease_vault, &a.client_tokens, authority.clone(), seeds, refund)?;
        vault::close(&a.token_program, &a.lease_vault, a.client.to_account_info(), authority, seeds)?;

        let closer = a.closer.key();
        let lease = &mut ctx.accounts.lease;
        lease.refunded = lease.refunded.checked_add(refund).ok_or(GpunetError::ArithmeticOverflow)?;
        lease.status = LeaseStatus::Closed;
        emit!(LeaseClosed { lease: lease.key(), closed_by: closer, refund, paid: lease.paid, fees: lease.fees });
        Ok(())
    }
}
