//! Lease income with a pool: the delegators' part of each payout, by stake counted up to the cap,
//! goes to the pool as income of the epoch it was paid in, and that epoch's credit spreads it, less
//! commission, over the shares that were in the pool when the epoch began.

use crate::harness::builders::ed25519_ix;
use crate::harness::*;
use anchor_lang::prelude::Pubkey;
use gpunet::errors::GpunetError;
use gpunet::events::{RewardEpochSkipped, UsageSettled};
use gpunet::merkle::RewardLeaf;
use gpunet::state::{reward_of, reward_per_share};
use solana_signer::Signer;

struct World {
    h: Harness,
    s: Supplier,
    node: GpuNode,
    lease: LeaseRef,
}

/// A supplier with 2,000 IO own stake and a pool at 10 % commission, its node leased for ten days.
fn world() -> World {
    let mut h = Harness::new();
    let s = h.supplier(2_000 * IO);
    h.open_pool(&s, 1_000).unwrap();
    h.fund_rewards(1_000 * IO).unwrap();
    let node = h.node(&s, h100_spec(1));
    let client = h.client(10_000 * IO);
    let lease = h.open_lease(&client, 1, terms(1, 24 * 10));
    h.assign(&lease, &[(&node, 1)]).unwrap();
    World { h, s, node, lease }
}

/// Settles an hour of full use, through now.
fn settle_hour(h: &mut Harness, lease: &LeaseRef, node: &GpuNode) -> UsageSettled {
    h.advance(3_600);
    let receipt = h.full_use_receipt(lease, node, 3_600);
    event(&h.settle(lease, node, receipt).unwrap())
}

fn collected(h: &mut Harness, d: &Delegator, p: &Position) -> u64 {
    let before = h.balance(&d.tokens);
    let cranker = h.wallet();
    h.collect_rewards(&cranker, d, p).unwrap();
    h.balance(&d.tokens) - before
}

#[test]
fn lease_income_goes_to_the_shares_of_the_epoch_it_was_paid_in() {
    let World { mut h, s, node, lease } = world();
    let early = h.delegator(1_000 * IO);
    let p_early = h.delegate(&early, &s.provider, 1_000 * IO).unwrap();

    // epoch 0, the pool's first: no share is eligible, the supplier is paid all of it
    let supplier_before = h.balance(&s.tokens);
    let first = settle_hour(&mut h, &lease, &node);
    assert_eq!((first.to_pool, first.income_epoch), (0, 0));
    assert_eq!(h.balance(&s.tokens) - supplier_before, first.payout);

    // epoch 1: 1,000 delegated of 3,000 counted, so a third of the payout is the pool's
    h.next_epoch(10);
    let late = h.delegator(1_000 * IO);
    let p_late = h.delegate(&late, &s.provider, 1_000 * IO).unwrap(); // earns from epoch 2
    let supplier_before = h.balance(&s.tokens);
    let vault_before = h.balance(&s.vault);
    let paid = settle_hour(&mut h, &lease, &node);
    // by then 2,000 is delegated (the cap: 1x the own 2,000), so half of it is the pool's
    assert_eq!(paid.income_epoch, 1);
    assert_eq!(paid.to_pool, paid.payout / 2);
    assert_eq!(h.balance(&s.tokens) - supplier_before, paid.payout - paid.to_pool);
    assert_eq!(h.balance(&s.vault) - vault_before, paid.to_pool);
    assert_eq!(h.pool(&s).income_pending, paid.to_pool);
    assert_eq!(h.balance(&s.vault), h.stake_vault_books(&s.provider));

    // epoch 1 credited with a reward of 100 IO to the delegators: its income joins it, the
    // commission is taken on both, and only the early position (in the pool all of epoch 1) earns
    h.next_epoch(10);
    let leaves = vec![
        RewardLeaf { epoch: 1, provider: s.provider, supplier_amount: 0, delegators_amount: 100 * IO },
        RewardLeaf { epoch: 1, provider: Pubkey::new_unique(), supplier_amount: 1, delegators_amount: 0 },
    ];
    let tree = RewardTree::new(leaves, &h.mint.clone());
    h.post_root(1, &tree).unwrap();
    h.advance(ROOT_TIMELOCK_SECONDS);
    let claimed: gpunet::events::RewardClaimed = event(&h.claim(1, &tree, 0).unwrap());
    let delegators = 100 * IO + paid.to_pool;
    let commission = delegators / 10;
    assert_eq!(claimed.income, paid.to_pool);
    assert_eq!((claimed.to_supplier, claimed.to_delegators), (commission, delegators - commission));
    assert_eq!(claimed.eligible_shares, 1_000 * IO);
    assert_eq!(h.pool(&s).income_pending, 0);
    let whole = reward_of(1_000 * IO, reward_per_share(delegators - commission, 1_000 * IO).unwrap()).unwrap();
    assert_eq!(collected(&mut h, &early, &p_early), whole);
    assert_eq!(collected(&mut h, &late, &p_late), 0, "joined during epoch 1: none of its income");
    assert_eq!(h.balance(&s.vault), h.stake_vault_books(&s.provider));
}

#[test]
fn an_epoch_skipped_still_credits_its_lease_income() {
    let World { mut h, s, node, lease } = world();
    let d = h.delegator(1_000 * IO);
    let p = h.delegate(&d, &s.provider, 1_000 * IO).unwrap();
    h.next_epoch(10);
    let paid = settle_hour(&mut h, &lease, &node);
    assert_eq!(paid.to_pool, paid.payout / 3);
    // no root for epoch 1: once its claim window is over, anyone moves the pool past it
    h.next_epoch(10);
    assert_error(h.skip_epoch(&s.provider), GpunetError::ClaimWindowOpen);
    let window = i64::from(h.staking().claim_epochs);
    for _ in 0..window {
        h.next_epoch(10);
    }
    let skipped: RewardEpochSkipped = event(&h.skip_epoch(&s.provider).unwrap());
    let commission = paid.to_pool / 10;
    assert_eq!((skipped.epoch, skipped.income), (1, paid.to_pool));
    assert_eq!((skipped.to_supplier, skipped.to_delegators), (commission, paid.to_pool - commission));
    let share = reward_of(1_000 * IO, reward_per_share(paid.to_pool - commission, 1_000 * IO).unwrap()).unwrap();
    assert_eq!(collected(&mut h, &d, &p), share);
    assert_eq!(h.balance(&s.vault), h.stake_vault_books(&s.provider));
}

#[test]
fn a_settlement_cannot_leave_out_the_pool_or_pick_its_epoch() {
    let World { mut h, s, node, lease } = world();
    let d = h.delegator(1_000 * IO);
    h.delegate(&d, &s.provider, 1_000 * IO).unwrap();
    h.next_epoch(10);
    h.next_epoch(10); // epoch 2
    h.advance(3_600);
    let attester = h.attester.insecure_clone();
    let receipt = h.full_use_receipt(&lease, &node, 3_600);
    let message = receipt.message(&lease.lease, &node.key.pubkey());
    let balances = |h: &Harness| [h.balance(&s.tokens), h.balance(&s.vault), h.balance(&lease.vault)];
    let before = balances(&h);
    let accepted = h.increment(&lease, &node, &receipt);
    let attempt = |h: &mut Harness, with_pool: bool, income_epoch: i64| {
        let settle =
            h.settle_usage_into_ix(&attester.pubkey(), &lease, &node, receipt, accepted, with_pool, income_epoch);
        h.send(&[ed25519_ix(&node.key, &message), settle], &[&attester])
    };
    // all to the supplier's wallet, the delegators left out
    assert_error(attempt(&mut h, false, 0), GpunetError::PoolMissing);
    // into a later epoch, or two back (to shift income between delegators)
    assert_error(attempt(&mut h, true, 3), GpunetError::WrongRewardEpoch);
    assert_error(attempt(&mut h, true, 0), GpunetError::WrongRewardEpoch);
    assert_eq!(balances(&h), before);
    // control: the epoch before is accepted while it is not credited, and so is the current one
    let paid: UsageSettled = event(&attempt(&mut h, true, 1).unwrap());
    assert_eq!((paid.income_epoch, paid.to_pool), (1, paid.payout / 3));
}

#[test]
fn a_provider_without_a_pool_is_paid_all_of_it() {
    let mut h = Harness::new();
    let s = h.supplier(2_000 * IO);
    let node = h.node(&s, h100_spec(1));
    let client = h.client(10_000 * IO);
    let lease = h.open_lease(&client, 1, terms(1, 24));
    h.assign(&lease, &[(&node, 1)]).unwrap();
    let before = h.balance(&s.tokens);
    let paid = settle_hour(&mut h, &lease, &node);
    assert_eq!((paid.to_pool, paid.income_epoch), (0, 0));
    assert_eq!(h.balance(&s.tokens) - before, paid.payout);
    // a pool passed for a provider without one is refused
    let attester = h.attester.insecure_clone();
    h.advance(60);
    let receipt = h.full_use_receipt(&lease, &node, 60);
    let message = receipt.message(&lease.lease, &node.key.pubkey());
    let settle = h.settle_usage_into_ix(&attester.pubkey(), &lease, &node, receipt, 60, true, h.epoch());
    assert!(h.send(&[ed25519_ix(&node.key, &message), settle], &[&attester]).is_err());
}
