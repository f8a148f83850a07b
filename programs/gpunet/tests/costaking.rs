//! Property: co-staking and rewards account for every base unit, and each delegator's wallet
//! equals a plain recomputation.
//!
//! Random sequences of delegations (1 unit, dust and large), undelegations, withdrawals, lease
//! settlements (their delegators' part is the pool's income of the epoch), reward roots and claims
//! (any split between the supplier and its delegators), skipped epochs, collections, slashes of
//! both classes, commission changes, the supplier's withdrawals and donations to both vaults.
//! After every step: the stake vault holds exactly its books plus donations, the reward vault its
//! funds less its payouts plus donations, no token appears or vanishes, a failed step moves
//! nothing, and every delegator's wallet equals the model's: principal by share value, rewards
//! recomputed from each epoch's amount and the shares that were in the pool when it began (not
//! from the program's snapshots or reward indexes).

use std::collections::BTreeMap;

use crate::harness::*;
use anchor_lang::prelude::Pubkey;
use anchor_spl::token::spl_token;
use gpunet::events::{ProviderSlashed, RewardClaimed, RewardEpochSkipped, UsageSettled};
use gpunet::math;
use gpunet::merkle::RewardLeaf;
use gpunet::state::{reward_of, reward_per_share, share_value, Cohort, FaultKind, Lease, Pool, Provider};
use proptest::prelude::*;
use solana_signer::Signer;

const DELEGATORS: usize = 3;
const OWN_STAKE: u64 = 5_000 * IO;

#[derive(Debug, Clone)]
enum Op {
    Delegate { who: usize, amount: u64 },
    Undelegate { who: usize, position: usize },
    Withdraw { who: usize, position: usize },
    Collect { who: usize, position: usize },
    Credit { supplier: u64, delegators: u64 },
    Settle { seconds: i64 },
    Skip,
    Slash { malicious: bool, back_seconds: i64 },
    Commission { bps: u16 },
    Advance { seconds: i64 },
    SupplierWithdraws,
    Donate { to_rewards: bool, amount: u64 },
}

fn op() -> impl Strategy<Value = Op> {
    let amount = prop_oneof![Just(1u64), 1..=1_000u64, 1..=800 * IO];
    prop_oneof![
        4 => (0..DELEGATORS, amount).prop_map(|(who, amount)| Op::Delegate { who, amount }),
        2 => (0..DELEGATORS, 0..4usize).prop_map(|(who, position)| Op::Undelegate { who, position }),
        2 => (0..DELEGATORS, 0..4usize).prop_map(|(who, position)| Op::Withdraw { who, position }),
        3 => (0..DELEGATORS, 0..4usize).prop_map(|(who, position)| Op::Collect { who, position }),
        3 => (0..=100 * IO, prop_oneof![Just(0u64), 1..=1_000u64, 0..=200 * IO])
            .prop_map(|(supplier, delegators)| Op::Credit { supplier, delegators }),
        3 => prop_oneof![Just(1i64), 1..=3_600i64].prop_map(|seconds| Op::Settle { seconds }),
        1 => Just(Op::Skip),
        1 => (any::<bool>(), 0..=7_200i64).prop_map(|(malicious, back_seconds)| Op::Slash { malicious, back_seconds }),
        1 => (0..=MAX_COMMISSION).prop_map(|bps| Op::Commission { bps }),
        4 => prop_oneof![1..=3_600i64, Just(EPOCH_SECONDS)].prop_map(|seconds| Op::Advance { seconds }),
        1 => Just(Op::SupplierWithdraws),
        1 => (any::<bool>(), 1..=1_000u64).prop_map(|(to_rewards, amount)| Op::Donate { to_rewards, amount }),
    ]
}

/// The model of one position.
#[derive(Debug, Clone)]
struct ModelPosition {
    position: Position,
    shares: u64,
    since: i64,
    exit_epoch: Option<i64>,
    cohort_shares: u64,
    /// Rewards collected through this epoch.
    collected_through: i64,
    withdrawn: bool,
}

/// A cohort's shares and stake, as the model has them.
#[derive(Debug, Clone, Copy, Default)]
struct ModelCohort {
    starts_at: i64,
    ends_at: i64,
    shares: u64,
    stake: u64,
}

struct World {
    h: Harness,
    s: Supplier,
    node: GpuNode,
    lease: LeaseRef,
    /// The epoch the pool opened in.
    opened: i64,
    /// The supplier's own active stake, by the slashes' events.
    own: u64,
    /// The delegators' part of lease income by the epoch it was paid in, until credited.
    income: BTreeMap<i64, u64>,
    delegators: Vec<Delegator>,
    positions: Vec<Vec<ModelPosition>>,
    /// What each delegator's wallet must hold.
    wallets: Vec<u64>,
    /// Active delegated stake and its shares; cohorts by exit epoch.
    stake: u64,
    shares: u64,
    cohorts: BTreeMap<i64, ModelCohort>,
    /// For each credited epoch, the reward per share its delegators' amount gave.
    per_share: BTreeMap<i64, u128>,
    /// The commission by the epoch it took effect from.
    commission: BTreeMap<i64, u16>,
    donated_stake: u64,
    donated_rewards: u64,
    donor: Delegator,
    supply: u64,
}

impl World {
    fn new() -> Self {
        let mut h = Harness::new();
        h.update_config(|p| p.slash_bps = [1_000, 9_000, 9_000]).unwrap();
        let s = h.supplier(OWN_STAKE);
        h.open_pool(&s, 1_000).unwrap();
        let node = h.node(&s, h100_spec(1));
        h.fund_rewards(100_000 * IO).unwrap();
        // a month's lease on the node: settlements pay the supplier and the pool's delegators
        let client = h.client(1_000_000 * IO);
        let lease = h.open_lease(&client, 1, terms(1, 24 * 30));
        h.assign(&lease, &[(&node, 1)]).unwrap();
        let delegators: Vec<Delegator> = (0..DELEGATORS).map(|_| h.delegator(5_000 * IO)).collect();
        let donor = h.delegator(1_000_000);
        let epoch = h.epoch();
        let mut w = World {
            h,
            s,
            node,
            lease,
            opened: epoch,
            own: OWN_STAKE,
            income: BTreeMap::new(),
            delegators,
            positions: vec![vec![]; DELEGATORS],
            wallets: vec![5_000 * IO; DELEGATORS],
            stake: 0,
            shares: 0,
            cohorts: BTreeMap::new(),
            per_share: BTreeMap::new(),
            commission: BTreeMap::from([(epoch, 1_000)]),
            donated_stake: 0,
            donated_rewards: 0,
            donor,
            supply: 0,
        };
        w.supply = w.total();
        w
    }

    fn accounts(&self) -> Vec<Pubkey> {
        let mut all =
            vec![self.s.vault, self.s.tokens, self.h.treasury, reward_vault_pda(), self.donor.tokens, self.lease.vault];
        all.extend(self.delegators.iter().map(|d| d.tokens));
        all
    }

    fn balances(&self) -> Vec<u64> {
        self.accounts().iter().map(|a| self.h.balance(a)).collect()
    }

    fn total(&self) -> u64 {
        self.balances().iter().sum()
    }

    /// Shares in the pool when `epoch` began, from the positions (never from the program).
    fn eligible(&self, epoch: i64) -> u64 {
        self.positions
            .iter()
            .flatten()
            .filter(|p| p.since <= epoch && p.exit_epoch.is_none_or(|x| epoch <= x))
            .map(|p| p.shares)
            .sum()
    }

    fn commission_at(&self, epoch: i64) -> u16 {
        *self.commission.range(..=epoch).next_back().map(|(_, bps)| bps).unwrap()
    }

    /// The reward per eligible share of crediting `epoch` with `delegators` of reward and its lease
    /// income, less commission (0 when no share was eligible: all of it went to the supplier).
    fn credit(&mut self, epoch: i64, delegators: u64) -> u128 {
        let eligible = self.eligible(epoch);
        let total = delegators + self.income.remove(&epoch).unwrap_or(0);
        if eligible == 0 {
            return 0;
        }
        let commission = math::bps_of(total, self.commission_at(epoch)).unwrap();
        reward_per_share(total - commission, eligible).unwrap()
    }

    fn apply(&mut self, op: &Op) -> bool {
        let h = &mut self.h;
        match *op {
            Op::Delegate { who, amount } => {
                let d = &self.delegators[who];
                let nonce = self.positions[who].len() as u64; // one nonce per position, never reused here
                let Ok(position) = h.delegate_nonce(d, &self.s.provider, nonce, amount) else { return false };
                let shares = if self.shares == 0 {
                    amount
                } else {
                    (u128::from(amount) * u128::from(self.shares) / u128::from(self.stake)) as u64
                };
                let epoch = h.epoch();
                self.stake += amount;
                self.shares += shares;
                self.wallets[who] -= amount;
                self.positions[who].push(ModelPosition {
                    position,
                    shares,
                    since: epoch + 1,
                    exit_epoch: None,
                    cohort_shares: 0,
                    collected_through: epoch,
                    withdrawn: false,
                });
                true
            }
            Op::Undelegate { who, position } => {
                let Some(p) = self.positions[who].get(position).cloned() else { return false };
                if h.undelegate(&self.delegators[who], &p.position).is_err() {
                    assert!(p.exit_epoch.is_some(), "an active position could not undelegate");
                    return false;
                }
                let epoch = h.epoch();
                let value = share_value(p.shares, self.shares, self.stake).unwrap();
                self.stake -= value;
                self.shares -= p.shares;
                let start = h.staking().epoch_start(epoch + 1).unwrap();
                let cohort = self.cohorts.entry(epoch).or_insert(ModelCohort {
                    starts_at: start,
                    ends_at: start + UNBONDING_SECONDS,
                    ..Default::default()
                });
                let cohort_shares = if cohort.shares == 0 {
                    value
                } else {
                    (u128::from(value) * u128::from(cohort.shares) / u128::from(cohort.stake)) as u64
                };
                cohort.shares += cohort_shares;
                cohort.stake += value;
                let m = &mut self.positions[who][position];
                m.exit_epoch = Some(epoch);
                m.cohort_shares = cohort_shares;
                true
            }
            Op::Withdraw { who, position } => {
                let Some(p) = self.positions[who].get(position).cloned() else { return false };
                if !h.exists(&p.position.delegation)
                    || h.withdraw_delegation(&self.delegators[who], &p.position).is_err()
                {
                    return false;
                }
                let cohort = self.cohorts.get_mut(&p.exit_epoch.unwrap()).unwrap();
                let value = share_value(p.cohort_shares, cohort.shares, cohort.stake).unwrap();
                cohort.shares -= p.cohort_shares;
                cohort.stake -= value;
                self.wallets[who] += value;
                let m = &mut self.positions[who][position];
                m.cohort_shares = 0;
                m.withdrawn = true;
                true
            }
            Op::Collect { who, position } => {
                let Some(p) = self.positions[who].get(position).cloned() else { return false };
                if !h.exists(&p.position.delegation) {
                    return false;
                }
                let cranker = h.wallet();
                h.collect_rewards(&cranker, &self.delegators[who], &p.position).unwrap();
                let credited = self.per_share.keys().next_back().copied().unwrap_or(0).max(0);
                let through = p.exit_epoch.unwrap_or(i64::MAX).min(credited);
                if through > p.collected_through {
                    let acc: u128 = self.per_share.range(p.collected_through + 1..=through).map(|(_, rps)| rps).sum();
                    self.wallets[who] += reward_of(p.shares, acc).unwrap();
                    self.positions[who][position].collected_through = through;
                }
                true
            }
            Op::Credit { supplier, delegators } => {
                let pool: Pool = h.account(&pool_pda(&self.s.provider));
                let epoch = pool.credited_through + 1;
                if epoch >= h.epoch() || !h.staking().claim_open(epoch, h.epoch()) {
                    return false;
                }
                let mint = h.mint;
                let leaves = vec![
                    RewardLeaf {
                        epoch,
                        provider: self.s.provider,
                        supplier_amount: supplier,
                        delegators_amount: delegators,
                    },
                    RewardLeaf { epoch, provider: Pubkey::new_unique(), supplier_amount: 1, delegators_amount: 0 },
                ];
                let tree = RewardTree::new(leaves, &mint);
                h.post_root(epoch, &tree).unwrap();
                h.advance(ROOT_TIMELOCK_SECONDS);
                let claimed: RewardClaimed = event(&h.claim(epoch, &tree, 0).unwrap());
                assert_eq!(claimed.eligible_shares, self.eligible(epoch), "the epoch's eligible shares, recomputed");
                assert_eq!(claimed.income, self.income.get(&epoch).copied().unwrap_or(0), "the epoch's income");
                let rps = self.credit(epoch, delegators);
                self.per_share.insert(epoch, rps);
                true
            }
            Op::Skip => {
                let Ok(result) = h.skip_epoch(&self.s.provider) else { return false };
                let skipped: RewardEpochSkipped = event(&result);
                assert_eq!(skipped.income, self.income.get(&skipped.epoch).copied().unwrap_or(0), "the epoch's income");
                let rps = self.credit(skipped.epoch, 0);
                self.per_share.insert(skipped.epoch, rps);
                true
            }
            Op::Settle { seconds } => {
                let share = h.share(&self.lease, &self.node);
                let seconds = seconds.min(h.now() - share.settled_until);
                if seconds <= 0 {
                    return false;
                }
                let receipt = h.full_use_receipt(&self.lease, &self.node, seconds);
                let Ok(result) = h.settle(&self.lease, &self.node, receipt) else { return false };
                let settled: UsageSettled = event(&result);
                // the delegators' part, by stake counted up to the cap (1x own stake), recomputed
                let counted = self.stake.min(self.own);
                let stake = u128::from(self.own + counted);
                let to_pool = if stake == 0 || settled.income_epoch == self.opened {
                    0 // no share is eligible in the epoch the pool opened in
                } else {
                    (u128::from(settled.payout) * u128::from(counted) / stake) as u64
                };
                assert_eq!(settled.to_pool, to_pool, "the delegators' part of the payout");
                assert_eq!(settled.income_epoch, h.epoch());
                *self.income.entry(settled.income_epoch).or_default() += to_pool;
                true
            }
            Op::Slash { malicious, back_seconds } => {
                if h.account::<gpunet::state::Node>(&self.node.node).jailed {
                    h.advance(JAIL_SECONDS);
                    h.send(&[h.unjail_node_ix(&self.s, &self.node.node)], &[&self.s.wallet]).unwrap();
                }
                let fault = if malicious { FaultKind::InvalidUsage } else { FaultKind::MissedHeartbeats };
                let fault_at = h.now() - back_seconds.min(UNBONDING_SECONDS);
                let attester = h.attester.insecure_clone();
                let ix = h.slash_at_ix(
                    &attester.pubkey(),
                    &self.node,
                    fault,
                    None,
                    Pubkey::new_unique().to_bytes(),
                    fault_at,
                );
                let ev: ProviderSlashed = event(&h.send(&[ix], &[&attester]).unwrap());
                self.own -= ev.from_own;
                // the model's stakes at risk, in the program's order: active, then cohorts by epoch
                let now = h.now();
                let reached: Vec<i64> = if malicious {
                    self.cohorts
                        .iter()
                        .filter(|(_, c)| c.ends_at > now && c.starts_at > fault_at)
                        .map(|(e, _)| *e)
                        .collect()
                } else {
                    vec![]
                };
                let mut stakes = vec![if malicious { self.stake } else { 0 }];
                stakes.extend(reached.iter().map(|e| self.cohorts[e].stake));
                let parts = math::pro_rata(ev.from_delegated, &stakes).unwrap();
                self.stake -= parts[0];
                for (e, part) in reached.iter().zip(&parts[1..]) {
                    self.cohorts.get_mut(e).unwrap().stake -= part;
                }
                if !malicious {
                    assert_eq!(ev.from_delegated, 0, "a liveness fault reached delegated stake");
                }
                true
            }
            Op::Commission { bps } => {
                let epoch = h.epoch();
                if h.set_commission(&self.s, bps).is_err() {
                    return false;
                }
                let current = self.commission_at(epoch);
                let from = if bps <= current { epoch } else { epoch + 2 };
                self.commission.retain(|e, _| *e <= epoch);
                self.commission.insert(from, bps);
                true
            }
            Op::Advance { seconds } => {
                h.advance(seconds);
                true
            }
            Op::SupplierWithdraws => h.withdraw_pool_rewards(&self.s).is_ok(),
            Op::Donate { to_rewards, amount } => {
                let to = if to_rewards { reward_vault_pda() } else { self.s.vault };
                let ix = spl_token::instruction::transfer(
                    &spl_token::ID,
                    &self.donor.tokens,
                    &to,
                    &self.donor.wallet.pubkey(),
                    &[],
                    amount,
                )
                .unwrap();
                if h.send(&[ix], &[&self.donor.wallet]).is_err() {
                    return false;
                }
                if to_rewards {
                    self.donated_rewards += amount;
                } else {
                    self.donated_stake += amount;
                }
                true
            }
        }
    }

    fn check_invariants(&self) {
        let h = &self.h;
        assert_eq!(self.total(), self.supply, "no token appears or vanishes");
        assert_eq!(h.balance(&self.s.vault), h.stake_vault_books(&self.s.provider) + self.donated_stake);
        let st = h.staking();
        assert_eq!(h.balance(&reward_vault_pda()), st.reward_funded - st.reward_paid + self.donated_rewards);
        let p: Provider = h.account(&self.s.provider);
        assert_eq!((p.delegated, p.delegated_shares), (self.stake, self.shares), "active delegated stake");
        let unbonding: u64 = self.cohorts.values().map(|c| c.stake).sum();
        assert_eq!(p.delegated_unbonding, unbonding, "unbonding delegated stake");
        for (epoch, cohort) in &self.cohorts {
            if cohort.shares > 0 {
                let c: Cohort = h.account(&cohort_pda(&self.s.provider, *epoch));
                assert_eq!((c.shares, c.stake), (cohort.shares, cohort.stake));
            }
        }
        for (d, wallet) in self.delegators.iter().zip(&self.wallets) {
            assert_eq!(h.balance(&d.tokens), *wallet, "a delegator's wallet");
        }
        let pool: Pool = h.account(&pool_pda(&self.s.provider));
        let income: u64 = self.income.values().sum();
        assert_eq!(pool.income_pending, income, "lease income not yet credited");
        let settled: Lease = h.account(&self.lease.lease);
        assert!(pool.delegator_rewards + pool.provider_rewards <= st.reward_paid + settled.paid);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn co_staking_accounts_for_every_unit(ops in prop::collection::vec(op(), 1..50)) {
        let mut world = World::new();
        for op in &ops {
            let before = world.balances();
            if !world.apply(op) {
                prop_assert_eq!(&before, &world.balances(), "failed {:?} moved tokens", op);
            }
            world.check_invariants();
        }
    }
}
