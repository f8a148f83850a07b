//! `assign_lease`: an attester places an open lease on one or more qualifying nodes at once.
//!
//! `prices` are the prices per GPU-hour the placement was decided at, one per share: a node
//! whose supplier changed its price since is refused, so the client never pays a price raised
//! between the decision and the assignment.
//! Remaining accounts: for each share, the node account (writable) then its provider account.
use anchor_lang::prelude::*;

use crate::errors::GpunetError;
use crate::events::LeaseAssigned;
use crate::state::*;

#[derive(Accounts)]
pub struct AssignLease<'info> {
    pub attester: Signer<'info>,
    #[account(seeds = [SEED_CONFIG], bump = config.bump)]
    pub config: Account<'info, Config>,
    #[account(
        mut,
        seeds = [SEED_LEASE, lease.client.as_ref(), lease.lease_id.to_le_bytes().as_ref()],
        bump = lease.bump
    )]
    pub lease: Box<Account<'info, Lease>>,
}

/// Loads a node passed as a remaining account; the owner and type checks come with `Account`.
pub(crate) fn load_node<'info>(info: &'info AccountInfo<'info>) -> Result<Account<'info, Node>> {
    require!(info.is_writable, GpunetError::AccountMismatch);
    Account::try_from(info)
}

/// Checks that `node` (of `provider`) may take `gpus` GPUs of a lease with `terms` at `price` at
/// `now`, under `config`'s verification requirement.
pub(crate) fn check_candidate(
    node: &Account<Node>,
    provider: &Account<Provider>,
    terms: &LeaseTerms,
    gpus: u8,
    price: u64,
    config: &Config,
    now: i64,
) -> Result<()> {
    require_keys_eq!(node.provider, provider.key(), GpunetError::AccountMismatch);
    require_eq!(node.spec.price_per_gpu_hour, price, GpunetError::PriceChanged);
    require!(!node.is_deregistered(), GpunetError::NodeDeregistered);
    require!(!node.jailed, GpunetError::NodeJailed);
    // Its supplier announced maintenance: nothing new goes there (a move away from it is fine).
    require!(!node.draining, GpunetError::NodeDraining);
    require!(node.is_verified_for(config.min_verification_tier, now), GpunetError::NodeNotVerified);
    require!(provider.is_collateralised(), GpunetError::ProviderUndercollateralised);
    require!(node.meets(terms), GpunetError::NodeDoesNotQualify);
    require!(node.free_gpus() >= gpus, GpunetError::NotEnoughFreeGpus);
    Ok(())
}

/// Gives `gpus` of `node` to `lease` as its next assignment (a new epoch), starting its usage
/// clock at `now`.
pub(crate) fn take_gpus(lease: &mut Lease, node: &mut Account<Node>, gpus: u8, now: i64) -> Result<Assignment> {
    node.gpus_leased = node.gpus_leased.checked_add(gpus).ok_or(GpunetError::ArithmeticOverflow)?;
    node.exit(&crate::ID)?;
    lease.epochs = lease.epochs.checked_add(1).ok_or(GpunetError::ArithmeticOverflow)?;
    Ok(Assignment {
        node: node.key(),
        node_key: node.node_key,
        provider: node.provider,
        gpus,
        price_per_gpu_hour: node.spec.price_per_gpu_hour,
        epoch: lease.epochs,
        assigned_at: now,
        settled_until: now,
        receipt_gpu_seconds: 0,
        gpu_seconds: 0,
    })
}

impl<'info> AssignLease<'info> {
    pub fn validate(&self, gpus: &[u8], prices: &[u64]) -> Result<()> {
        require!(self.config.is_attester(self.attester.key), GpunetError::NotAttester);
        require!(self.lease.status == LeaseStatus::Open, GpunetError::LeaseNotOpen);
        let total: u16 = gpus.iter().map(|g| u16::from(*g)).sum();
        require!(
            (1..=usize::from(MAX_LEASE_NODES)).contains(&gpus.len())
                && gpus.iter().all(|g| *g > 0)
                && total == u16::from(self.lease.terms.gpu_count)
                && prices.len() == gpus.len(),
            GpunetError::InvalidAssignment
        );
        Ok(())
    }

    #[access_control(ctx.accounts.validate(&gpus, &prices))]
    pub fn handler(ctx: Context<'_, '_, 'info, 'info, Self>, gpus: Vec<u8>, prices: Vec<u64>) -> Result<()> {
        require!(ctx.remaining_accounts.len() == 2 * gpus.len(), GpunetError::InvalidAssignment);
        let now = Clock::get()?.unix_timestamp;
        let terms = ctx.accounts.lease.terms;
        let mut assignments = Vec::with_capacity(gpus.len());
        let shares = gpus.iter().copied().zip(prices.iter().copied());
        for (pair, (share, price)) in ctx.remaining_accounts.chunks_exact(2).zip(shares) {
            let mut node = load_node(&pair[0])?;
            let provider: Account<Provider> = Account::try_from(&pair[1])?;
            require!(assignments.iter().all(|a: &Assignment| a.node != node.key()), GpunetError::DuplicateNode);
            check_candidate(&node, &provider, &terms, share, price, &ctx.accounts.config, now)?;
            assignments.push(take_gpus(&mut ctx.accounts.lease, &mut node, share, now)?);
        }

        let lease = &mut ctx.accounts.lease;
        lease.assignments[..assignments.len()].copy_from_slice(&assignments);
        lease.node_count = assignments.len() as u8;
        lease.status = LeaseStatus::Active;
        lease.started_at = now;
        emit!(LeaseAssigned {
            lease: lease.key(),
            attester: ctx.accounts.attester.key(),
            assignments,
            started_at: now,
        });
        Ok(())
    }
}
