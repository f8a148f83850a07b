//! A GPU supplier's stake and bookkeeping.
use anchor_lang::prelude::*;

/// PDA `[SEED_PROVIDER, authority]`. Its stake sits in the vault PDA `[SEED_STAKE_VAULT, provider]`.
#[account]
#[derive(InitSpace)]
pub struct Provider {
    /// The supplier's wallet: stakes, registers nodes, receives payouts.
    pub authority: Pubkey,
    /// Active stake in the vault (excludes `unbonding`).
    pub staked: u64,
    /// Stake that backs registered nodes and cannot be unstaked.
    pub bonded: u64,
    /// Stake requested for withdrawal, still in the vault and still slashable.
    pub unbonding: u64,
    /// When `unbonding` may be withdrawn (unix seconds).
    pub unbonding_ends_at: i64,
    /// Total ever slashed from this provider.
    pub slashed: u64,
    /// Registered nodes.
    pub node_count: u32,
    /// Canonical bump of this PDA.
    pub bump: u8,
    /// Canonical bump of the stake vault PDA.
    pub vault_bump: u8,
}

impl Provider {
    /// Stake not backing any node: what may be unstaked or bonded to a new node.
    pub fn free_stake(&self) -> u64 {
        self.staked.saturating_sub(self.bonded)
    }

    /// A slash can leave a provider under-collateralised; its nodes get no new work until it restakes.
    pub fn is_collateralised(&self) -> bool {
        self.staked >= self.bonded
    }

    /// What the stake vault must hold.
    pub fn vault_balance(&self) -> Option<u64> {
        self.staked.checked_add(self.unbonding)
    }
}
