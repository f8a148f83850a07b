//! `open_lease`: a client states its requirements and escrows the full price of the lease.
use anchor_lang::prelude::*;
use anchor_spl::token::{Mint, Token, TokenAccount};

use crate::errors::GpunetError;
use crate::events::LeaseOpened;
use crate::math;
use crate::state::*;
use crate::vault;

#[derive(Accounts)]
#[instruction(lease_id: u64)]
pub struct OpenLease<'info> {
    #[account(mut)]
    pub client: Signer<'info>,
    #[account(seeds = [SEED_CONFIG], bump = config.bump, has_one = io_mint)]
    pub config: Account<'info, Config>,
    #[account(
        init, payer = client, space = 8 + Lease::INIT_SPACE,
        seeds = [SEED_LEASE, client.key().as_ref(), lease_id.to_le_bytes().as_ref()], bump
    )]
    pub lease: Box<Account<'info, Lease>>,
    #[account(
        init, payer = client,
        seeds = [SEED_LEASE_VAULT, lease.key().as_ref()], bump,
        token::mint = io_mint, token::authority = lease
    )]
    pub lease_vault: Account<'info, TokenAccount>,
    #[account(
        mut,
        token::mint = io_mint,
        token::authority = client
    )]
    pub client_tokens: Account<'info, TokenAccount>,
    pub io_mint: Account<'info, Mint>,
    pub token_program: Program<'info, Token>,
    pub system_program: Program<'info, System>,
}

impl<'info> OpenLease<'info> {
    pub fn validate(&self, terms: &LeaseTerms, downtime_tolerance_seconds: u32) -> Result<()> {
        require!(!self.config.paused, GpunetError::Paused);
        require!(
            (1..=MAX_LEASE_GPUS).contains(&terms.gpu_count)
                && terms.duration_seconds > 0
                && terms.max_price_per_gpu_hour > 0,
            GpunetError::InvalidLeaseTerms
        );
        require!(
            downtime_tolerance_seconds == 0
                || (MIN_DOWNTIME_TOLERANCE_SECONDS..=MAX_DOWNTIME_TOLERANCE_SECONDS)
                    .contains(&downtime_tolerance_seconds),
            GpunetError::InvalidDowntimeTolerance
        );
        Ok(())
    }

    #[access_control(ctx.accounts.validate(&terms, downtime_tolerance_seconds))]
    pub fn handler(
        ctx: Context<Self>,
        lease_id: u64,
        terms: LeaseTerms,
        downtime_tolerance_seconds: u32,
    ) -> Result<()> {
        let deposit = math::escrow_for(terms.max_price_per_gpu_hour, terms.gpu_count, terms.duration_seconds)
            .ok_or(GpunetError::ArithmeticOverflow)?;
        let a = &ctx.accounts;
        vault::deposit(&a.token_program, &a.client_tokens, &a.lease_vault, &a.client, deposit)?;

        let lease = &mut ctx.accounts.lease;
        lease.client = ctx.accounts.client.key();
        lease.lease_id = lease_id;
        lease.terms = terms;
        lease.status = LeaseStatus::Open;
        lease.opened_at = Clock::get()?.unix_timestamp;
        lease.deposited = deposit;
        lease.bump = ctx.bumps.lease;
        lease.vault_bump = ctx.bumps.lease_vault;
        lease.downtime_tolerance_seconds = downtime_tolerance_seconds;
        emit!(LeaseOpened {
            lease: lease.key(),
            client: lease.client,
            lease_id,
            terms,
            deposit,
            downtime_tolerance_seconds
        });
        Ok(())
    }
}
