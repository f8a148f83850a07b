//! A GPU supplier's stake and bookkeeping.
use anchor_lang::prelude::*;

use crate::state::DELEGATION_CAP_BPS;

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
    // Co-staking (appended last so earlier fields keep their offsets). Delegated IO sits in the
    // same vault; `Pool` keeps its rewards.
    /// Whether the provider opened its pool (then every instruction that needs it must pass it).
    pub has_pool: bool,
    /// Active delegated stake: backs the pool's shares, counts as collateral up to the cap.
    pub delegated: u64,
    /// Shares of `delegated` held by delegators' positions.
    pub delegated_shares: u64,
    /// Delegated stake undelegated and not yet withdrawn (in `Cohort` accounts).
    pub delegated_unbonding: u64,
    /// The epoch of the last slash, and what slashes took in it (the per-epoch cap).
    pub slash_epoch: i64,
    pub slashed_in_epoch: u64,
}

impl Provider {
    /// The most delegated stake the provider's own active stake allows (and counts as collateral).
    pub fn delegation_cap(&self) -> u64 {
        crate::math::bps_of(self.staked, DELEGATION_CAP_BPS as u16).unwrap_or(self.staked)
    }

    /// Own active stake plus delegated stake up to the cap: what may back nodes.
    pub fn collateral(&self) -> u64 {
        self.staked.saturating_add(self.delegated.min(self.delegation_cap()))
    }

    /// Collateral not backing any node: what may be bonded to a new node.
    pub fn free_collateral(&self) -> u64 {
        self.collateral().saturating_sub(self.bonded)
    }

    /// The delegators' part of `amount` of lease income or rewards: in proportion to the delegated
    /// stake counted (up to the cap) against it plus the own active stake, rounded down.
    pub fn delegators_part(&self, amount: u64) -> Option<u64> {
        let counted = self.delegated.min(self.delegation_cap());
        let stake = self.staked.checked_add(counted)?;
        if stake == 0 {
            return Some(0);
        }
        u64::try_from(u128::from(amount).checked_mul(u128::from(counted))? / u128::from(stake)).ok()
    }

    /// A slash can leave a provider under-collateralised; its nodes get no new work until it restakes.
    pub fn is_collateralised(&self) -> bool {
        self.collateral() >= self.bonded
    }

    /// The provider's own stake in the vault, active and unbonding.
    pub fn own_stake(&self) -> Option<u64> {
        self.staked.checked_add(self.unbonding)
    }

    /// Shares that `amount` more delegated IO buys, rounded down (1:1 in an empty pool).
    pub fn shares_for(&self, amount: u64) -> Option<u64> {
        if self.delegated_shares == 0 {
            return Some(amount);
        }
        let shares = u128::from(amount)
            .checked_mul(u128::from(self.delegated_shares))?
            .checked_div(u128::from(self.delegated))?;
        u64::try_from(shares).ok()
    }

    /// What `shares` of the active delegated stake are worth, rounded down (all of it for all).
    pub fn value_of(&self, shares: u64) -> Option<u64> {
        share_value(shares, self.delegated_shares, self.delegated)
    }
}

/// What `shares` out of `total_shares` of `stake` are worth, rounded down.
pub fn share_value(shares: u64, total_shares: u64, stake: u64) -> Option<u64> {
    if shares > total_shares {
        return None;
    }
    if total_shares == 0 {
        return Some(0);
    }
    let value = u128::from(shares).checked_mul(u128::from(stake))? / u128::from(total_shares);
    u64::try_from(value).ok()
}
