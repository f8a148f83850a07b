//! `update_node`: a provider changes a node's region, price or inventory hash.
//! Running leases keep the price fixed at their assignment. A changed inventory hash clears the
//! node's verification: the hardware verified is no longer the hardware offered.
use anchor_lang::prelude::*;

use crate::errors::GpunetError;
use crate::events::NodeUpdated;
use crate::state::*;

#[derive(Accounts)]
pub struct UpdateNode<'info> {
    pub authority: Signer<'info>,
    #[account(seeds = [SEED_PROVIDER, authority.key().as_ref()], bump = provider.bump, has_one = authority)]
    pub provider: Account<'info, Provider>,
    #[account(
        mut, seeds = [SEED_NODE, node.node_key.as_ref()], bump = node.bump,
        has_one = provider @ GpunetError::NotNodeProvider
    )]
    pub node: Account<'info, Node>,
}

impl<'info> UpdateNode<'info> {
    pub fn handler(ctx: Context<Self>, region: u16, price_per_gpu_hour: u64, inventory_hash: [u8; 32]) -> Result<()> {
        require!(region != ANY && price_per_gpu_hour > 0, GpunetError::InvalidNodeSpec);
        let node = &mut ctx.accounts.node;
        node.spec.region = region;
        node.spec.price_per_gpu_hour = price_per_gpu_hour;
        if node.spec.inventory_hash != inventory_hash {
            node.clear_verification();
        }
        node.spec.inventory_hash = inventory_hash;
        emit!(NodeUpdated { node: node.key(), region, price_per_gpu_hour, inventory_hash });
        Ok(())
    }
}
