//! `slash_provider`: an attester takes the configured fraction of a provider's stake for a
//! fault of one of its nodes, and jails that node. A `FailedVerification` also clears the node's
//! verification (it must pass a new one, once unjailed, wherever the config requires it).
//!
//! The fraction applies to the stake at risk for the fault: the provider's own (active and
//! unbonding) and, for a malicious fault (failed verification, invalid usage), its pool's
//! delegated stake too: the active, and the unbonding cohorts that began after the fault. It is
//! taken in order from the supplier's unclaimed rewards, its own stake (active first), then the
//! delegators pro rata; a liveness fault (missed heartbeats) never reaches delegated stake. What
//! one provider loses in an epoch is capped by the staking config's `slash_cap_bps`. Each piece of evidence slashes once (its
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
#[instruction(fault: FaultKind, evidence_hash: [u8; 32], fault_at: i64)]
pub struct SlashProvider<'info> {
    #[account(mut)]
    pub attester: Signer<'info>,
    #[account(seeds = [SEED_CONFIG], bump = config.bump)]
    pub config: Box<Account<'info, Config>>,
    /// CHECK: the staking config's address, always passed: read when the deployment has configured
    /// staking (its epochs and per-epoch cap apply), else no cap applies and every slash is epoch 0's.
    #[account(seeds = [SEED_STAKING], bump)]
    pub staking: UncheckedAccount<'info>,
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
    /// The provider's pool, required when it has one. The cohorts of it that the fault reaches
    /// follow as remaining accounts (writable, in the pool's order).
    #[account(mut, seeds = [SEED_POOL, provider.key().as_ref()], bump = pool.bump)]
    pub pool: Option<Box<Account<'info, Pool>>>,
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

    /// The pool's cohorts the fault reaches, from the remaining accounts: exactly those still
    /// listed (unmatured) that began unbonding after the fault, in the pool's order.
    fn cohorts_reached(
        &self,
        pool: &Pool,
        fault_at: i64,
        remaining: &'info [AccountInfo<'info>],
    ) -> Result<Vec<Account<'info, Cohort>>> {
        let provider = self.provider.key();
        let expected: Vec<&CohortRef> = pool.cohort_list().iter().filter(|c| c.starts_at > fault_at).collect();
        require_eq!(expected.len(), remaining.len(), GpunetError::CohortsMismatch);
        expected
            .iter()
            .zip(remaining)
            .map(|(cohort, info)| {
                let (address, _) = Pubkey::find_program_address(
                    &[SEED_COHORT, provider.as_ref(), &cohort.exit_epoch.to_le_bytes()],
                    &crate::ID,
                );
                require_keys_eq!(info.key(), address, GpunetError::CohortsMismatch);
                require!(info.is_writable, GpunetError::CohortsMismatch);
                Account::<Cohort>::try_from(info)
            })
            .collect()
    }

    pub fn handler(
        ctx: Context<'_, '_, 'info, 'info, Self>,
        fault: FaultKind,
        evidence_hash: [u8; 32],
        fault_at: i64,
    ) -> Result<()> {
        let now = Clock::get()?.unix_timestamp;
        let a = &ctx.accounts;
        require!(a.config.is_attester(a.attester.key), GpunetError::NotAttester);
        require!(!a.node.jailed, GpunetError::NodeJailed);
        require!(a.provider.has_pool == a.pool.is_some(), GpunetError::PoolMissing);
        require!(fault_at <= now, GpunetError::InvalidFaultTime);
        // Stake that began unbonding before the oldest time evidence may still land is withdrawable
        // or matured: an older (or unknown, 0) fault time reaches exactly what that time reaches.
        let fault_at = fault_at.max(now.saturating_sub(a.config.deregistered_bond_seconds()));
        let client_bound = a.client_bound(now)?;
        let staking = if a.staking.owner == &crate::ID {
            Some(Staking::try_deserialize(&mut &a.staking.try_borrow_data()?[..])?)
        } else {
            None
        };
        let now_epoch = staking.as_ref().map_or(0, |s| s.epoch_at(now));
        let slash_cap_bps = staking.as_ref().map_or(BPS_DENOMINATOR as u16, |s| s.slash_cap_bps);
        let malicious = fault != FaultKind::MissedHeartbeats;

        // the stake at risk: own always; delegated (active, and cohorts begun after the fault) for a malicious fault
        let mut cohorts = Vec::new();
        let mut rewards = 0;
        if let Some(pool) = ctx.accounts.pool.as_mut() {
            pool.roll(now_epoch, ctx.accounts.provider.delegated_shares)?;
            pool.drop_matured(now);
            rewards = pool.provider_rewards;
        }
        let a = &ctx.accounts;
        if let (Some(pool), true) = (a.pool.as_ref(), malicious) {
            cohorts = a.cohorts_reached(pool, fault_at, ctx.remaining_accounts)?;
        } else {
            require!(ctx.remaining_accounts.is_empty(), GpunetError::CohortsMismatch);
        }
        let mut delegated_stakes = vec![if malicious { a.provider.delegated } else { 0 }];
        delegated_stakes.extend(cohorts.iter().map(|c| c.stake));
        let delegated = delegated_stakes
            .iter()
            .try_fold(0u64, |sum, s| sum.checked_add(*s))
            .ok_or(GpunetError::ArithmeticOverflow)?;
        let own = a.provider.own_stake().ok_or(GpunetError::ArithmeticOverflow)?;
        let at_risk = own.checked_add(delegated).ok_or(GpunetError::ArithmeticOverflow)?;

        // at most `slash_cap_bps` of what was at risk when the epoch's slashes began
        let slashed_before = if a.provider.slash_epoch == now_epoch { a.provider.slashed_in_epoch } else { 0 };
        let cap_base = at_risk.checked_add(slashed_before).ok_or(GpunetError::ArithmeticOverflow)?;
        let cap = math::bps_of(cap_base, slash_cap_bps).ok_or(GpunetError::ArithmeticOverflow)?;
        let amount = math::bps_of(at_risk, a.config.slash_bps[fault.index()])
            .ok_or(GpunetError::ArithmeticOverflow)?
            .min(cap.saturating_sub(slashed_before));
        let sources = math::slash_sources(amount, rewards, own, delegated);
        let taken = sources.total().ok_or(GpunetError::ArithmeticOverflow)?;
        let split =
            math::slash(taken, a.config.slash_client_share_bps, client_bound).ok_or(GpunetError::ArithmeticOverflow)?;
        let parts = math::pro_rata(sources.delegated, &delegated_stakes).ok_or(GpunetError::ArithmeticOverflow)?;

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
        if let Some(pool) = ctx.accounts.pool.as_mut() {
            pool.provider_rewards -= sources.rewards;
        }
        for (cohort, part) in cohorts.iter_mut().zip(&parts[1..]) {
            cohort.stake -= part;
            cohort.exit(&crate::ID)?;
        }

        let provider = &mut ctx.accounts.provider;
        let from_active = sources.own.min(provider.staked);
        provider.staked -= from_active;
        provider.unbonding =
            provider.unbonding.checked_sub(sources.own - from_active).ok_or(GpunetError::ArithmeticOverflow)?;
        provider.delegated -= parts[0];
        provider.delegated_unbonding = provider
            .delegated_unbonding
            .checked_sub(sources.delegated - parts[0])
            .ok_or(GpunetError::ArithmeticOverflow)?;
        provider.slashed = provider.slashed.checked_add(taken).ok_or(GpunetError::ArithmeticOverflow)?;
        provider.slash_epoch = now_epoch;
        provider.slashed_in_epoch = slashed_before.checked_add(taken).ok_or(GpunetError::ArithmeticOverflow)?;

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
        evidence.fault_at = fault_at;
        evidence.bump = ctx.bumps.evidence;
        emit!(ProviderSlashed {
            provider: provider.key(),
            node: node.key(),
            attester,
            fault,
            evidence_hash,
            amount: taken,
            to_treasury: split.to_treasury,
            to_client: split.to_client,
            lease,
            jail_ends_at,
            fault_at,
            from_rewards: sources.rewards,
            from_own: sources.own,
            from_delegated: sources.delegated,
        });
        Ok(())
    }
}
