//! `close_lease`: ends a lease's use. Its nodes are freed at once, billing stops at the close (or
//! the lease's end, if that came first), the escrow its shares could still be owed up to then
//! stays in the vault for the attester's final settlements, and the rest is refunded now.
//! `finalize_lease` refunds what remains after the settlement window.
//!
//! The client may close at any time, an attester (the coordinator, which ends leases) from the
//! lease's end on, and anyone once the lease is past its end plus the configured grace, or its
//! escrow is spent. A lease never placed has no end yet: only its client closes it. Remaining accounts: every node of the lease, in
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
    /// CHECK: the lease's client (checked by `has_one`).
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
    pub fn validate(&self, now: i64) -> Result<()> {
        require!(!self.lease.is_closed(), GpunetError::LeaseClosed);
        if self.closer.key() != self.lease.client {
            // An unplaced lease has no end yet (it ends its duration after it is placed): it waits
            // for its nodes until its client closes it, whoever else asks.
            require!(self.lease.status != LeaseStatus::Open, GpunetError::LeaseNotPlaced);
            let ends_at = self.lease.ends_at().ok_or(GpunetError::ArithmeticOverflow)?;
            let grace = if self.config.is_attester(self.closer.key) { 0 } else { self.config.close_grace_seconds };
            let closable_at = ends_at.checked_add(grace).ok_or(GpunetError::ArithmeticOverflow)?;
            require!(now >= closable_at || self.lease.escrow_left()? == 0, GpunetError::LeaseNotExpired);
        }
        Ok(())
    }

    pub fn handler(ctx: Context<'_, '_, 'info, 'info, Self>) -> Result<()> {
        let now = Clock::get()?.unix_timestamp;
        ctx.accounts.validate(now)?;
        let a = &ctx.accounts;
        let shares = a.lease.assignments();
        require!(ctx.remaining_accounts.len() == shares.len(), GpunetError::LeaseNodesMismatch);
        let billable_until = match a.lease.status {
            LeaseStatus::Open => now, // nothing was billable: no node ever held it
            _ => now.min(a.lease.ends_at().ok_or(GpunetError::ArithmeticOverflow)?),
        };
        let mut owed: u64 = 0;
        for (info, share) in ctx.remaining_accounts.iter().zip(shares) {
            require_keys_eq!(info.key(), share.node, GpunetError::LeaseNodesMismatch);
            let mut node = load_node(info)?;
            node.gpus_leased = node.gpus_leased.checked_sub(share.gpus).ok_or(GpunetError::ArithmeticOverflow)?;
            node.exit(&crate::ID)?;
            let share_owed = share.owed_at_most(billable_until).ok_or(GpunetError::ArithmeticOverflow)?;
            owed = owed.checked_add(share_owed).ok_or(GpunetError::ArithmeticOverflow)?;
        }

        // Only the bookkept escrow moves here, never the vault's balance (anyone can add to that).
        let escrow_left = a.lease.escrow_left()?;
        let retained = owed.min(escrow_left);
        let refund = escrow_left - retained;
        let lease_id = a.lease.lease_id.to_le_bytes();
        let seeds: &[&[u8]] = &[SEED_LEASE, a.lease.client.as_ref(), &lease_id, &[a.lease.bump]];
        vault::pay_out(&a.token_program, &a.lease_vault, &a.client_tokens, a.lease.to_account_info(), seeds, refund)?;

        let settle_deadline = now.checked_add(a.config.settle_window_seconds).ok_or(GpunetError::ArithmeticOverflow)?;
        let closer = a.closer.key();
        let lease = &mut ctx.accounts.lease;
        lease.refunded = lease.refunded.checked_add(refund).ok_or(GpunetError::ArithmeticOverflow)?;
        lease.status = LeaseStatus::Closing;
        lease.closed_at = now;
        lease.billable_until = billable_until;
        lease.settle_deadline = settle_deadline;
        emit!(LeaseClosed {
            lease: lease.key(),
            closed_by: closer,
            refund,
            paid: lease.paid,
            fees: lease.fees,
            retained,
            billable_until,
            settle_deadline,
        });
        Ok(())
    }
}
