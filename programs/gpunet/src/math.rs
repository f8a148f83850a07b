//! Pure, checked token arithmetic for escrow, settlement, fees and slashing.
//!
//! Rounding rule: every division rounds down, so nobody is paid beyond delivered
//! usage. The escrow a client deposits rounds up (it must cover the whole duration);
//! whatever a rounding leaves in escrow goes back to the client at close. The protocol fee
//! rounds up, so splitting usage into many tiny reports cannot avoid it.
use crate::state::BPS_DENOMINATOR;

pub const SECONDS_PER_HOUR: u128 = 3_600;

/// Escrow that pays `gpus` GPUs for `seconds` at `price_per_gpu_hour`, rounded up.
pub fn escrow_for(price_per_gpu_hour: u64, gpus: u8, seconds: i64) -> Option<u64> {
    let seconds = u128::try_from(seconds).ok()?;
    let total = u128::from(price_per_gpu_hour).checked_mul(u128::from(gpus))?.checked_mul(seconds)?;
    u64::try_from(total.div_ceil(SECONDS_PER_HOUR)).ok()
}

/// What `gpu_seconds` cost at `price_per_gpu_hour`, rounded down.
pub fn usage_cost(price_per_gpu_hour: u64, gpu_seconds: u64) -> Option<u64> {
    let total = u128::from(price_per_gpu_hour).checked_mul(u128::from(gpu_seconds))?;
    u64::try_from(total / SECONDS_PER_HOUR).ok()
}

/// What `more` GPU-seconds cost on top of `settled` already paid for: the cost of the cumulative
/// total less the cost of what was paid, so rounding never loses or adds a unit however the usage
/// is split into settlements (the total paid is always the cost of the total settled).
pub fn cumulative_cost(price_per_gpu_hour: u64, settled: u64, more: u64) -> Option<u64> {
    let total = usage_cost(price_per_gpu_hour, settled.checked_add(more)?)?;
    total.checked_sub(usage_cost(price_per_gpu_hour, settled)?)
}

/// `amount * bps / 10_000`, rounded down; `None` if `bps` > 10_000.
pub fn bps_of(amount: u64, bps: u16) -> Option<u64> {
    if u64::from(bps) > BPS_DENOMINATOR {
        return None;
    }
    let part = u128::from(amount).checked_mul(u128::from(bps))? / u128::from(BPS_DENOMINATOR);
    u64::try_from(part).ok()
}

/// `amount * bps / 10_000`, rounded up (never more than `amount`); `None` if `bps` > 10_000.
pub fn bps_of_ceil(amount: u64, bps: u16) -> Option<u64> {
    if u64::from(bps) > BPS_DENOMINATOR {
        return None;
    }
    let part = u128::from(amount).checked_mul(u128::from(bps))?.div_ceil(u128::from(BPS_DENOMINATOR));
    u64::try_from(part).ok()
}

/// What `gpus` GPUs at `price_per_gpu_hour` could still be owed from `from` to `until`
/// (rounded down like every settlement; zero when `until <= from`).
pub fn owed_at_most(price_per_gpu_hour: u64, gpus: u8, from: i64, until: i64) -> Option<u64> {
    let seconds = u64::try_from(until.saturating_sub(from).max(0)).ok()?;
    usage_cost(price_per_gpu_hour, seconds.checked_mul(u64::from(gpus))?)
}

/// How one settlement splits: `payout + fee == amount`, `amount <= escrow_left`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settlement {
    pub amount: u64,
    pub payout: u64,
    pub fee: u64,
}

/// Splits the cost of `gpu_seconds` more, on top of `settled` (see `cumulative_cost`), into payout
/// and fee, capped by what is left in escrow.
pub fn settle(
    price_per_gpu_hour: u64,
    settled: u64,
    gpu_seconds: u64,
    fee_bps: u16,
    escrow_left: u64,
) -> Option<Settlement> {
    let amount = cumulative_cost(price_per_gpu_hour, settled, gpu_seconds)?.min(escrow_left);
    let fee = bps_of_ceil(amount, fee_bps)?;
    let payout = amount.checked_sub(fee)?;
    Some(Settlement { amount, payout, fee })
}

/// How one slash splits: `to_client + to_treasury == amount`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slash {
    pub amount: u64,
    pub to_client: u64,
    pub to_treasury: u64,
}

/// A slash of `amount`, of which `client_share_bps` goes to the client when there is one, at
/// most `client_bound`; the rest to the treasury.
pub fn slash(amount: u64, client_share_bps: u16, client_bound: Option<u64>) -> Option<Slash> {
    let to_client = match client_bound {
        Some(bound) => bps_of(amount, client_share_bps)?.min(bound),
        None => 0,
    };
    let to_treasury = amount.checked_sub(to_client)?;
    Some(Slash { amount, to_client, to_treasury })
}

/// How much of a slash each source gives, in the order they give it: the supplier's unclaimed
/// rewards, its own stake, then (only when `delegated` is slashable, i.e. non-zero) the delegated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlashSources {
    pub rewards: u64,
    pub own: u64,
    pub delegated: u64,
}

impl SlashSources {
    pub fn total(&self) -> Option<u64> {
        self.rewards.checked_add(self.own)?.checked_add(self.delegated)
    }
}

/// Takes `amount` from `rewards`, then `own`, then `delegated`, each as far as it goes.
pub fn slash_sources(amount: u64, rewards: u64, own: u64, delegated: u64) -> SlashSources {
    let from_rewards = amount.min(rewards);
    let from_own = (amount - from_rewards).min(own);
    let from_delegated = (amount - from_rewards - from_own).min(delegated);
    SlashSources { rewards: from_rewards, own: from_own, delegated: from_delegated }
}

/// Splits `amount` over `stakes` pro rata, each part at most its stake, the parts summing to
/// `amount` exactly (`None` if the stakes hold less). Rounding remainders go to the first stakes
/// with room.
pub fn pro_rata(amount: u64, stakes: &[u64]) -> Option<Vec<u64>> {
    let total = stakes.iter().try_fold(0u64, |sum, s| sum.checked_add(*s))?;
    if amount > total {
        return None;
    }
    let mut parts: Vec<u64> = stakes
        .iter()
        .map(|s| u64::try_from(u128::from(amount) * u128::from(*s) / u128::from(total.max(1))).ok())
        .collect::<Option<_>>()?;
    let mut rest = amount - parts.iter().sum::<u64>();
    for (part, stake) in parts.iter_mut().zip(stakes) {
        let more = rest.min(stake - *part);
        *part += more;
        rest -= more;
    }
    Some(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escrow_rounds_up_and_covers_usage() {
        assert_eq!(escrow_for(3_600, 1, 1), Some(1));
        assert_eq!(escrow_for(1, 1, 1), Some(1)); // 1/3600 rounds up to 1
        assert_eq!(escrow_for(0, 8, 3_600), Some(0));
        assert_eq!(escrow_for(1_000, 8, 0), Some(0));
        assert_eq!(escrow_for(1_000, 8, 7_200), Some(16_000));
        // the escrow always pays for the full usage it was sized for
        for (price, gpus, secs) in [(7u64, 3u8, 1_001i64), (999_999, 16, 86_399), (1, 128, 1)] {
            let escrow = escrow_for(price, gpus, secs).unwrap();
            let used = usage_cost(price, u64::from(gpus) * secs as u64).unwrap();
            assert!(used <= escrow);
        }
    }

    #[test]
    fn escrow_rejects_negative_and_overflow() {
        assert_eq!(escrow_for(1, 1, -1), None);
        assert_eq!(escrow_for(u64::MAX, u8::MAX, i64::MAX), None);
        // u64::MAX per GPU-hour for one hour is representable, for two it is not
        assert_eq!(escrow_for(u64::MAX, 1, 3_600), Some(u64::MAX));
        assert_eq!(escrow_for(u64::MAX, 2, 3_600), None);
    }

    #[test]
    fn usage_cost_rounds_down() {
        assert_eq!(usage_cost(3_600, 1), Some(1));
        assert_eq!(usage_cost(3_599, 1), Some(0));
        assert_eq!(usage_cost(0, u64::MAX), Some(0));
        assert_eq!(usage_cost(u64::MAX, 0), Some(0));
        assert_eq!(usage_cost(u64::MAX, 3_600), Some(u64::MAX));
        assert_eq!(usage_cost(u64::MAX, 3_601), None);
    }

    #[test]
    fn bps_bounds() {
        assert_eq!(bps_of(10_000, 10_000), Some(10_000));
        assert_eq!(bps_of(10_000, 10_001), None);
        assert_eq!(bps_of(u64::MAX, 10_000), Some(u64::MAX));
        assert_eq!(bps_of(9_999, 1), Some(0));
        assert_eq!(bps_of(0, 500), Some(0));
    }

    #[test]
    fn settlement_conserves_and_caps_at_escrow() {
        let s = settle(3_600, 0, 100, 500, u64::MAX).unwrap();
        assert_eq!(s, Settlement { amount: 100, payout: 95, fee: 5 });
        let capped = settle(3_600, 0, 100, 500, 40).unwrap();
        assert_eq!(capped, Settlement { amount: 40, payout: 38, fee: 2 });
        // the fee rounds up: 19 units at 5 % owe 0.95, charged as 1
        assert_eq!(settle(3_600, 0, 19, 500, u64::MAX).unwrap(), Settlement { amount: 19, payout: 18, fee: 1 });
        let empty = settle(3_600, 0, 100, 500, 0).unwrap();
        assert_eq!(empty, Settlement { amount: 0, payout: 0, fee: 0 });
        for (price, secs, bps, left) in [(123u64, 4_567u64, 1_999u16, 999u64), (u64::MAX, 3_600, 2_000, u64::MAX)] {
            let s = settle(price, 0, secs, bps, left).unwrap();
            assert_eq!(s.payout + s.fee, s.amount);
            assert!(s.amount <= left);
        }
    }

    #[test]
    fn cumulative_settlements_pay_exactly_the_total() {
        // 1 GPU-second at 1,000 per GPU-hour costs 0.28: settled one at a time it still adds up
        let whole = usage_cost(1_000, 3_601).unwrap();
        let mut paid = 0;
        for settled in 0..3_601 {
            paid += settle(1_000, settled, 1, 0, u64::MAX).unwrap().amount;
        }
        assert_eq!(paid, whole);
        assert_eq!(cumulative_cost(3_600, 5, 7), Some(7));
        assert_eq!(cumulative_cost(u64::MAX, u64::MAX, 1), None);
    }

    #[test]
    fn splitting_a_report_never_lowers_the_fee() {
        // one 100-unit report vs. the same usage as 100 one-unit reports
        let whole = settle(3_600, 0, 100, 500, u64::MAX).unwrap().fee;
        let split: u64 = (0..100).map(|_| settle(3_600, 0, 1, 500, u64::MAX).unwrap().fee).sum();
        assert!(split >= whole, "split {split} < whole {whole}");
        assert_eq!(bps_of_ceil(1, 1), Some(1));
        assert_eq!(bps_of_ceil(0, 2_000), Some(0));
        assert_eq!(bps_of_ceil(u64::MAX, 10_000), Some(u64::MAX));
        assert_eq!(bps_of_ceil(1, 10_001), None);
    }

    #[test]
    fn owed_at_most_bounds_the_rest_of_a_share() {
        assert_eq!(owed_at_most(3_600, 2, 100, 160), Some(120));
        assert_eq!(owed_at_most(3_600, 2, 160, 100), Some(0));
        assert_eq!(owed_at_most(3_599, 1, 0, 1), Some(0));
        assert_eq!(owed_at_most(u64::MAX, 16, 0, i64::MAX), None);
        // periods settled piecewise never add up to more than the bound
        let bound = owed_at_most(7_777, 3, 0, 1_000).unwrap();
        let pieces: u64 =
            (0..1_000).step_by(7).map(|t| usage_cost(7_777, 3 * (7.min(1_000 - t)) as u64).unwrap()).sum();
        assert!(pieces <= bound);
    }

    #[test]
    fn slash_splits_exactly() {
        let any = Some(u64::MAX);
        assert_eq!(slash(100, 5_000, any), Some(Slash { amount: 100, to_client: 50, to_treasury: 50 }));
        assert_eq!(slash(100, 5_000, None), Some(Slash { amount: 100, to_client: 0, to_treasury: 100 }));
        assert_eq!(slash(0, 10_000, any), Some(Slash { amount: 0, to_client: 0, to_treasury: 0 }));
        assert_eq!(slash(u64::MAX, 3_333, any).map(|s| s.to_client + s.to_treasury), Some(u64::MAX));
        assert_eq!(slash(1, 10_001, any), None);
        // the client's share is capped by what its lease lost; the rest goes to the treasury
        assert_eq!(slash(100, 5_000, Some(20)), Some(Slash { amount: 100, to_client: 20, to_treasury: 80 }));
    }

    #[test]
    fn slashes_take_rewards_then_own_stake_then_delegated() {
        assert_eq!(slash_sources(50, 30, 100, 100), SlashSources { rewards: 30, own: 20, delegated: 0 });
        assert_eq!(slash_sources(250, 30, 100, 100), SlashSources { rewards: 30, own: 100, delegated: 100 });
        // a liveness fault passes no slashable delegated stake: what own stake cannot cover is not taken
        assert_eq!(slash_sources(250, 30, 100, 0), SlashSources { rewards: 30, own: 100, delegated: 0 });
    }

    #[test]
    fn pro_rata_parts_sum_exactly_and_fit() {
        assert_eq!(pro_rata(10, &[1, 1, 1]), None);
        assert_eq!(pro_rata(3, &[1, 1, 1]), Some(vec![1, 1, 1]));
        assert_eq!(pro_rata(2, &[1, 1, 1]), Some(vec![1, 1, 0]));
        assert_eq!(pro_rata(7, &[10, 0, 5]), Some(vec![5, 0, 2]));
        assert_eq!(pro_rata(0, &[]), Some(vec![]));
        for (amount, stakes) in [(999u64, vec![7u64, 1_000, 3, 0, 55]), (u64::MAX, vec![u64::MAX])] {
            let parts = pro_rata(amount, &stakes).unwrap();
            assert_eq!(parts.iter().sum::<u64>(), amount);
            assert!(parts.iter().zip(&stakes).all(|(p, s)| p <= s));
        }
    }
}
