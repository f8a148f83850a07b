//! `reassign_lease`: a node of an active lease was lost; an attester moves its share to another node.
//!
//! The node must have been found lost on chain (slashed, so jailed), or be draining (its provider
//! announced maintenance, so the move is graceful and nobody is slashed): an attester cannot take
//! a healthy node's share away. The target may be neither jailed nor draining, and must be verified
//! where the config requires it. `expected_price` is the new node's price the move was
//! decided at; a different one is refused. A lease past its end is not moved (the new node would be
//! booked for time nobody can bill).
//! Usage the lost node delivered must be settled before: its receipts cannot be settled
//! once its share has moved. The new node's usage clock starts now, in a new epoch (so none of
//! its receipts from an earlier assignment to this lease counts).
use anchor_lang::prelude::*;

use crate::errors::GpunetError;
use crate::events::LeaseReassigned;
use crate::instructions::assign_lease::{check_candidate, take_gpus};
use crate::state::*;

#[derive(Accounts)]
pub struct ReassignLease<'info> {
    pub attester: Signer<'info>,
    #[account(seeds = [SEED_CONFIG], bump = config.bump)]
    pub config: Account<'info, Config>,
    #[account(
        mut,
        seeds = [SEED_LEASE, lease.client.as_ref(), lease.lease_id.to_le_bytes().as_ref()],
        bump = lease.bump
    )]
    pub lease: Box<Account<'info, Lease>>,
    #[account(mut, seeds = [SEED_NODE, from_node.node_key.as_ref()], bump = from_node.bump)]
    pub from_node: Box<Account<'info, Node>>,
    #[account(
        mut, seeds = [SEED_NODE, to_node.node_key.as_ref()], bump = to_node.bump,
        constraint = to_node.key() != from_node.key() @ GpunetError::DuplicateNode
    )]
    pub to_node: Box<Account<'info, Node>>,
    #[account(address = to_node.provider @ GpunetError::AccountMismatch)]
    pub to_provider: Box<Account<'info, Provider>>,
}

impl<'info> ReassignLease<'info> {
    pub fn validate(&self, expected_price: u64) -> Result<()> {
        require!(self.config.is_attester(self.attester.key), GpunetError::NotAttester);
        require!(self.lease.status == LeaseStatus::Active, GpunetError::LeaseNotActive);
        require!(self.from_node.jailed || self.from_node.draining, GpunetError::NodeNotLost);
        let ends_at = self.lease.ends_at().ok_or(GpunetError::ArithmeticOverflow)?;
        let now = Clock::get()?.unix_timestamp;
        require!(now < ends_at, GpunetError::LeaseExpired);
        let index = self.lease.assignment_index(&self.from_node.key()).ok_or(GpunetError::NodeNotInLease)?;
        require!(self.lease.assignment_index(&self.to_node.key()).is_none(), GpunetError::DuplicateNode);
        let gpus = self.lease.assignments[index].gpus;
        check_candidate(&self.to_node, &self.to_provider, &self.lease.terms, gpus, expected_price, &self.config, now)
    }

    #[access_control(ctx.accounts.validate(expected_price))]
    pub fn handler(ctx: Context<Self>, expected_price: u64) -> Result<()> {
        let now = Clock::get()?.unix_timestamp;
        let a = ctx.accounts;
        let index = a.lease.assignment_index(&a.from_node.key()).ok_or(GpunetError::NodeNotInLease)?;
        let gpus = a.lease.assignments[index].gpus;
        a.from_node.gpus_leased = a.from_node.gpus_leased.checked_sub(gpus).ok_or(GpunetError::ArithmeticOverflow)?;
        let assignment = take_gpus(&mut a.lease, &mut a.to_node, gpus, now)?;
        a.lease.assignments[index] = assignment;
        emit!(LeaseReassigned {
            lease: a.lease.key(),
            attester: a.attester.key(),
            from_node: a.from_node.key(),
            assignment,
        });
        Ok(())
    }
}
