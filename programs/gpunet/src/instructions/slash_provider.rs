//! `slash_provider`: an attester takes the configured fraction of a provider's stake for a
//! fault of one of its nodes, and jails that node.
//!
//! The fraction applies to all the provider's stake in the vault, active first, then
//! unbonding (unbonding stake stays slashable). When the fault hurt a lease, passing the
//! lease and its client's token account sends the client its configured share.
use anchor_lang::prelude::*;
use anchor_spl::token::{Token, TokenAccount};

use crate::errors::GpunetError;
use crate::events::ProviderSlashed;
use crate::math;
use crate::state::*;
use crate::vault;

#[derive(Accounts)]
pub struct SlashProvider<'info> {
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
    #[account(seeds = [SEED_LEASE, lease.client.as_ref(), lease.lease_id.to_le_bytes().as_ref()], bump = lease.bump)]
    pub lease: Option<Box<Account<'info, Lease>>>,
    #[account(mut, token::mint = config.io_mint)]
    pub client_tokens: Option<Box<Account<'info, TokenAccount>>>,
    pub token_program: Program<'info, Token>,
}

impl<'info> SlashProvider<'info> {
    pub fn validate(&self) -> Result<()> {
        require!(self.config.is_attester(self.attester.key), GpunetError::NotAttester);
        match (&self.lease, &self.client_tokens) {
            (None, None) => Ok(()),
            (Some(lease), Some(client_tokens)) => {
                require!(lease.assignment_index(&self.node.key()).is_some(), GpunetError::NodeNotInLease);
                require_keys_eq!(client_tokens.owner, lease.client, GpunetError::WrongTokenOwner);
                Ok(())
            }
            _ => err!(GpunetError::AccountMismatch),
        }
    }

    #[access_control(ctx.accounts.validate())]
    pub fn handler(ctx: Context<Self>, fault: FaultKind, evidence_hash: [u8; 32]) -> Result<()> {
        let a = &ctx.accounts;
        let stake = a.provider.vault_balance().ok_or(GpunetError::ArithmeticOverflow)?;
        let split = math::slash(
            stake,
            a.config.slash_bps[fault.index()],
            a.config.slash_client_share_bps,
            a.client_tokens.is_some(),
        )
        .ok_or(GpunetError::ArithmeticOverflow)?;

        let authority_key = a.provider.authority;
        let seeds: &[&[u8]] = &[SEED_PROVIDER, authority_key.as_ref(), &[a.provider.bump]];
        let authority = a.provider.to_account_info();
        vault::pay_out(&a.token_program, &a.stake_vault, &a.treasury, authority.clone(), seeds, split.to_treasury)?;
        if let Some(client_tokens) = &a.client_tokens {
            vault::pay_out(&a.token_program, &a.stake_vault, client_tokens, authority, seeds, split.to_client)?;
        }

        let now = Clock::get()?.unix_timestamp;
        let jail_ends_at = now.checked_add(a.config.jail_seconds).ok_or(GpunetError::ArithmeticOverflow)?;
        let lease = a.lease.as_ref().map(|l| l.key());
        let attester = a.attester.key();

        let provider = &mut ctx.accounts.provider;
        let from_active = split.amount.min(provider.staked);
        provider.staked -= from_active;
        provider.unbonding = provider
            .unbonding
            .checked_sub(split.amount - from_active)
            .ok_or(GpunetError::ArithmeticOverflow)?;
        provider.slashed = provider.slashed.checked_add(split.amount).ok_or(GpunetError::ArithmeticOverflow)?;

        let node = &mut ctx.accounts.node;
        node.jailed = true;
        node.jail_ends_at = jail_ends_at;
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
