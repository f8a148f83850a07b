//! `initialize`: creates the protocol configuration (once per deployment).
//!
//! Only the program's upgrade authority may initialize: the transaction passes the program's
//! ProgramData account (the upgradeable loader's PDA `[program id]`), whose upgrade authority
//! must sign as `admin`. Without this, whoever lands first on a fresh deployment would own the
//! config for good. So deploy with the upgradeable loader and initialize before making the
//! program immutable. gpunet-localnet and the tests write that ProgramData record at genesis
//! (see `localnet/src/gpunet_program.rs`).
//!
//! The IO mint must have no freeze authority: its holder could freeze every vault.
use anchor_lang::prelude::*;
use anchor_lang::solana_program::bpf_loader_upgradeable;
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
    #[account(
        seeds = [crate::ID.as_ref()], bump, seeds::program = bpf_loader_upgradeable::ID,
        constraint = program_data.upgrade_authority_address == Some(admin.key()) @ GpunetError::NotUpgradeAuthority
    )]
    pub program_data: Account<'info, ProgramData>,
    pub system_program: Program<'info, System>,
}

impl<'info> Initialize<'info> {
    pub fn validate(&self, params: &ConfigParams) -> Result<()> {
        params.validate()?;
        require_keys_eq!(params.treasury, self.treasury.key(), GpunetError::WrongTreasury);
        require!(self.io_mint.freeze_authority.is_none(), GpunetError::MintHasFreezeAuthority);
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
