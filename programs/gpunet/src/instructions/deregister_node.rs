//! `deregister_node`: an idle, unjailed node stops taking leases. Its account and bonded stake
//! stay, and it stays slashable, for the unbonding period (at least the settlement window): a supplier about to be slashed (a
//! failed verification on its way, a fault found in its lease's settlement window) must not
//! escape by deregistering. `release_node` then frees the stake and closes the account.
use anchor_lang::prelude::*;

use crate::errors::GpunetError;
use crate::events::NodeDeregistered;
use crate::state::*;

#[derive(Accounts)]
pub struct DeregisterNode<'info> {
    #[account(mut)]
    pub authority: Signer<'info>,
    #[account(seeds = [SEED_PROVIDER, authority.key().as_ref()], bump = provider.bump, has_one = authority)]
    pub provider: Account<'info, Provider>,
    #[account(
        mut, seeds = [SEED_NODE, node.node_key.as_ref()], bump = node.bump,
        has_one = provider @ GpunetError::NotNodeProvider
    )]
    pub node: Account<'info, Node>,
}

impl<'info> DeregisterNode<'info> {
    pub fn validate(&self) -> Result<()> {
        require!(!self.node.is_deregistered(), GpunetError::NodeDeregistered);
        require!(self.node.gpus_leased == 0, GpunetError::NodeLeased);
        // A jailed node cannot escape its jail by re-registering.
        require!(!self.node.jailed, GpunetError::NodeJailed);
        Ok(())
    }

    #[access_control(ctx.accounts.validate())]
    pub fn handler(ctx: Context<Self>) -> Result<()> {
        let now = Clock::get()?.unix_timestamp;
        let node = &mut ctx.accounts.node;
        node.deregistered_at = now;
        emit!(NodeDeregistered {
            node: node.key(),
            provider: node.provider,
            bonded_stake: node.bonded_stake,
            deregistered_at: now,
        });
        Ok(())
    }
}
