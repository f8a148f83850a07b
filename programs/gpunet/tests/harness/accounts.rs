//! PDAs and the actors of a test story (suppliers, nodes, clients, leases).
use anchor_lang::prelude::Pubkey;
use solana_keypair::Keypair;

use gpunet::state::*;

pub fn config_pda() -> Pubkey {
    Pubkey::find_program_address(&[SEED_CONFIG], &gpunet::ID).0
}

pub fn provider_pda(authority: &Pubkey) -> Pubkey {
    Pubkey::find_program_address(&[SEED_PROVIDER, authority.as_ref()], &gpunet::ID).0
}

pub fn stake_vault_pda(provider: &Pubkey) -> Pubkey {
    Pubkey::find_program_address(&[SEED_STAKE_VAULT, provider.as_ref()], &gpunet::ID).0
}

pub fn node_pda(node_key: &Pubkey) -> Pubkey {
    Pubkey::find_program_address(&[SEED_NODE, node_key.as_ref()], &gpunet::ID).0
}

pub fn lease_pda(client: &Pubkey, lease_id: u64) -> Pubkey {
    Pubkey::find_program_address(&[SEED_LEASE, client.as_ref(), &lease_id.to_le_bytes()], &gpunet::ID).0
}

pub fn evidence_pda(evidence_hash: &[u8; 32]) -> Pubkey {
    Pubkey::find_program_address(&[SEED_EVIDENCE, evidence_hash], &gpunet::ID).0
}

pub fn lease_vault_pda(lease: &Pubkey) -> Pubkey {
    Pubkey::find_program_address(&[SEED_LEASE_VAULT, lease.as_ref()], &gpunet::ID).0
}

/// A GPU supplier: its wallet, IO token account, provider account and stake vault.
pub struct Supplier {
    pub wallet: Keypair,
    pub tokens: Pubkey,
    pub provider: Pubkey,
    pub vault: Pubkey,
}

/// A registered node and its signing key.
pub struct GpuNode {
    pub key: Keypair,
    pub node: Pubkey,
    pub provider: Pubkey,
    /// The supplier's IO token account, where settlements pay.
    pub payout_tokens: Pubkey,
}

/// An AI developer with an IO token account.
pub struct Client {
    pub wallet: Keypair,
    pub tokens: Pubkey,
}

/// An opened lease.
#[derive(Clone, Copy, Debug)]
pub struct LeaseRef {
    pub client: Pubkey,
    pub id: u64,
    pub lease: Pubkey,
    pub vault: Pubkey,
}

impl LeaseRef {
    pub fn new(client: Pubkey, id: u64) -> Self {
        let lease = lease_pda(&client, id);
        Self { client, id, lease, vault: lease_vault_pda(&lease) }
    }
}

pub const H100: u16 = 1;
pub const RTX4090: u16 = 2;
pub const EU: u16 = 1;
pub const US: u16 = 2;

/// An 8 x H100 80 GiB node in the EU at 2 IO per GPU-hour.
pub fn h100_spec(gpu_count: u8) -> NodeSpec {
    NodeSpec {
        gpu_model: H100,
        gpu_count,
        vram_gb: 80,
        region: EU,
        price_per_gpu_hour: 2 * crate::harness::IO,
        inventory_hash: [7; 32],
    }
}

/// Any model and region, at most 3 IO per GPU-hour, for `hours`.
pub fn terms(gpu_count: u8, hours: i64) -> LeaseTerms {
    LeaseTerms {
        gpu_model: ANY,
        min_vram_gb: 24,
        gpu_count,
        region: ANY,
        max_price_per_gpu_hour: 3 * crate::harness::IO,
        duration_seconds: hours * 3_600,
    }
}
