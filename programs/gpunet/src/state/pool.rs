//! A provider's pool of delegated stake, its delegators' positions and their rewards.
//!
//! Delegated IO sits in the provider's stake vault beside the provider's own stake; the provider
//! account keeps the principal (`delegated`, `delegated_shares`), this account the rest. A
//! position holds shares: a slash lowers what a share is worth and never touches a position.
//!
//! Rewards are credited to a pool epoch by epoch, in order, and spread over the shares that were
//! in the pool when that epoch began (`eligible`): a position earns from the epoch after it was
//! opened through the epoch it was undelegated in, so delegating just before a credit earns
//! nothing for it. `acc` sums the reward per eligible share (×2^64) over the credited epochs, and
//! every credit leaves a `RewardIndex` with the sum through its epoch, which a position reads
//! once for the epoch before it began earning and once for the epoch it stopped.
//!
//! Lease income is shared the same way: `settle_usage` pays the delegators' part of a payout into
//! the stake vault and records it as income of the epoch it was paid in (`income`); that epoch's
//! credit spreads it, less commission, over the same eligible shares as its reward.
use anchor_lang::prelude::*;

use crate::errors::GpunetError;
use crate::state::{Schedule, MAX_COHORTS};

/// Entries of share history a pool keeps for epochs not yet credited.
pub const ELIGIBLE_HISTORY: usize = 16;

/// Epochs of lease income a pool keeps until they are credited. Every open pool has a leaf in every
/// epoch's root, cranked once the timelock passes, so two or three are in use; a pool whose credits
/// stall longer (no root for `INCOME_HISTORY` epochs of settlements) pays the delegators' part of
/// further income to the supplier rather than refuse a settlement.
pub const INCOME_HISTORY: usize = 8;

/// The delegators' part of the lease income paid in an epoch, commission not yet taken.
#[derive(AnchorSerialize, AnchorDeserialize, Clone, Copy, Debug, Default, PartialEq, Eq, InitSpace)]
pub struct EpochIncome {
    pub epoch: i64,
    pub amount: u64,
}

/// The pool's share count from an epoch on (each entry holds until the next one's epoch).
#[derive(AnchorSerialize, AnchorDeserialize, Clone, Copy, Debug, Default, PartialEq, Eq, InitSpace)]
pub struct EligibleShares {
    pub from_epoch: i64,
    pub shares: u64,
}

/// An unbonding cohort the pool still lists as slashable.
#[derive(AnchorSerialize, AnchorDeserialize, Clone, Copy, Debug, Default, PartialEq, Eq, InitSpace)]
pub struct CohortRef {
    pub exit_epoch: i64,
    /// Faults committed before this still slash the cohort.
    pub starts_at: i64,
    pub ends_at: i64,
}

/// PDA `[SEED_POOL, provider]`: opened by the provider before anyone may delegate to it, and
/// before it can earn rewards.
#[account]
#[derive(InitSpace)]
pub struct Pool {
    pub provider: Pubkey,
    /// The epoch the pool opened in (its first creditable epoch is the next one).
    pub opened_epoch: i64,
    /// Commission on the delegators' part of rewards, in basis points, by epoch.
    pub commission: Schedule,
    /// Reward per eligible share (×2^64) summed over the credited epochs.
    pub acc: u128,
    /// The last epoch credited or skipped (`opened_epoch` at first).
    pub credited_through: i64,
    /// The last epoch the pool was touched in (its share history is current through it).
    pub rolled_epoch: i64,
    pub eligible_len: u8,
    /// Share counts at the start of the epochs after `credited_through` (and the newest before).
    pub eligible: [EligibleShares; ELIGIBLE_HISTORY],
    /// The supplier's rewards not yet withdrawn: the first thing a slash takes.
    pub provider_rewards: u64,
    /// Rewards credited to delegators and not yet collected (with the rounding dust, which stays).
    pub delegator_rewards: u64,
    /// Lease income paid into the stake vault for epochs not yet credited: their sum, and by epoch
    /// (in order).
    pub income_pending: u64,
    pub income_len: u8,
    pub income: [EpochIncome; INCOME_HISTORY],
    /// The unbonding cohorts still slashable (unmatured), oldest first.
    pub cohort_len: u8,
    pub cohorts: [CohortRef; MAX_COHORTS as usize],
    pub bump: u8,
}

impl Pool {
    /// Brings the share history to `now_epoch` with the current share count. Every instruction
    /// that changes shares rolls first, so the count now is the count at the epoch's start.
    pub fn roll(&mut self, now_epoch: i64, shares: u64) -> Result<()> {
        if now_epoch <= self.rolled_epoch {
            return Ok(());
        }
        // the count changed, if at all, during `rolled_epoch`: it holds from the epoch after
        let from_epoch = self.rolled_epoch + 1;
        self.rolled_epoch = now_epoch;
        let len = usize::from(self.eligible_len);
        if len > 0 && self.eligible[len - 1].shares == shares {
            return Ok(());
        }
        // entries superseded at or before the last credited epoch are no longer needed
        let first_needed = self.credited_through.saturating_add(1);
        let drop = (0..len.saturating_sub(1)).take_while(|&i| self.eligible[i + 1].from_epoch <= first_needed).count();
        self.eligible.copy_within(drop..len, 0);
        let len = len - drop;
        require!(len < ELIGIBLE_HISTORY, GpunetError::PoolHistoryFull);
        self.eligible[len] = EligibleShares { from_epoch, shares };
        self.eligible_len = (len + 1) as u8;
        Ok(())
    }

    /// Shares in the pool when `epoch` began (`epoch` after `credited_through`, before now;
    /// `shares_now` is the count now, the count at the start of every epoch after `rolled_epoch`).
    pub fn eligible_at(&self, epoch: i64, shares_now: u64) -> u64 {
        if epoch > self.rolled_epoch {
            return shares_now;
        }
        self.eligible[..usize::from(self.eligible_len)]
            .iter()
            .rev()
            .find(|e| e.from_epoch <= epoch)
            .map_or(0, |e| e.shares)
    }

    /// Credits `epoch` (the one after `credited_through`): the supplier's amount goes to the
    /// supplier; the delegators' amount and the epoch's lease income, less the commission in force
    /// in that epoch, are spread over the epoch's eligible shares (all to the supplier when there
    /// were none). Returns what went to the supplier, to the delegators, and the eligible shares.
    pub fn credit(
        &mut self,
        epoch: i64,
        supplier_amount: u64,
        delegators_amount: u64,
        shares_now: u64,
    ) -> Result<(u64, u64, u64, u64)> {
        let overflow = || error!(GpunetError::ArithmeticOverflow);
        let income = self.take_income(epoch);
        let delegators = delegators_amount.checked_add(income).ok_or_else(overflow)?;
        let eligible = self.eligible_at(epoch, shares_now);
        let (to_supplier, to_delegators) = if eligible == 0 {
            (supplier_amount.checked_add(delegators).ok_or_else(overflow)?, 0)
        } else {
            let bps = u16::try_from(self.commission.at(epoch).unwrap_or(0)).map_err(|_| overflow())?;
            let commission = crate::math::bps_of(delegators, bps).ok_or_else(overflow)?;
            let share = delegators - commission;
            self.acc =
                self.acc.checked_add(reward_per_share(share, eligible).ok_or_else(overflow)?).ok_or_else(overflow)?;
            (supplier_amount.checked_add(commission).ok_or_else(overflow)?, share)
        };
        self.provider_rewards = self.provider_rewards.checked_add(to_supplier).ok_or_else(overflow)?;
        self.delegator_rewards = self.delegator_rewards.checked_add(to_delegators).ok_or_else(overflow)?;
        self.income_pending = self.income_pending.checked_sub(income).ok_or_else(overflow)?;
        self.credited_through = epoch;
        Ok((income, to_supplier, to_delegators, eligible))
    }

    /// Records `amount` of income for `epoch` (after `credited_through`). False when the pool
    /// already keeps `INCOME_HISTORY` other epochs: the caller pays the amount elsewhere.
    pub fn add_income(&mut self, epoch: i64, amount: u64) -> Result<bool> {
        let len = usize::from(self.income_len);
        let at = self.income[..len].iter().position(|e| e.epoch >= epoch).unwrap_or(len);
        if at < len && self.income[at].epoch == epoch {
            self.income[at].amount =
                self.income[at].amount.checked_add(amount).ok_or(GpunetError::ArithmeticOverflow)?;
        } else if len == INCOME_HISTORY {
            return Ok(false);
        } else {
            self.income.copy_within(at..len, at + 1);
            self.income[at] = EpochIncome { epoch, amount };
            self.income_len += 1;
        }
        self.income_pending = self.income_pending.checked_add(amount).ok_or(GpunetError::ArithmeticOverflow)?;
        Ok(true)
    }

    /// Removes and returns `epoch`'s income (0 if none): entries are in order and none is before it.
    fn take_income(&mut self, epoch: i64) -> u64 {
        let len = usize::from(self.income_len);
        if len == 0 || self.income[0].epoch != epoch {
            return 0;
        }
        let amount = self.income[0].amount;
        self.income.copy_within(1..len, 0);
        self.income[len - 1] = EpochIncome::default();
        self.income_len -= 1;
        amount
    }

    pub fn cohort_list(&self) -> &[CohortRef] {
        &self.cohorts[..usize::from(self.cohort_len)]
    }

    /// Adds a cohort to the slashable ones (at most once).
    pub fn add_cohort(&mut self, cohort: CohortRef) -> Result<()> {
        if self.cohort_list().iter().any(|c| c.exit_epoch == cohort.exit_epoch) {
            return Ok(());
        }
        let len = usize::from(self.cohort_len);
        require!(len < usize::from(MAX_COHORTS), GpunetError::TooManyCohorts);
        self.cohorts[len] = cohort;
        self.cohort_len += 1;
        Ok(())
    }

    /// Drops the cohorts whose unbonding has ended by `now`: matured stake is not slashable.
    pub fn drop_matured(&mut self, now: i64) {
        let mut kept = [CohortRef::default(); MAX_COHORTS as usize];
        let mut len = 0;
        for cohort in self.cohort_list().iter().filter(|c| c.ends_at > now) {
            kept[len] = *cohort;
            len += 1;
        }
        self.cohorts = kept;
        self.cohort_len = len as u8;
    }
}

/// PDA `[SEED_COHORT, provider, exit_epoch]`: the stake undelegated from a pool in one epoch,
/// unbonding together. Its shares have their own value: a slash for a fault committed before
/// `starts_at` lowers it.
#[account]
#[derive(InitSpace)]
pub struct Cohort {
    pub provider: Pubkey,
    pub exit_epoch: i64,
    /// When its stake stopped backing the pool (the end of `exit_epoch`): faults before this
    /// still slash it.
    pub starts_at: i64,
    /// When its stake may be withdrawn.
    pub ends_at: i64,
    pub shares: u64,
    pub stake: u64,
    pub bump: u8,
}

/// PDA `[SEED_DELEGATION, provider, delegator, nonce]`: one delegation, from its opening to its
/// withdrawal. Its shares do not change: a wallet delegating again opens another position.
#[account]
#[derive(InitSpace)]
pub struct Delegation {
    pub provider: Pubkey,
    pub delegator: Pubkey,
    pub nonce: u64,
    /// Shares held (they earn through `exit_epoch`; while active they back the pool).
    pub shares: u64,
    /// The first epoch the shares earn in (the epoch after the delegation).
    pub since: i64,
    /// The epoch it was undelegated in (`i64::MAX` while active).
    pub exit_epoch: i64,
    /// Shares of `Cohort[exit_epoch]` not yet withdrawn.
    pub cohort_shares: u64,
    /// Rewards are collected through this epoch (`since - 1` at first).
    pub reward_epoch: i64,
    /// `acc` through `reward_epoch` (unknown until that epoch is credited: `reward_acc_known`).
    pub reward_acc: u128,
    pub reward_acc_known: bool,
    pub bump: u8,
}

impl Delegation {
    pub fn is_active(&self) -> bool {
        self.exit_epoch == i64::MAX
    }

    /// The last epoch the position earns in.
    pub fn last_earning_epoch(&self) -> i64 {
        self.exit_epoch
    }
}

/// PDA `[SEED_REWARD_INDEX, provider, epoch]`: the pool's `acc` once `epoch` was credited.
#[account]
#[derive(InitSpace)]
pub struct RewardIndex {
    pub acc: u128,
    pub bump: u8,
}

/// `shares × acc / 2^64`, exactly rounded down (`acc` split in halves so nothing overflows).
pub fn reward_of(shares: u64, acc: u128) -> Option<u64> {
    let shares = u128::from(shares);
    let high = shares.checked_mul(acc >> 64)?;
    let low = shares.checked_mul(acc & u128::from(u64::MAX))? >> 64;
    u64::try_from(high.checked_add(low)?).ok()
}

/// The reward per share (×2^64) of spreading `amount` over `shares`, rounded down.
pub fn reward_per_share(amount: u64, shares: u64) -> Option<u128> {
    (u128::from(amount) << 64).checked_div(u128::from(shares))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn empty_pool() -> Pool {
        Pool {
            provider: Pubkey::default(),
            opened_epoch: 0,
            commission: Schedule::default(),
            acc: 0,
            credited_through: 0,
            rolled_epoch: 0,
            eligible_len: 0,
            eligible: Default::default(),
            provider_rewards: 0,
            delegator_rewards: 0,
            income_pending: 0,
            income_len: 0,
            income: Default::default(),
            cohort_len: 0,
            cohorts: Default::default(),
            bump: 0,
        }
    }

    #[test]
    fn income_is_kept_by_epoch_in_order_and_credited_once() {
        let mut pool = empty_pool();
        assert!(pool.add_income(3, 5).unwrap());
        assert!(pool.add_income(2, 7).unwrap()); // the epoch before, landing after a boundary
        assert!(pool.add_income(3, 1).unwrap());
        assert_eq!(pool.income_pending, 13);
        assert_eq!(pool.credit(1, 0, 0, 0).unwrap(), (0, 0, 0, 0)); // epoch 1 had none
        assert_eq!(pool.credit(2, 0, 0, 0).unwrap().0, 7);
        assert_eq!(pool.credit(3, 0, 0, 0).unwrap().0, 6);
        assert_eq!((pool.income_pending, pool.income_len), (0, 0));
        assert_eq!(pool.provider_rewards, 13, "no eligible shares: all to the supplier");
    }

    #[test]
    fn a_full_income_history_refuses_a_new_epoch_but_not_a_kept_one() {
        let mut pool = empty_pool();
        for epoch in 1..=INCOME_HISTORY as i64 {
            assert!(pool.add_income(epoch, 1).unwrap());
        }
        assert!(!pool.add_income(INCOME_HISTORY as i64 + 1, 1).unwrap());
        assert!(pool.add_income(INCOME_HISTORY as i64, 1).unwrap());
        assert_eq!(pool.income_pending, INCOME_HISTORY as u64 + 1);
    }
}
