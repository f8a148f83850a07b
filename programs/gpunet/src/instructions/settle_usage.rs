//! `settle_usage`: pays a node's provider for one signed usage period out of the lease's escrow.
//!
//! The transaction carries, right before this instruction, an Ed25519 precompile
//! instruction with the node key's signature over `UsageReport::message`. An attester
//! (the coordinator, which checked the report against what it observed) submits it, as a
//! top-level instruction (never by CPI). Usage is billable up to the lease's end while it is
//! active, and up to its close while it is closing (until the settlement deadline).
use anchor_lang::prelude::*;
use anchor_lang::solana_program::sysvar::instructions as instructions_sysvar;
use anchor_spl::token::{Token, TokenAccount};

use crate::ed25519::{require_signed_by_previous_instruction, require_top_level};
use crate::errors::GpunetError;
use crate::events::UsageSettled;
use crate::math;
use crate::state::*;
use crate::vault;

#[derive(Accounts)]
pub struct SettleUsage<'info> {
    pub attester: Signer<'info>,
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
    #[account(seeds = [SEED_NODE, node.node_key.as_ref()], bump = node.bump)]
    pub node: Box<Account<'info, Node>>,
    #[account(mut, address = node.provider @ GpunetError::AccountMismatch)]
    pub provider: Box<Account<'info, Provider>>,
    #[account(
        mut,
        token::mint = config.io_mint,
        token::authority = provider.authority
    )]
    pub provider_tokens: Box<Account<'info, TokenAccount>>,
    #[account(mut, address = config.treasury @ GpunetError::WrongTreasury)]
    pub treasury: Box<Account<'info, TokenAccount>>,
    /// CHECK: the instructions sysvar, pinned by address (a fake one is refused).
    #[account(address = instructions_sysvar::ID @ GpunetError::AccountMismatch)]
    pub instructions: UncheckedAccount<'info>,
    pub token_program: Program<'info, Token>,
}

impl<'info> SettleUsage<'info> {
    pub fn validate(&self, report: &UsageReport) -> Result<()> {
        require!(self.config.is_attester(self.attester.key), GpunetError::NotAttester);
        require_top_level(&self.instructions)?;
        let now = Clock::get()?.unix_timestamp;
        let billing_end = match self.lease.status {
            LeaseStatus::Active => self.lease.ends_at().ok_or(GpunetError::ArithmeticOverflow)?,
            LeaseStatus::Closing => {
                require!(now <= self.lease.settle_deadline, GpunetError::SettlementWindowOver);
                self.lease.billable_until
            }
            LeaseStatus::Open | LeaseStatus::Closed => return err!(GpunetError::LeaseNotActive),
        };
        let index = self.lease.assignment_index(&self.node.key()).ok_or(GpunetError::NodeNotInLease)?;
        let share = &self.lease.assignments[index];

        // Strictly increasing, gaps allowed: a report the attester refused (an over-claim, say) is
        // skipped for good and never blocks the node's later usage; a replay is always refused.
        require!(report.seq > share.last_seq, GpunetError::BadSequence);
        let wall = report.period_end.checked_sub(report.period_start).ok_or(GpunetError::BadPeriod)?;
        require!(
            wall > 0
                && wall <= self.config.usage_period_seconds
                && report.period_start >= share.settled_until
                && report.period_end <= now
                && report.period_end <= billing_end,
            GpunetError::BadPeriod
        );
        let max_gpu_seconds =
            (wall as u64).checked_mul(u64::from(share.gpus)).ok_or(GpunetError::ArithmeticOverflow)?;
        require!(report.gpu_seconds <= max_gpu_seconds, GpunetError::OverClaimed);

        let message = report.message(&self.lease.key(), &share.node_key);
        require_signed_by_previous_instruction(&self.instructions, &share.node_key, &message)
    }

    #[access_control(ctx.accounts.validate(&report))]
    pub fn handler(ctx: Context<Self>, report: UsageReport) -> Result<()> {
        let a = &ctx.accounts;
        let index = a.lease.assignment_index(&a.node.key()).ok_or(GpunetError::NodeNotInLease)?;
        let share = a.lease.assignments[index];
        let split = math::settle(
            share.price_per_gpu_hour,
            report.gpu_seconds,
            a.config.protocol_fee_bps,
            a.lease.escrow_left()?,
        )
        .ok_or(GpunetError::ArithmeticOverflow)?;

        let lease_id = a.lease.lease_id.to_le_bytes();
        let seeds: &[&[u8]] = &[SEED_LEASE, a.lease.client.as_ref(), &lease_id, &[a.lease.bump]];
        let authority = a.lease.to_account_info();
        vault::pay_out(&a.token_program, &a.lease_vault, &a.provider_tokens, authority.clone(), seeds, split.payout)?;
        vault::pay_out(&a.token_program, &a.lease_vault, &a.treasury, authority, seeds, split.fee)?;

        let provider = &mut ctx.accounts.provider;
        provider.earned = provider.earned.checked_add(split.payout).ok_or(GpunetError::ArithmeticOverflow)?;
        let lease = &mut ctx.accounts.lease;
        lease.paid = lease.paid.checked_add(split.payout).ok_or(GpunetError::ArithmeticOverflow)?;
        lease.fees = lease.fees.checked_add(split.fee).ok_or(GpunetError::ArithmeticOverflow)?;
        let escrow_left = lease.escrow_left()?;
        let lease_key = lease.key();
        let share = &mut lease.assignments[index];
        share.last_seq = report.seq;
        share.settled_until = report.period_end;
        share.gpu_seconds = share.gpu_seconds.checked_add(report.gpu_seconds).ok_or(GpunetError::ArithmeticOverflow)?;
        emit!(UsageSettled {
            lease: lease_key,
            node: share.node,
            provider: share.provider,
            seq: report.seq,
            period_start: report.period_start,
            period_end: report.period_end,
            gpu_seconds: report.gpu_seconds,
            amount: split.amount,
            payout: split.payout,
            fee: split.fee,
            escrow_left,
        });
        Ok(())
    }
}
