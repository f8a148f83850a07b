//! `register_provider`: a supplier creates its provider account and stake vault.
use anchor_lang::prelude::*;
use anchor_spl::token::{Mint, Token, TokenAccount};

use crate::events::ProviderRegistered;
use crate::state::*;

#[derive(Accounts)]
pub struct RegisterProvider<'info> {
    #[account(mut)]
    pub authority: Signer<'info>,
    #[account(seeds = [SEED_CONFIG], bump = config.bump, has_one = io_mint)]
    pub config: Account<'info, Config>,
    #[account(
        init, payer = authority, space = 8 + Provider::INIT_SPACE,
        seeds = [SEED_PROVIDER, authority.key().as_ref()], bump
    )]
    pub provider: Account<'info, Provider>,
    #[account(
        init, payer = authority,
        seeds = [SEED_STAKE_VAULT, provider.key().as_ref()], bump,
        token::mint = io_mint, token::authority = provider
    )]
    pub stake_vault: Account<'info, TokenAccount>,
    pub io_mint: Account<'info, Mint>,
    pub token_program: Program<'info, Token>,
    pub system_program: Program<'info, System>,
}

impl<'info> RegisterProvider<'info> {
    pub fn handler(ctx: Context<Self>) -> Result<()> {
        let provider = &mut ctx.accounts.provider;
        provider.authority = ctx.accounts.authority.key();
        provider.bump = ctx.bumps.provider;
        provider.vault_bump = ctx.bumps.stake_vault;
        emit!(ProviderRegistered { provider: provider.key(), authority: provider.authority });
        Ok(())
    }
}
