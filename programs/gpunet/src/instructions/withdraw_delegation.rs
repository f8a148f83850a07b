//! `withdraw_delegation`: once its cohort has unbonded, an undelegated position's stake returns
//! to the delegator. The position closes when its rewards are collected too.
use anchor_lang::prelude::*;
use anchor_spl::token::{Token, TokenAccount};

use crate::errors::GpunetError;
use crate::events::DelegationWithdrawn;
use crate::state::*;
use crate::vault;

#[derive(Accounts)]
pub struct WithdrawDelegation<'info> {
    #[account(mut)]
    pub delegator: Signer<'info>,
    #[account(seeds = [SEED_CONFIG], bump = config.bump)]
    pub config: Box<Account<'info, Config>>,
    #[account(mut, address = delegation.provider @ GpunetError::AccountMismatch)]
    pub provider: Box<Account<'info, Provider>>,
    #[account(mut, seeds = [SEED_STAKE_VAULT, provider.key().as_ref()], bump = provider.vault_bump)]
    pub stake_vault: Box<Account<'info, TokenAccount>>,
    #[account(
        mut, has_one = delegator,
        seeds = [SEED_DELEGATION, provider.key().as_ref(), delegator.key().as_ref(), delegation.nonce.to_le_bytes().as_ref()],
        bump = delegation.bump
    )]
    pub delegation: Box<Account<'info, Delegation>>,
    #[account(
        mut, seeds = [SEED_COHORT, provider.key().as_ref(), delegation.exit_epoch.to_le_bytes().as_ref()],
        bump = cohort.bump
    )]
    pub cohort: Box<Account<'info, Cohort>>,
    #[account(mut, token::mint = config.io_mint, token::authority = delegator)]
    pub delegator_tokens: Box<Account<'info, TokenAccount>>,
    pub token_program: Program<'info, Token>,
}

impl<'info> WithdrawDelegation<'info> {
    pub fn handler(ctx: Context<Self>) -> Result<()> {
        let a = &ctx.accounts;
        require!(!a.delegation.is_active(), GpunetError::DelegationActive);
        require_gt!(a.delegation.cohort_shares, 0, GpunetError::NothingUnbonding);
        require!(Clock::get()?.unix_timestamp >= a.cohort.ends_at, GpunetError::StillUnbonding);
        let shares = a.delegation.cohort_shares;
        let amount = share_value(shares, a.cohort.shares, a.cohort.stake).ok_or(GpunetError::ArithmeticOverflow)?;
        let authority = a.provider.authority;
        let seeds: &[&[u8]] = &[SEED_PROVIDER, authority.as_ref(), &[a.provider.bump]];
        vault::pay_out(
            &a.token_program,
            &a.stake_vault,
            &a.delegator_tokens,
            a.provider.to_account_info(),
            seeds,
            amount,
        )?;

        let cohort = &mut ctx.accounts.cohort;
        cohort.shares -= shares;
        cohort.stake -= amount;
        if cohort.shares == 0 {
            // its last position withdrew all its stake (a share's value rounds down, the last takes the rest)
            cohort.close(ctx.accounts.delegator.to_account_info())?;
        }
        let provider = &mut ctx.accounts.provider;
        provider.delegated_unbonding =
            provider.delegated_unbonding.checked_sub(amount).ok_or(GpunetError::ArithmeticOverflow)?;
        let delegation = &mut ctx.accounts.delegation;
        delegation.cohort_shares = 0;
        emit!(DelegationWithdrawn { provider: provider.key(), delegation: delegation.key(), amount });
        if delegation.reward_epoch >= delegation.exit_epoch {
            delegation.close(ctx.accounts.delegator.to_account_info())?;
        }
        Ok(())
    }
}
