//! `initialize`: creates the protocol configuration (once per deployment).
use anchor_lang::prelude::*;
use anchor_spl::token::{Mint, TokenAccount};

use crate::errors::GpunetError;
use crate::events::ConfigInitialized;
use crate::state::*;

#[derive(Accounts)]
pub struct Initialize<'info> {
    #[account(mut)]
    pub admin: Signer<'info>,
    #[account(init, payer = admin, space = 8 + Config::INIT_SPACE, seeds = [SEED_CONFIG], bump)]
    pub config: Account<'info, Config>,
    pub io_mint: Account<'info, Mint>,
    #[account(token::mint = io_mint)]
    pub treasury: Account<'info, TokenAccount>,
    pub system_program: Program<'info, System>,
}

impl<'info> Initialize<'info> {
    pub fn validate(&self, params: &ConfigParams) -> Result<()> {
        params.validate()?;
        require_keys_eq!(params.treasury, self.treasury.key(), GpunetError::WrongTreasury);
        Ok(())
    }

    #[access_control(ctx.accounts.validate(&params))]
    pub fn handler(ctx: Context<Self>, params: ConfigParams) -> Result<()> {
        let config = &mut ctx.accounts.config;
        config.admin = ctx.accounts.admin.key();
        config.io_mint = ctx.accounts.io_mint.key();
        config.bump = ctx.bumps.config;
        config.apply(&params);
        emit!(ConfigInitialized { admin: config.admin, io_mint: config.io_mint, params });
        Ok(())
    }
}
