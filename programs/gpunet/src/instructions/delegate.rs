//! `delegate`: any wallet puts IO behind a provider's pool, opening a position (one per nonce).
//! Its shares back the pool at once (collateral, and slashable for malicious faults) and earn
//! rewards from the next epoch on. The pool holds at most 1x the provider's own active stake.
use anchor_lang::prelude::*;
use anchor_spl::token::{Token, TokenAccount};

use crate::errors::GpunetError;
use crate::events::Delegated;
use crate::state::*;
use crate::vault;

#[derive(Accounts)]
#[instruction(nonce: u64)]
pub struct Delegate<'info> {
    #[account(mut)]
    pub delegator: Signer<'info>,
    #[account(seeds = [SEED_CONFIG], bump = config.bump)]
    pub config: Box<Account<'info, Config>>,
    #[account(seeds = [SEED_STAKING], bump = staking.bump)]
    pub staking: Box<Account<'info, Staking>>,
    #[account(mut, seeds = [SEED_PROVIDER, provider.authority.as_ref()], bump = provider.bump)]
    pub provider: Box<Account<'info, Provider>>,
    #[account(mut, seeds = [SEED_POOL, provider.key().as_ref()], bump = pool.bump)]
    pub pool: Box<Account<'info, Pool>>,
    #[account(mut, seeds = [SEED_STAKE_VAULT, provider.key().as_ref()], bump = provider.vault_bump)]
    pub stake_vault: Box<Account<'info, TokenAccount>>,
    #[account(mut, token::mint = config.io_mint, token::authority = delegator)]
    pub delegator_tokens: Box<Account<'info, TokenAccount>>,
    #[account(
        init, payer = delegator, space = 8 + Delegation::INIT_SPACE,
        seeds = [SEED_DELEGATION, provider.key().as_ref(), delegator.key().as_ref(), nonce.to_le_bytes().as_ref()], bump
    )]
    pub delegation: Box<Account<'info, Delegation>>,
    pub token_program: Program<'info, Token>,
    pub system_program: Program<'info, System>,
}

impl<'info> Delegate<'info> {
    pub fn handler(ctx: Context<Self>, nonce: u64, amount: u64) -> Result<()> {
        require_gt!(amount, 0, GpunetError::ZeroAmount);
        let now_epoch = ctx.accounts.staking.epoch_at(Clock::get()?.unix_timestamp);
        let provider = &ctx.accounts.provider;
        require!(provider.delegated > 0 || provider.delegated_shares == 0, GpunetError::PoolWipedOut);
        let shares = provider.shares_for(amount).ok_or(GpunetError::ArithmeticOverflow)?;
        require_gt!(shares, 0, GpunetError::ZeroShares);
        let delegated = provider.delegated.checked_add(amount).ok_or(GpunetError::ArithmeticOverflow)?;
        require!(delegated <= provider.delegation_cap(), GpunetError::DelegationCapExceeded);
        ctx.accounts.pool.roll(now_epoch, provider.delegated_shares)?;

        let a = &ctx.accounts;
        vault::deposit(&a.token_program, &a.delegator_tokens, &a.stake_vault, &a.delegator, amount)?;
        let provider = &mut ctx.accounts.provider;
        provider.delegated = delegated;
        provider.delegated_shares =
            provider.delegated_shares.checked_add(shares).ok_or(GpunetError::ArithmeticOverflow)?;

        let delegation = &mut ctx.accounts.delegation;
        delegation.provider = provider.key();
        delegation.delegator = ctx.accounts.delegator.key();
        delegation.nonce = nonce;
        delegation.shares = shares;
        delegation.since = now_epoch + 1;
        delegation.exit_epoch = i64::MAX;
        delegation.reward_epoch = now_epoch;
        delegation.bump = ctx.bumps.delegation;
        emit!(Delegated {
            provider: provider.key(),
            delegator: delegation.delegator,
            delegation: delegation.key(),
            amount,
            shares,
            since_epoch: delegation.since,
        });
        Ok(())
    }
}
