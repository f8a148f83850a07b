//! `collect_rewards`: pays a position the rewards credited to its shares since it last collected,
//! to the delegator's own token account. Anyone may crank it. A position earns for the epochs from
//! `since` through its exit epoch; the `RewardIndex` of the epoch before it began earning, or of
//! the one it stopped in, is passed among the remaining accounts when that epoch is not the pool's
//! last credited one. An undelegated position closes once withdrawn and collected through its exit.
use anchor_lang::prelude::*;
use anchor_spl::token::{Token, TokenAccount};

use crate::errors::GpunetError;
use crate::events::{PoolRewardsWithdrawn, RewardsCollected};
use crate::state::*;
use crate::vault;

#[derive(Accounts)]
pub struct CollectRewards<'info> {
    #[account(seeds = [SEED_CONFIG], bump = config.bump)]
    pub config: Box<Account<'info, Config>>,
    #[account(address = delegation.provider @ GpunetError::AccountMismatch)]
    pub provider: Box<Account<'info, Provider>>,
    #[account(mut, seeds = [SEED_POOL, provider.key().as_ref()], bump = pool.bump)]
    pub pool: Box<Account<'info, Pool>>,
    #[account(mut, seeds = [SEED_STAKE_VAULT, provider.key().as_ref()], bump = provider.vault_bump)]
    pub stake_vault: Box<Account<'info, TokenAccount>>,
    #[account(
        mut, has_one = delegator,
        seeds = [SEED_DELEGATION, provider.key().as_ref(), delegator.key().as_ref(), delegation.nonce.to_le_bytes().as_ref()],
        bump = delegation.bump
    )]
    pub delegation: Box<Account<'info, Delegation>>,
    /// CHECK: the position's owner (address checked by `has_one`): receives the rent on close.
    #[account(mut)]
    pub delegator: UncheckedAccount<'info>,
    #[account(mut, token::mint = config.io_mint, token::authority = delegation.delegator)]
    pub delegator_tokens: Box<Account<'info, TokenAccount>>,
    pub token_program: Program<'info, Token>,
}

impl<'info> CollectRewards<'info> {
    /// The pool's `acc` through `epoch` (credited): the pool's own for its last credited epoch,
    /// else that epoch's `RewardIndex` from the remaining accounts.
    fn acc_through(&self, epoch: i64, remaining: &'info [AccountInfo<'info>]) -> Result<u128> {
        if epoch == self.pool.credited_through {
            return Ok(self.pool.acc);
        }
        if epoch <= self.pool.opened_epoch {
            return Ok(0); // nothing is credited through the epoch the pool opened in
        }
        let provider = self.provider.key();
        let (address, _) =
            Pubkey::find_program_address(&[SEED_REWARD_INDEX, provider.as_ref(), &epoch.to_le_bytes()], &crate::ID);
        let info = remaining.iter().find(|info| info.key() == address).ok_or(GpunetError::RewardIndexMissing)?;
        Ok(Account::<RewardIndex>::try_from(info)?.acc)
    }

    pub fn handler(ctx: Context<'_, '_, 'info, 'info, Self>) -> Result<()> {
        let a = &ctx.accounts;
        let credited = a.pool.credited_through;
        let d = &a.delegation;
        let through = d.last_earning_epoch().min(credited);
        let mut paid = 0;
        if credited >= d.reward_epoch {
            let start =
                if d.reward_acc_known { d.reward_acc } else { a.acc_through(d.reward_epoch, ctx.remaining_accounts)? };
            let end = a.acc_through(through, ctx.remaining_accounts)?;
            // the difference first, then rounded down: what every position collects never adds up
            // to more than what was credited to the epochs it earned in
            paid = end
                .checked_sub(start)
                .and_then(|acc| reward_of(d.shares, acc))
                .ok_or(GpunetError::ArithmeticOverflow)?;
            let authority = a.provider.authority;
            let seeds: &[&[u8]] = &[SEED_PROVIDER, authority.as_ref(), &[a.provider.bump]];
            vault::pay_out(
                &a.token_program,
                &a.stake_vault,
                &a.delegator_tokens,
                a.provider.to_account_info(),
                seeds,
                paid,
            )?;
            let pool = &mut ctx.accounts.pool;
            pool.delegator_rewards = pool.delegator_rewards.checked_sub(paid).ok_or(GpunetError::ArithmeticOverflow)?;
            let delegation = &mut ctx.accounts.delegation;
            delegation.reward_epoch = through;
            delegation.reward_acc = end;
            delegation.reward_acc_known = true;
        }
        let delegation = &ctx.accounts.delegation;
        emit!(RewardsCollected {
            provider: delegation.provider,
            delegation: delegation.key(),
            amount: paid,
            through_epoch: delegation.reward_epoch,
        });
        if !delegation.is_active() && delegation.cohort_shares == 0 && delegation.reward_epoch >= delegation.exit_epoch
        {
            ctx.accounts.delegation.close(ctx.accounts.delegator.to_account_info())?;
        }
        Ok(())
    }
}

#[derive(Accounts)]
pub struct WithdrawPoolRewards<'info> {
    pub authority: Signer<'info>,
    #[account(seeds = [SEED_CONFIG], bump = config.bump)]
    pub config: Box<Account<'info, Config>>,
    #[account(seeds = [SEED_PROVIDER, authority.key().as_ref()], bump = provider.bump, has_one = authority)]
    pub provider: Box<Account<'info, Provider>>,
    #[account(mut, seeds = [SEED_POOL, provider.key().as_ref()], bump = pool.bump)]
    pub pool: Box<Account<'info, Pool>>,
    #[account(mut, seeds = [SEED_STAKE_VAULT, provider.key().as_ref()], bump = provider.vault_bump)]
    pub stake_vault: Box<Account<'info, TokenAccount>>,
    #[account(mut, token::mint = config.io_mint, token::authority = authority)]
    pub authority_tokens: Box<Account<'info, TokenAccount>>,
    pub token_program: Program<'info, Token>,
}

impl<'info> WithdrawPoolRewards<'info> {
    /// The supplier takes its rewards and commission out of the pool (slashable until then).
    pub fn handler(ctx: Context<Self>) -> Result<()> {
        let a = &ctx.accounts;
        let amount = a.pool.provider_rewards;
        require_gt!(amount, 0, GpunetError::ZeroAmount);
        let authority = a.provider.authority;
        let seeds: &[&[u8]] = &[SEED_PROVIDER, authority.as_ref(), &[a.provider.bump]];
        vault::pay_out(
            &a.token_program,
            &a.stake_vault,
            &a.authority_tokens,
            a.provider.to_account_info(),
            seeds,
            amount,
        )?;
        let provider = a.provider.key();
        ctx.accounts.pool.provider_rewards = 0;
        emit!(PoolRewardsWithdrawn { provider, amount });
        Ok(())
    }
}
