//! `register_node`: a provider registers a GPU machine, bonding stake for each of its GPUs.
use anchor_lang::prelude::*;

use crate::errors::GpunetError;
use crate::events::NodeRegistered;
use crate::state::*;

#[derive(Accounts)]
pub struct RegisterNode<'info> {
    #[account(mut)]
    pub authority: Signer<'info>,
    #[account(seeds = [SEED_CONFIG], bump = config.bump)]
    pub config: Account<'info, Config>,
    #[account(
        mut, seeds = [SEED_PROVIDER, authority.key().as_ref()], bump = provider.bump,
        has_one = authority
    )]
    pub provider: Account<'info, Provider>,
    /// The worker's signing key signs too, proving the provider holds it.
    pub node_key: Signer<'info>,
    #[account(
        init, payer = authority, space = 8 + Node::INIT_SPACE,
        seeds = [SEED_NODE, node_key.key().as_ref()], bump
    )]
    pub node: Account<'info, Node>,
    pub system_program: Program<'info, System>,
}

impl<'info> RegisterNode<'info> {
    fn bond(&self, spec: &NodeSpec) -> Result<u64> {
        self.config
            .min_stake_per_gpu
            .checked_mul(u64::from(spec.gpu_count))
            .ok_or_else(|| error!(GpunetError::ArithmeticOverflow))
    }

    pub fn validate(&self, spec: &NodeSpec) -> Result<()> {
        require!(spec.is_valid(), GpunetError::InvalidNodeSpec);
        require!(self.bond(spec)? <= self.provider.free_collateral(), GpunetError::InsufficientFreeStake);
        Ok(())
    }

    #[access_control(ctx.accounts.validate(&spec))]
    pub fn handler(ctx: Context<Self>, spec: NodeSpec) -> Result<()> {
        let bond = ctx.accounts.bond(&spec)?;
        let provider = &mut ctx.accounts.provider;
        provider.bonded = provider.bonded.checked_add(bond).ok_or(GpunetError::ArithmeticOverflow)?;
        provider.node_count = provider.node_count.checked_add(1).ok_or(GpunetError::ArithmeticOverflow)?;

        let node = &mut ctx.accounts.node;
        node.provider = provider.key();
        node.node_key = ctx.accounts.node_key.key();
        node.spec = spec.clone();
        node.bonded_stake = bond;
        node.bump = ctx.bumps.node;
        node.draining = false;
        emit!(NodeRegistered {
            node: node.key(),
            provider: node.provider,
            node_key: node.node_key,
            spec,
            bonded_stake: bond,
        });
        Ok(())
    }
}
