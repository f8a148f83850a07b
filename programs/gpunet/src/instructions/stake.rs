//! `stake`: a provider moves IO from its wallet into its stake vault.
use anchor_lang::prelude::*;
use anchor_spl::token::{Token, TokenAccount};

use crate::errors::GpunetError;
use crate::events::Staked;
use crate::state::*;
use crate::vault;

#[derive(Accounts)]
pub struct Stake<'info> {
    pub authority: Signer<'info>,
    #[account(seeds = [SEED_CONFIG], bump = config.bump)]
    pub config: Account<'info, Config>,
    #[account(
        mut, seeds = [SEED_PROVIDER, authority.key().as_ref()], bump = provider.bump,
        has_one = authority
    )]
    pub provider: Account<'info, Provider>,
    #[account(mut, seeds = [SEED_STAKE_VAULT, provider.key().as_ref()], bump = provider.vault_bump)]
    pub stake_vault: Account<'info, TokenAccount>,
    #[account(
        mut,
        token::mint = config.io_mint,
        token::authority = authority
    )]
    pub authority_tokens: Account<'info, TokenAccount>,
    pub token_program: Program<'info, Token>,
}

impl<'info> Stake<'info> {
    pub fn handler(ctx: Context<Self>, amount: u64) -> Result<()> {
        require_gt!(amount, 0, GpunetError::ZeroAmount);
        let a = &ctx.accounts;
        vault::deposit(&a.token_program, &a.authority_tokens, &a.stake_vault, &a.authority, amount)?;
        let provider = &mut ctx.accounts.provider;
        provider.staked = provider.staked.checked_add(amount).ok_or(GpunetError::ArithmeticOverflow)?;
        emit!(Staked { provider: provider.key(), amount, staked: provider.staked });
        Ok(())
    }
}
