//! `unjail_node`: after the jail cool-down the provider makes its node assignable again.
use anchor_lang::prelude::*;

use crate::errors::GpunetError;
use crate::events::NodeUnjailed;
use crate::state::*;

#[derive(Accounts)]
pub struct UnjailNode<'info> {
    pub authority: Signer<'info>,
    #[account(seeds = [SEED_PROVIDER, authority.key().as_ref()], bump = provider.bump, has_one = authority)]
    pub provider: Account<'info, Provider>,
    #[account(
        mut, seeds = [SEED_NODE, node.node_key.as_ref()], bump = node.bump,
        has_one = provider @ GpunetError::NotNodeProvider
    )]
    pub node: Account<'info, Node>,
}

impl<'info> UnjailNode<'info> {
    pub fn validate(&self) -> Result<()> {
        require!(self.node.jailed, GpunetError::NodeNotJailed);
        let now = Clock::get()?.unix_timestamp;
        require!(now >= self.node.jail_ends_at, GpunetError::JailNotOver);
        Ok(())
    }

    #[access_control(ctx.accounts.validate())]
    pub fn handler(ctx: Context<Self>) -> Result<()> {
        let node = &mut ctx.accounts.node;
        node.jailed = false;
        emit!(NodeUnjailed { node: node.key(), provider: node.provider });
        Ok(())
    }
}
