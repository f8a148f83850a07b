//! `configure_staking` creates the staking config and its reward vault (epoch 0 starts now);
//! `update_staking` changes it. The epoch length never changes, and a new emission takes effect
//! from the next epoch: a root already posted, or an epoch already run, keeps its emission.
use anchor_lang::prelude::*;
use anchor_spl::token::{Mint, Token, TokenAccount};

use crate::errors::GpunetError;
use crate::events::StakingConfigured;
use crate::state::*;

#[derive(Accounts)]
pub struct ConfigureStaking<'info> {
    #[account(mut)]
    pub admin: Signer<'info>,
    #[account(seeds = [SEED_CONFIG], bump = config.bump, has_one = admin @ GpunetError::NotAdmin, has_one = io_mint)]
    pub config: Account<'info, Config>,
    #[account(init, payer = admin, space = 8 + Staking::INIT_SPACE, seeds = [SEED_STAKING], bump)]
    pub staking: Account<'info, Staking>,
    #[account(
        init, payer = admin, seeds = [SEED_REWARD_VAULT], bump,
        token::mint = io_mint, token::authority = staking
    )]
    pub reward_vault: Account<'info, TokenAccount>,
    pub io_mint: Account<'info, Mint>,
    pub token_program: Program<'info, Token>,
    pub system_program: Program<'info, System>,
}

impl<'info> ConfigureStaking<'info> {
    #[access_control(params.validate())]
    pub fn handler(ctx: Context<Self>, params: StakingParams) -> Result<()> {
        let staking = &mut ctx.accounts.staking;
        staking.genesis = Clock::get()?.unix_timestamp;
        staking.apply(&params);
        staking.emission = Schedule::starting(0, params.emission_per_epoch);
        staking.bump = ctx.bumps.staking;
        staking.vault_bump = ctx.bumps.reward_vault;
        emit!(StakingConfigured { genesis: staking.genesis, params });
        Ok(())
    }
}

#[derive(Accounts)]
pub struct UpdateStaking<'info> {
    pub admin: Signer<'info>,
    #[account(seeds = [SEED_CONFIG], bump = config.bump, has_one = admin @ GpunetError::NotAdmin)]
    pub config: Account<'info, Config>,
    #[account(mut, seeds = [SEED_STAKING], bump = staking.bump)]
    pub staking: Account<'info, Staking>,
}

impl<'info> UpdateStaking<'info> {
    pub fn validate(&self, params: &StakingParams) -> Result<()> {
        params.validate()?;
        require_eq!(params.epoch_seconds, self.staking.epoch_seconds, GpunetError::EpochLengthFixed);
        Ok(())
    }

    #[access_control(ctx.accounts.validate(&params))]
    pub fn handler(ctx: Context<Self>, params: StakingParams) -> Result<()> {
        let staking = &mut ctx.accounts.staking;
        let now_epoch = staking.epoch_at(Clock::get()?.unix_timestamp);
        // roots may still be posted for epochs back to `now_epoch - claim_epochs`
        let oldest_needed = now_epoch.saturating_sub(i64::from(staking.claim_epochs.max(params.claim_epochs)));
        staking.emission.cancel_after(now_epoch);
        staking.emission.set(now_epoch + 1, params.emission_per_epoch, oldest_needed)?;
        staking.apply(&params);
        emit!(StakingConfigured { genesis: staking.genesis, params });
        Ok(())
    }
}
