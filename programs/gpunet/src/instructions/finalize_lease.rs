//! `finalize_lease`: ends a closing lease. The fees the lease collected and that are still in its
//! vault go to the treasury; everything else the vault holds goes to the client (the escrow left,
//! plus anything sent to the vault from outside, counted as `donations`), the vault is closed (its
//! rent to the client) and the lease becomes `Closed`.
//!
//! Anyone may finalize once the settlement window is over, or as soon as every share is settled
//! up to the close; an attester may finalize earlier (it declares the final settlement done).
use anchor_lang::prelude::*;
use anchor_spl::token::{Token, TokenAccount};

use crate::errors::GpunetError;
use crate::events::LeaseFinalized;
use crate::state::*;
use crate::vault;

#[derive(Accounts)]
pub struct FinalizeLease<'info> {
    pub finalizer: Signer<'info>,
    #[account(seeds = [SEED_CONFIG], bump = config.bump)]
    pub config: Box<Account<'info, Config>>,
    #[account(
        mut, has_one = client @ GpunetError::AccountMismatch,
        seeds = [SEED_LEASE, lease.client.as_ref(), lease.lease_id.to_le_bytes().as_ref()],
        bump = lease.bump
    )]
    pub lease: Box<Account<'info, Lease>>,
    #[account(mut, seeds = [SEED_LEASE_VAULT, lease.key().as_ref()], bump = lease.vault_bump)]
    pub lease_vault: Box<Account<'info, TokenAccount>>,
    /// CHECK: the lease's client (checked by `has_one`), receives the vault's rent.
    #[account(mut)]
    pub client: UncheckedAccount<'info>,
    #[account(
        mut,
        token::mint = config.io_mint,
        token::authority = client
    )]
    pub client_tokens: Box<Account<'info, TokenAccount>>,
    #[account(mut, address = config.treasury @ GpunetError::WrongTreasury)]
    pub treasury: Box<Account<'info, TokenAccount>>,
    pub token_program: Program<'info, Token>,
}

impl<'info> FinalizeLease<'info> {
    pub fn validate(&self, now: i64) -> Result<()> {
        require!(self.lease.status == LeaseStatus::Closing, GpunetError::LeaseNotClosing);
        require!(
            now > self.lease.settle_deadline
                || self.lease.fully_settled()
                || self.config.is_attester(self.finalizer.key),
            GpunetError::SettlementWindowOpen
        );
        Ok(())
    }

    pub fn handler(ctx: Context<Self>) -> Result<()> {
        let now = Clock::get()?.unix_timestamp;
        ctx.accounts.validate(now)?;
        let a = &ctx.accounts;
        let escrow_left = a.lease.escrow_left()?;
        let fees = a.lease.fees_unswept()?;
        // The vault can only hold more than the bookkeeping says (outside transfers), never less.
        let held = a.lease_vault.amount;
        let to_client = held.checked_sub(fees).ok_or(GpunetError::ArithmeticOverflow)?;
        let donations = to_client.checked_sub(escrow_left).ok_or(GpunetError::ArithmeticOverflow)?;
        let lease_id = a.lease.lease_id.to_le_bytes();
        let seeds: &[&[u8]] = &[SEED_LEASE, a.lease.client.as_ref(), &lease_id, &[a.lease.bump]];
        let authority = a.lease.to_account_info();
        vault::pay_out(&a.token_program, &a.lease_vault, &a.treasury, authority.clone(), seeds, fees)?;
        vault::pay_out(&a.token_program, &a.lease_vault, &a.client_tokens, authority.clone(), seeds, to_client)?;
        vault::close(&a.token_program, &a.lease_vault, a.client.to_account_info(), authority, seeds)?;

        let finalizer = a.finalizer.key();
        let lease = &mut ctx.accounts.lease;
        lease.refunded = lease.refunded.checked_add(escrow_left).ok_or(GpunetError::ArithmeticOverflow)?;
        lease.donations = donations;
        lease.fees_swept = lease.fees;
        lease.status = LeaseStatus::Closed;
        lease.finalized_at = now;
        emit!(LeaseFinalized {
            lease: lease.key(),
            finalized_by: finalizer,
            refund: escrow_left,
            donations,
            paid: lease.paid,
            fees: lease.fees,
            refunded: lease.refunded,
            fees_to_treasury: fees,
        });
        Ok(())
    }
}
