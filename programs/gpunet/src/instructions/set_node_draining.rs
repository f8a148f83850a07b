//! `set_node_draining`: a provider announces maintenance of its node (`draining = true`) or ends it.
//!
//! A draining node takes no new shares (`assign_lease` and `reassign_lease` refuse it as a
//! target), and an attester may move the shares it holds to other nodes without a slash: the
//! supplier said so in advance, so the move is graceful, not a fault. The node keeps billing its
//! shares until they move. Once it holds nothing it can be deregistered as usual. Setting the
//! flag it already has is accepted (a retried command is not an error) and changes nothing else.
use anchor_lang::prelude::*;

use crate::errors::GpunetError;
use crate::events::NodeDrainingSet;
use crate::state::*;

#[derive(Accounts)]
pub struct SetNodeDraining<'info> {
    pub authority: Signer<'info>,
    #[account(seeds = [SEED_PROVIDER, authority.key().as_ref()], bump = provider.bump, has_one = authority)]
    pub provider: Account<'info, Provider>,
    #[account(
        mut, seeds = [SEED_NODE, node.node_key.as_ref()], bump = node.bump,
        has_one = provider @ GpunetError::NotNodeProvider
    )]
    pub node: Account<'info, Node>,
}

impl<'info> SetNodeDraining<'info> {
    pub fn handler(ctx: Context<Self>, draining: bool) -> Result<()> {
        let node = &mut ctx.accounts.node;
        node.draining = draining;
        emit!(NodeDrainingSet { node: node.key(), provider: node.provider, draining });
        Ok(())
    }
}
