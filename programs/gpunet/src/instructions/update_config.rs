//! `update_config`: the admin changes fees, stake rules, attesters or the pause switch.
use anchor_lang::prelude::*;
use anchor_spl::token::TokenAccount;

use crate::errors::GpunetError;
use crate::events::ConfigUpdated;
use crate::state::*;

#[derive(Accounts)]
pub struct UpdateConfig<'info> {
    pub admin: Signer<'info>,
    #[account(mut, seeds = [SEED_CONFIG], bump = config.bump, has_one = admin @ GpunetError::NotAdmin)]
    pub config: Account<'info, Config>,
    #[account(token::mint = config.io_mint)]
    pub treasury: Account<'info, TokenAccount>,
}

impl<'info> UpdateConfig<'info> {
    pub fn validate(&self, params: &ConfigParams) -> Result<()> {
        params.validate()?;
        require_keys_eq!(params.treasury, self.treasury.key(), GpunetError::WrongTreasury);
        Ok(())
    }

    #[access_control(ctx.accounts.validate(&params))]
    pub fn handler(ctx: Context<Self>, params: ConfigParams) -> Result<()> {
        let config = &mut ctx.accounts.config;
        config.apply(&params);
        emit!(ConfigUpdated { admin: config.admin, params });
        Ok(())
    }
}
