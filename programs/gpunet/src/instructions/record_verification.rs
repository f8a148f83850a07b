//! `record_verification`: an attester records that it verified a node's hardware.
//!
//! The attester challenged the node off chain (compute and memory, on a real GPU or against a
//! simulated reference) and keeps the challenge's evidence; the chain keeps the tier reached, until
//! when the verification holds and the hash of that evidence. Only the inventory the node
//! registered can be verified (`inventory_hash` must be the node's): a node whose provider changes
//! its inventory loses its verification (`update_node`), as does one slashed for
//! `FailedVerification`. A jailed node is not verified. A verification is valid from now until
//! `valid_until`, at most the config's `max_verification_seconds` ahead; a new one replaces the last.
//! While the config requires a tier (`min_verification_tier` > 0), only nodes verified at that tier
//! or above, and not expired, are assigned leases.
use anchor_lang::prelude::*;

use crate::errors::GpunetError;
use crate::events::NodeVerified;
use crate::state::*;

#[derive(Accounts)]
pub struct RecordVerification<'info> {
    pub attester: Signer<'info>,
    #[account(seeds = [SEED_CONFIG], bump = config.bump)]
    pub config: Account<'info, Config>,
    #[account(mut, seeds = [SEED_NODE, node.node_key.as_ref()], bump = node.bump)]
    pub node: Account<'info, Node>,
}

impl<'info> RecordVerification<'info> {
    pub fn validate(&self, tier: u8, valid_until: i64, inventory_hash: &[u8; 32]) -> Result<()> {
        require!(self.config.is_attester(self.attester.key), GpunetError::NotAttester);
        require!((1..=MAX_VERIFICATION_TIER).contains(&tier), GpunetError::InvalidVerificationTier);
        let now = Clock::get()?.unix_timestamp;
        let latest = now.checked_add(self.config.max_verification_seconds).ok_or(GpunetError::ArithmeticOverflow)?;
        require!(valid_until > now && valid_until <= latest, GpunetError::InvalidVerificationExpiry);
        require!(!self.node.jailed, GpunetError::NodeJailed);
        require!(*inventory_hash == self.node.spec.inventory_hash, GpunetError::InventoryMismatch);
        Ok(())
    }

    #[access_control(ctx.accounts.validate(tier, valid_until, &inventory_hash))]
    pub fn handler(
        ctx: Context<Self>,
        tier: u8,
        valid_until: i64,
        evidence_hash: [u8; 32],
        inventory_hash: [u8; 32],
    ) -> Result<()> {
        let node = &mut ctx.accounts.node;
        node.verification_tier = tier;
        node.verified_until = valid_until;
        node.verification_evidence = evidence_hash;
        emit!(NodeVerified {
            node: node.key(),
            node_key: node.node_key,
            provider: node.provider,
            tier,
            valid_until,
            evidence_hash,
        });
        Ok(())
    }
}
