//! `withdraw_unstaked`: after the unbonding period, unbonded stake returns to the provider's wallet.
use anchor_lang::prelude::*;
use anchor_spl::token::{Token, TokenAccount};

use crate::errors::GpunetError;
use crate::events::UnstakeWithdrawn;
use crate::state::*;
use crate::vault;

#[derive(Accounts)]
pub struct WithdrawUnstaked<'info> {
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

impl<'info> WithdrawUnstaked<'info> {
    pub fn validate(&self) -> Result<()> {
        require_gt!(self.provider.unbonding, 0, GpunetError::NothingUnbonding);
        let now = Clock::get()?.unix_timestamp;
        require!(now >= self.provider.unbonding_ends_at, GpunetError::StillUnbonding);
        Ok(())
    }

    #[access_control(ctx.accounts.validate())]
    pub fn handler(ctx: Context<Self>) -> Result<()> {
        let a = &ctx.accounts;
        let amount = a.provider.unbonding;
        let authority_key = a.authority.key();
        let seeds: &[&[u8]] = &[SEED_PROVIDER, authority_key.as_ref(), &[a.provider.bump]];
        vault::pay_out(
            &a.token_program,
            &a.stake_vault,
            &a.authority_tokens,
            a.provider.to_account_info(),
            seeds,
            amount,
        )?;
        let provider = &mut ctx.accounts.provider;
        provider.unbonding = 0;
        emit!(UnstakeWithdrawn { provider: provider.key(), amount });
        Ok(())
    }
}
