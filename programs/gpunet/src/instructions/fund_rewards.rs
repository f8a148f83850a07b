//! `fund_rewards`: anyone (the admin, usually) adds IO to the reward vault. Only IO added this way
//! counts: a plain transfer into the vault is a donation that funds no root.
use anchor_lang::prelude::*;
use anchor_spl::token::{Token, TokenAccount};

use crate::errors::GpunetError;
use crate::events::RewardsFunded;
use crate::state::*;
use crate::vault;

#[derive(Accounts)]
pub struct FundRewards<'info> {
    pub funder: Signer<'info>,
    #[account(seeds = [SEED_CONFIG], bump = config.bump)]
    pub config: Account<'info, Config>,
    #[account(mut, seeds = [SEED_STAKING], bump = staking.bump)]
    pub staking: Account<'info, Staking>,
    #[account(mut, seeds = [SEED_REWARD_VAULT], bump = staking.vault_bump)]
    pub reward_vault: Account<'info, TokenAccount>,
    #[account(mut, token::mint = config.io_mint, token::authority = funder)]
    pub funder_tokens: Account<'info, TokenAccount>,
    pub token_program: Program<'info, Token>,
}

impl<'info> FundRewards<'info> {
    pub fn handler(ctx: Context<Self>, amount: u64) -> Result<()> {
        require_gt!(amount, 0, GpunetError::ZeroAmount);
        let a = &ctx.accounts;
        vault::deposit(&a.token_program, &a.funder_tokens, &a.reward_vault, &a.funder, amount)?;
        let staking = &mut ctx.accounts.staking;
        staking.reward_funded = staking.reward_funded.checked_add(amount).ok_or(GpunetError::ArithmeticOverflow)?;
        emit!(RewardsFunded { funder: ctx.accounts.funder.key(), amount, funded: staking.reward_funded });
        Ok(())
    }
}
