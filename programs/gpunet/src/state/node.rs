//! A registered GPU machine.
use anchor_lang::prelude::*;

/// Requirements use 0 for "any" GPU model and "any" region.
#[constant]
pub const ANY: u16 = 0;
/// The most GPUs one node may register.
#[constant]
pub const MAX_GPUS_PER_NODE: u8 = 16;

/// The hardware a node offers, as registered by its provider.
#[derive(AnchorSerialize, AnchorDeserialize, Clone, Debug, PartialEq, Eq, InitSpace)]
pub struct NodeSpec {
    /// GPU model code (the SDK's table; never 0).
    pub gpu_model: u16,
    /// Number of GPUs on the node (1..=16).
    pub gpu_count: u8,
    /// Memory per GPU in GiB.
    pub vram_gb: u16,
    /// Region code (the SDK's table; never 0).
    pub region: u16,
    /// Asking price per GPU-hour in IO base units.
    pub price_per_gpu_hour: u64,
    /// SHA-256 of the node's NVML inventory, signed off-chain by the node key.
    pub inventory_hash: [u8; 32],
}

/// PDA `[SEED_NODE, node_key]`.
#[account]
#[derive(InitSpace)]
pub struct Node {
    /// The owning provider account (PDA).
    pub provider: Pubkey,
    /// The key the worker signs usage receipts with.
    pub node_key: Pubkey,
    /// The hardware and price on offer.
    pub spec: NodeSpec,
    /// GPUs currently assigned to leases.
    pub gpus_leased: u8,
    /// Stake bonded to this node at registration (released at deregistration).
    pub bonded_stake: u64,
    /// A jailed node gets no assignments.
    pub jailed: bool,
    /// When the provider may unjail the node (unix seconds).
    pub jail_ends_at: i64,
    /// Canonical bump of this PDA.
    pub bump: u8,
    /// Announced maintenance: its provider drains it, so it takes no new leases and the attester
    /// may move its shares away without a slash. Appended last so earlier fields keep their offsets.
    pub draining: bool,
    /// How the node's hardware was last verified by an attester (`record_verification`): 0 never
    /// (or cleared: a failed verification, a changed inventory); 1 against a simulated reference
    /// (local clusters only); 2 compute and memory verified on a real GPU; 3 reserved for
    /// confidential-computing attestation. The three verification fields are appended last so
    /// earlier fields keep their offsets.
    pub verification_tier: u8,
    /// Until when the verification holds (unix seconds; 0: none).
    pub verified_until: i64,
    /// Hash of the challenge evidence the attester keeps for that verification (zero: none).
    pub verification_evidence: [u8; 32],
    /// When its provider deregistered it (0: registered). A deregistered node takes no leases but
    /// its account and bonded stake stay, slashable, for the config's `deregistered_bond_seconds`
    /// (evidence of a fault it committed before may still be on its way); `release_node` then frees the
    /// stake and closes the account. Appended last so earlier fields keep their offsets.
    pub deregistered_at: i64,
}

impl Node {
    pub fn free_gpus(&self) -> u8 {
        self.spec.gpu_count.saturating_sub(self.gpus_leased)
    }

    /// Whether its provider deregistered it (it waits for `release_node`).
    pub fn is_deregistered(&self) -> bool {
        self.deregistered_at > 0
    }
}

impl Node {
    /// Whether the node may be assigned under a config requiring `min_tier` (0: nothing required):
    /// verified at that tier or above, and still valid at `now`.
    pub fn is_verified_for(&self, min_tier: u8, now: i64) -> bool {
        min_tier == 0 || (self.verification_tier >= min_tier && self.verified_until > now)
    }

    /// Forgets the node's verification: it must be verified again before it needs to be.
    pub fn clear_verification(&mut self) {
        self.verification_tier = 0;
        self.verified_until = 0;
        self.verification_evidence = [0; 32];
    }
}

impl NodeSpec {
    pub fn is_valid(&self) -> bool {
        self.gpu_model != ANY
            && (1..=MAX_GPUS_PER_NODE).contains(&self.gpu_count)
            && self.vram_gb > 0
            && self.region != ANY
            && self.price_per_gpu_hour > 0
    }
}

impl Node {
    /// Whether the node's hardware and price satisfy a lease's terms.
    pub fn meets(&self, terms: &crate::state::LeaseTerms) -> bool {
        let spec = &self.spec;
        (terms.gpu_model == ANY || terms.gpu_model == spec.gpu_model)
            && spec.vram_gb >= terms.min_vram_gb
            && (terms.region == ANY || terms.region == spec.region)
            && spec.price_per_gpu_hour <= terms.max_price_per_gpu_hour
    }
}
