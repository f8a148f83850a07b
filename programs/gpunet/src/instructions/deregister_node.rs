//! `deregister_node`: an idle, unjailed node is removed and its bonded stake freed.
use anchor_lang::prelude::*;

use crate::errors::GpunetError;
use crate::events::NodeDeregistered;
use crate::state::*;

#[derive(Accounts)]
pub struct DeregisterNode<'info> {
    #[account(mut)]
    pub authority: Signer<'info>,
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

impl<'info> DeregisterNode<'info> {
    pub fn validate(&self) -> Result<()> {
        require!(self.node.gpus_leased == 0, GpunetError::NodeLeased);
        // A jailed node cannot escape its jail by re-registering.
        require!(!self.node.jailed, GpunetError::NodeJailed);
        Ok(())
    }

    #[access_control(ctx.accounts.validate())]
    pub fn handler(ctx: Context<Self>) -> Result<()> {
        let released = ctx.accounts.node.bonded_stake;
        let provider = &mut ctx.accounts.provider;
        provider.bonded = provider.bonded.checked_sub(released).ok_or(GpunetError::ArithmeticOverflow)?;
        provider.node_count = provider.node_count.checked_sub(1).ok_or(GpunetError::ArithmeticOverflow)?;
        emit!(NodeDeregistered { node: ctx.accounts.node.key(), provider: provider.key(), released_stake: released });
        Ok(())
    }
}
