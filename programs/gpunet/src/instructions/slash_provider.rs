//! `slash_provider`: an attester takes the configured fraction of a provider's stake for a
//! fault of one of its nodes, and jails that node. A `FailedVerification` also clears the node's
//! verification (it must pass a new one, once unjailed, wherever the config requires it).
//!
//! The fraction applies to all the provider's stake in the vault, active first, then
//! unbonding (unbonding stake stays slashable). Each piece of evidence slashes once (its
//! hash becomes an `Evidence` PDA), and a jailed node is not slashed again until it is
//! unjailed. When the fault hurt a lease that is still live (active, or closing within its
//! settlement window) and the node holds a share of it now, passing the lease and its
//! client's token account sends the client its configured share, at most what the share was
//! worth over the time it actually ran (to now, or to the lease's close) and what the client
//! still has in the lease (its deposits less its refunds), less what the lease was already
//! compensated; the rest goes to the treasury. The share must be the slashed provider's.
use anchor_lang::prelude::*;
use anchor_spl::token::{Token, TokenAccount};

use crate::errors::GpunetError;
use crate::events::ProviderSlashed;
use crate::math;
use crate::state::*;
use crate::vault;

#[derive(Accounts)]
#[instruction(fault: FaultKind, evidence_hash: [u8; 32])]
pub struct SlashProvider<'info> {
    #[account(mut)]
    pub attester: Signer<'info>,
    #[account(seeds = [SEED_CONFIG], bump = config.bump)]
    pub config: Box<Account<'info, Config>>,
    #[account(mut, seeds = [SEED_NODE, node.node_key.as_ref()], bump = node.bump)]
    pub node: Box<Account<'info, Node>>,
    #[account(mut, address = node.provider @ GpunetError::AccountMismatch)]
    pub provider: Box<Account<'info, Provider>>,
    #[account(mut, seeds = [SEED_STAKE_VAULT, provider.key().as_ref()], bump = provider.vault_bump)]
    pub stake_vault: Box<Account<'info, TokenAccount>>,
    #[account(mut, address = config.treasury @ GpunetError::WrongTreasury)]
    pub treasury: Box<Account<'info, TokenAccount>>,
    /// Fails to initialise when this evidence was used before.
    #[account(
        init, payer = attester, space = 8 + Evidence::INIT_SPACE,
        seeds = [SEED_EVIDENCE, evidence_hash.as_ref()], bump
    )]
    pub evidence: Box<Account<'info, Evidence>>,
    #[account(mut, seeds = [SEED_LEASE, lease.client.as_ref(), lease.lease_id.to_le_bytes().as_ref()], bump = lease.bump)]
    pub lease: Option<Box<Account<'info, Lease>>>,
    #[account(mut, token::mint = config.io_mint)]
    pub client_tokens: Option<Box<Account<'info, TokenAccount>>>,
    pub token_program: Program<'info, Token>,
    pub system_program: Program<'info, System>,
}

impl<'info> SlashProvider<'info> {
    /// The most the affected lease's client may still receive (`None`: no client share).
    fn client_bound(&self, now: i64) -> Result<Option<u64>> {
        match (&self.lease, &self.client_tokens) {
            (None, None) => Ok(None),
            (Some(lease), Some(client_tokens)) => {
                let live = match lease.status {
                    LeaseStatus::Active => true,
                    LeaseStatus::Closing => now <= lease.settle_deadline,
                    LeaseStatus::Open | LeaseStatus::Closed => false,
                };
                require!(live, GpunetError::LeaseNotLive);
                let index = lease.assignment_index(&self.node.key()).ok_or(GpunetError::NodeNotInLease)?;
                let share = &lease.assignments[index];
                // The node's address outlives its owner: a share assigned to the provider that
                // deregistered it is not this provider's fault to pay for.
                require_keys_eq!(share.provider, self.provider.key(), GpunetError::NodeNotInLease);
                require_keys_eq!(client_tokens.owner, lease.client, GpunetError::WrongTokenOwner);
                // What the lease actually held, not what it was sized for: the share's worth over
                // the time it has run (to now, or to the close), and never more than the client
                // still has in the lease (deposits not refunded). A lease closed at once holds nothing.
                let billing_end = lease.billing_end().ok_or(GpunetError::LeaseNotLive)?;
                let until = billing_end.min(now);
                let worth = math::owed_at_most(share.price_per_gpu_hour, share.gpus, share.assigned_at, until)
                    .ok_or(GpunetError::ArithmeticOverflow)?;
                let at_risk = lease.deposited.checked_sub(lease.refunded).ok_or(GpunetError::ArithmeticOverflow)?;
                Ok(Some(worth.min(at_risk).saturating_sub(lease.compensated)))
            }
            _ => err!(GpunetError::AccountMismatch),
        }
    }

    pub fn handler(ctx: Context<Self>, fault: FaultKind, evidence_hash: [u8; 32]) -> Result<()> {
        let now = Clock::get()?.unix_timestamp;
        let a = &ctx.accounts;
        require!(a.config.is_attester(a.attester.key), GpunetError::NotAttester);
        require!(!a.node.jailed, GpunetError::NodeJailed);
        let client_bound = a.client_bound(now)?;

        let stake = a.provider.vault_balance().ok_or(GpunetError::ArithmeticOverflow)?;
        let split =
            math::slash(stake, a.config.slash_bps[fault.index()], a.config.slash_client_share_bps, client_bound)
                .ok_or(GpunetError::ArithmeticOverflow)?;

        let authority_key = a.provider.authority;
        let seeds: &[&[u8]] = &[SEED_PROVIDER, authority_key.as_ref(), &[a.provider.bump]];
        let authority = a.provider.to_account_info();
        vault::pay_out(&a.token_program, &a.stake_vault, &a.treasury, authority.clone(), seeds, split.to_treasury)?;
        if let Some(client_tokens) = &a.client_tokens {
            vault::pay_out(&a.token_program, &a.stake_vault, client_tokens, authority, seeds, split.to_client)?;
        }

        let jail_ends_at = now.checked_add(a.config.jail_seconds).ok_or(GpunetError::ArithmeticOverflow)?;
        let attester = a.attester.key();

        let lease = match ctx.accounts.lease.as_mut() {
            Some(lease) => {
                lease.compensated =
                    lease.compensated.checked_add(split.to_client).ok_or(GpunetError::ArithmeticOverflow)?;
                Some(lease.key())
            }
            None => None,
        };

        let provider = &mut ctx.accounts.provider;
        let from_active = split.amount.min(provider.staked);
        provider.staked -= from_active;
        provider.unbonding =
            provider.unbonding.checked_sub(split.amount - from_active).ok_or(GpunetError::ArithmeticOverflow)?;
        provider.slashed = provider.slashed.checked_add(split.amount).ok_or(GpunetError::ArithmeticOverflow)?;

        let node = &mut ctx.accounts.node;
        node.jailed = true;
        node.jail_ends_at = jail_ends_at;
        if fault == FaultKind::FailedVerification {
            node.clear_verification();
        }
        let evidence = &mut ctx.accounts.evidence;
        evidence.node = node.key();
        evidence.fault = fault;
        evidence.slashed_at = now;
        evidence.bump = ctx.bumps.evidence;
        emit!(ProviderSlashed {
            provider: provider.key(),
            node: node.key(),
            attester,
            fault,
            evidence_hash,
            amount: split.amount,
            to_treasury: split.to_treasury,
            to_client: split.to_client,
            lease,
            jail_ends_at,
        });
        Ok(())
    }
}
