//! `release_node`: once the unbonding period (at least the settlement window) has passed since a
//! node was deregistered, and it is not jailed, its bonded stake is freed and its account closed (the rent to the provider's
//! wallet). Its key may then be registered again, by anyone who holds it.
use anchor_lang::prelude::*;

use crate::errors::GpunetError;
use crate::events::NodeReleased;
use crate::state::*;

#[derive(Accounts)]
pub struct ReleaseNode<'info> {
    #[account(mut)]
    pub authority: Signer<'info>,
    #[account(seeds = [SEED_CONFIG], bump = config.bump)]
    pub config: Account<'info, Config>,
    #[account(
        mut, seeds = [SEED_PROVIDER, authority.key().as_ref()], bump = provider.bump,
        has_one = authority
    )]
    pub provider: Account<'info, Provider>,
    #[account(
        mut, close = authority, seeds = [SEED_NODE, node.node_key.as_ref()], bump = node.bump,
        has_one = provider @ GpunetError::NotNodeProvider
    )]
    pub node: Account<'info, Node>,
}

impl<'info> ReleaseNode<'info> {
    pub fn validate(&self) -> Result<()> {
        require!(self.node.is_deregistered(), GpunetError::NodeNotDeregistered);
        let now = Clock::get()?.unix_timestamp;
        let bonded_until = self
            .node
            .deregistered_at
            .checked_add(self.config.deregistered_bond_seconds())
            .ok_or(GpunetError::ArithmeticOverflow)?;
        require!(now >= bonded_until, GpunetError::NodeStillBonded);
        // A node slashed while deregistered serves its jail before its key can be registered again.
        require!(!self.node.jailed, GpunetError::NodeJailed);
        Ok(())
    }

    #[access_control(ctx.accounts.validate())]
    pub fn handler(ctx: Context<Self>) -> Result<()> {
        let released = ctx.accounts.node.bonded_stake;
        let provider = &mut ctx.accounts.provider;
        provider.bonded = provider.bonded.checked_sub(released).ok_or(GpunetError::ArithmeticOverflow)?;
        provider.node_count = provider.node_count.checked_sub(1).ok_or(GpunetError::ArithmeticOverflow)?;
        emit!(NodeReleased { node: ctx.accounts.node.key(), provider: provider.key(), released_stake: released });
        Ok(())
    }
}
