//! `settle_usage`: pays a node's provider for its usage of a lease up to a signed receipt, out of
//! the lease's escrow.
//!
//! A receipt is cumulative (`state::usage`): this pays the cost of its increment over the last
//! settled receipt of the share, so the attester settles as often or as rarely as it likes. The
//! transaction carries, right before this instruction, an Ed25519 precompile instruction with the
//! node key's signature over `Receipt::message`. An attester (the coordinator, which checked the
//! increment against what it observed) submits it, as a top-level instruction (never by CPI), and
//! says how much of the increment it accepts: time it saw the node offline is not paid for, and
//! the rest of the receipt's increment is settled all the same (never paid later).
//! Usage is billable up to the lease's end while it is active, and up to its close while it is
//! closing (until the settlement deadline).
//!
//! A provider with a pool shares the payout with its delegators (`Provider::delegators_part`): their
//! part goes to the stake vault as the pool's lease income of the current staking epoch (or of the
//! one before, if it is not yet credited: a transaction built just before a boundary still lands),
//! kept in the pool until the epoch is credited (`claim_reward`, `skip_reward_epoch`).
//!
//! No hot account: the writes are the lease, its vault, the provider's own token account and, with
//! a pool, the pool and its stake vault (both the provider's own). The protocol fee
//! stays in the vault (`Lease::fees`) until `sweep_fees` or `finalize_lease`; the provider's
//! lifetime earnings are the sum of its `UsageSettled` events.
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
    /// CHECK: only names the share (`Assignment::node`), never read.
    /// The share records the key that signs and the provider paid: the node account may have been
    /// released since, or registered again under the same key by another provider, and neither
    /// changes who delivered the usage.
    pub node: UncheckedAccount<'info>,
    /// Read only: the provider the share was assigned to (checked in `validate`), whose wallet's
    /// token account is paid.
    pub provider: Box<Account<'info, Provider>>,
    #[account(
        mut,
        token::mint = config.io_mint,
        token::authority = provider.authority
    )]
    pub provider_tokens: Box<Account<'info, TokenAccount>>,
    /// CHECK: the instructions sysvar, pinned by address (a fake one is refused).
    #[account(address = instructions_sysvar::ID @ GpunetError::AccountMismatch)]
    pub instructions: UncheckedAccount<'info>,
    pub token_program: Program<'info, Token>,
    /// The provider's pool and what its income needs: all required when it has a pool, none when
    /// not (checked in `validate`).
    #[account(mut, seeds = [SEED_POOL, provider.key().as_ref()], bump = pool.bump)]
    pub pool: Option<Box<Account<'info, Pool>>>,
    #[account(seeds = [SEED_STAKING], bump = staking.bump)]
    pub staking: Option<Box<Account<'info, Staking>>>,
    #[account(mut, seeds = [SEED_STAKE_VAULT, provider.key().as_ref()], bump = provider.vault_bump)]
    pub stake_vault: Option<Box<Account<'info, TokenAccount>>>,
}

impl<'info> SettleUsage<'info> {
    pub fn validate(&self, receipt: &Receipt, accepted_gpu_seconds: u64, income_epoch: i64) -> Result<()> {
        require!(self.config.is_attester(self.attester.key), GpunetError::NotAttester);
        require_top_level(&self.instructions)?;
        let now = Clock::get()?.unix_timestamp;
        self.validate_pool(now, income_epoch)?;
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
        require_keys_eq!(self.provider.key(), share.provider, GpunetError::AccountMismatch);
        require!(receipt.epoch == share.epoch, GpunetError::WrongAssignment);

        // Strictly increasing: a repeat (or an older receipt) is refused, so nothing is paid twice.
        require!(receipt.gpu_seconds > share.receipt_gpu_seconds, GpunetError::BadSequence);
        require!(
            receipt.through > share.settled_until && receipt.through <= now && receipt.through <= billing_end,
            GpunetError::BadPeriod
        );
        let max_gpu_seconds = share.max_gpu_seconds(receipt.through).ok_or(GpunetError::ArithmeticOverflow)?;
        require!(receipt.gpu_seconds <= max_gpu_seconds, GpunetError::OverClaimed);
        let increment = receipt.gpu_seconds - share.receipt_gpu_seconds;
        require!(accepted_gpu_seconds <= increment, GpunetError::OverClaimed);

        let message = receipt.message(&self.lease.key(), &share.node_key);
        require_signed_by_previous_instruction(&self.instructions, &share.node_key, &message)
    }

    /// A provider with a pool must be settled with it (its delegators' part cannot be left out),
    /// into an epoch not yet credited (or the pool's first, which takes no income): the current one, or
    /// the one before.
    fn validate_pool(&self, now: i64, income_epoch: i64) -> Result<()> {
        require!(self.provider.has_pool == self.pool.is_some(), GpunetError::PoolMissing);
        let Some(pool) = self.pool.as_ref() else { return Ok(()) };
        let (Some(staking), true) = (self.staking.as_ref(), self.stake_vault.is_some()) else {
            return err!(GpunetError::PoolMissing);
        };
        let now_epoch = staking.epoch_at(now);
        let creditable = income_epoch > pool.credited_through || income_epoch == pool.opened_epoch;
        require!(
            creditable && (income_epoch == now_epoch || income_epoch + 1 == now_epoch),
            GpunetError::WrongRewardEpoch
        );
        Ok(())
    }

    #[access_control(ctx.accounts.validate(&receipt, accepted_gpu_seconds, income_epoch))]
    pub fn handler(ctx: Context<Self>, receipt: Receipt, accepted_gpu_seconds: u64, income_epoch: i64) -> Result<()> {
        let a = &ctx.accounts;
        let index = a.lease.assignment_index(&a.node.key()).ok_or(GpunetError::NodeNotInLease)?;
        let share = a.lease.assignments[index];
        // Capped by the escrow left: the receipt is settled all the same (what the escrow could not
        // pay is never paid later; the event shows the shortfall against the usage's cost).
        let split = math::settle(
            share.price_per_gpu_hour,
            share.gpu_seconds,
            accepted_gpu_seconds,
            a.config.protocol_fee_bps,
            a.lease.escrow_left()?,
        )
        .ok_or(GpunetError::ArithmeticOverflow)?;

        // No share is eligible in the epoch the pool opened in (a delegation earns from the epoch
        // after its own), so its income is all the supplier's; so is income the pool has no room
        // to keep (`INCOME_HISTORY`).
        let delegators_part = a.provider.delegators_part(split.payout).ok_or(GpunetError::ArithmeticOverflow)?;
        let kept = match ctx.accounts.pool.as_mut() {
            Some(pool) if income_epoch > pool.opened_epoch && delegators_part > 0 => {
                pool.add_income(income_epoch, delegators_part)?
            }
            _ => false,
        };
        let to_pool = if kept { delegators_part } else { 0 };
        let a = &ctx.accounts;
        let lease_id = a.lease.lease_id.to_le_bytes();
        let seeds: &[&[u8]] = &[SEED_LEASE, a.lease.client.as_ref(), &lease_id, &[a.lease.bump]];
        let lease_authority = a.lease.to_account_info();
        vault::pay_out(
            &a.token_program,
            &a.lease_vault,
            &a.provider_tokens,
            lease_authority,
            seeds,
            split.payout - to_pool,
        )?;
        if let (Some(stake_vault), true) = (a.stake_vault.as_ref(), to_pool > 0) {
            vault::pay_out(&a.token_program, &a.lease_vault, stake_vault, a.lease.to_account_info(), seeds, to_pool)?;
        }

        let lease = &mut ctx.accounts.lease;
        lease.paid = lease.paid.checked_add(split.payout).ok_or(GpunetError::ArithmeticOverflow)?;
        lease.fees = lease.fees.checked_add(split.fee).ok_or(GpunetError::ArithmeticOverflow)?;
        let escrow_left = lease.escrow_left()?;
        let lease_key = lease.key();
        let share = &mut lease.assignments[index];
        share.settled_until = receipt.through;
        share.receipt_gpu_seconds = receipt.gpu_seconds;
        share.gpu_seconds =
            share.gpu_seconds.checked_add(accepted_gpu_seconds).ok_or(GpunetError::ArithmeticOverflow)?;
        emit!(UsageSettled {
            lease: lease_key,
            node: share.node,
            provider: share.provider,
            epoch: receipt.epoch,
            receipt_gpu_seconds: receipt.gpu_seconds,
            through: receipt.through,
            gpu_seconds: accepted_gpu_seconds,
            amount: split.amount,
            payout: split.payout,
            to_pool,
            income_epoch: if ctx.accounts.pool.is_some() { income_epoch } else { 0 },
            fee: split.fee,
            escrow_left,
        });
        Ok(())
    }
}
