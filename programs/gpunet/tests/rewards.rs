//! Rewards: roots posted by attesters within the emission and the vault's free funds, claimable
//! after a timelock by anyone, credited to each pool epoch by epoch over the shares that were in
//! it when the epoch began, with the commission in force in that epoch.

use crate::harness::*;
use anchor_lang::prelude::Pubkey;
use anchor_lang::solana_program::instruction::InstructionError;
use gpunet::errors::GpunetError;
use gpunet::events::{ProviderSlashed, RewardClaimed};
use gpunet::merkle::RewardLeaf;
use gpunet::state::{reward_of, reward_per_share, Delegation, FaultKind, RewardRoot};
use solana_signer::Signer;

struct World {
    h: Harness,
    s: Supplier,
    early: Delegator,
    p_early: Position,
}

/// A supplier (2,000 IO own stake, a pool at 10 % commission), a delegator of 1,000 IO from
/// epoch 0 (so earning from epoch 1), a funded vault, the clock early in epoch 1.
fn world() -> World {
    let mut h = Harness::new();
    let s = h.supplier(2_000 * IO);
    h.open_pool(&s, 1_000).unwrap();
    let early = h.delegator(1_000 * IO);
    let p_early = h.delegate(&early, &s.provider, 1_000 * IO).unwrap();
    h.fund_rewards(100_000 * IO).unwrap();
    h.next_epoch(10);
    World { h, s, early, p_early }
}

fn leaf(epoch: i64, provider: Pubkey, supplier_amount: u64, delegators_amount: u64) -> RewardLeaf {
    RewardLeaf { epoch, provider, supplier_amount, delegators_amount }
}

/// Posts a tree for `epoch` (the pool's leaf first, then `others` filler pools), waits out the
/// timelock, and claims the pool's leaf.
fn credit(h: &mut Harness, epoch: i64, pool_leaf: RewardLeaf) -> RewardClaimed {
    let others = (0..3).map(|_| leaf(epoch, Pubkey::new_unique(), 1, 1));
    let tree = RewardTree::new(std::iter::once(pool_leaf).chain(others).collect(), &h.mint.clone());
    h.post_root(epoch, &tree).unwrap();
    h.advance(ROOT_TIMELOCK_SECONDS);
    event(&h.claim(epoch, &tree, 0).unwrap())
}

/// What `shares` of `eligible` get of `amount` spread over them: the program's own rounding
/// (down, the dust staying in the pool).
fn share_of(amount: u64, shares: u64, eligible: u64) -> u64 {
    earned(shares, &[(amount, eligible)])
}

/// What `shares` earn over epochs each spreading an amount over its eligible shares, collected at once.
fn earned(shares: u64, epochs: &[(u64, u64)]) -> u64 {
    let acc = epochs.iter().map(|(amount, eligible)| reward_per_share(*amount, *eligible).unwrap()).sum();
    reward_of(shares, acc).unwrap()
}

fn collected(h: &mut Harness, d: &Delegator, p: &Position) -> u64 {
    let before = h.balance(&d.tokens);
    let cranker = h.wallet();
    h.collect_rewards(&cranker, d, p).unwrap();
    h.balance(&d.tokens) - before
}

#[test]
fn delegating_in_an_epochs_last_second_earns_nothing_for_it() {
    let World { mut h, s, early, p_early } = world();
    let late = h.delegator(1_000 * IO);
    h.next_epoch(-1); // the last second of epoch 1
    let p_late = h.delegate(&late, &s.provider, 1_000 * IO).unwrap();
    h.advance(1);
    assert_eq!(h.epoch(), 2);

    // epoch 1: 300 IO for the supplier's own stake, 200 for its delegators, 10 % commission
    let claimed = credit(&mut h, 1, leaf(1, s.provider, 300 * IO, 200 * IO));
    assert_eq!((claimed.to_supplier, claimed.to_delegators, claimed.eligible_shares), (320 * IO, 180 * IO, 1_000 * IO));
    assert_eq!(collected(&mut h, &late, &p_late), 0, "joined in epoch 1's last second");
    let all_of_it = share_of(180 * IO, 1_000 * IO, 1_000 * IO);
    assert_eq!(all_of_it, 180 * IO - 1, "the rounding leaves one unit of dust in the pool");
    assert_eq!(collected(&mut h, &early, &p_early), all_of_it, "control: in the pool all of epoch 1");

    // epoch 2: both were in it from its start, half each
    h.next_epoch(10);
    credit(&mut h, 2, leaf(2, s.provider, 0, 200 * IO));
    let half = share_of(180 * IO, 1_000 * IO, 2_000 * IO);
    assert_eq!(collected(&mut h, &late, &p_late), half);
    assert_eq!(collected(&mut h, &early, &p_early), half);
    assert_eq!(h.pool(&s).provider_rewards, 340 * IO);
    assert_eq!(h.pool(&s).delegator_rewards, 360 * IO - all_of_it - 2 * half, "the dust, accounted");
    h.withdraw_pool_rewards(&s).unwrap();
    assert_eq!(h.balance(&s.tokens), 8_000 * IO + 340 * IO);
    assert_eq!(h.balance(&s.vault), h.stake_vault_books(&s.provider));
}

#[test]
fn a_commission_raise_applies_only_after_a_full_epoch_and_a_cut_at_once() {
    let World { mut h, s, early, p_early } = world();
    h.next_epoch(-1);
    h.set_commission(&s, 2_000).unwrap(); // raised in epoch 1's last second: from epoch 3 on
    h.advance(1);
    credit(&mut h, 1, leaf(1, s.provider, 0, 100 * IO));
    h.next_epoch(10);
    credit(&mut h, 2, leaf(2, s.provider, 0, 100 * IO));
    let at_10 = earned(1_000 * IO, &[(90 * IO, 1_000 * IO), (90 * IO, 1_000 * IO)]);
    assert_eq!(collected(&mut h, &early, &p_early), at_10, "10 % on epochs 1 and 2");
    h.next_epoch(10);
    credit(&mut h, 3, leaf(3, s.provider, 0, 100 * IO));
    assert_eq!(collected(&mut h, &early, &p_early), share_of(80 * IO, 1_000 * IO, 1_000 * IO), "20 % from epoch 3");
    // a cut applies to the epoch it is made in
    h.set_commission(&s, 500).unwrap();
    h.next_epoch(10);
    credit(&mut h, 4, leaf(4, s.provider, 0, 100 * IO));
    assert_eq!(collected(&mut h, &early, &p_early), share_of(95 * IO, 1_000 * IO, 1_000 * IO));
    assert_error(h.set_commission(&s, MAX_COMMISSION + 1), GpunetError::CommissionTooHigh);
}

#[test]
fn a_claim_proves_its_exact_leaf_once() {
    let World { mut h, s, .. } = world();
    let other = h.supplier(1_000 * IO);
    h.open_pool(&other, 0).unwrap();
    h.next_epoch(10);
    let mine = leaf(1, s.provider, 10 * IO, 20 * IO);
    let leaves = vec![mine, leaf(1, other.provider, 5 * IO, 0), leaf(1, Pubkey::new_unique(), 1, 1)];
    let tree = RewardTree::new(leaves, &h.mint.clone());
    h.post_root(1, &tree).unwrap();
    h.advance(ROOT_TIMELOCK_SECONDS);
    let cranker = h.wallet();
    let reward_vault = h.balance(&reward_vault_pda());
    let claim = |h: &Harness, leaf: &RewardLeaf, proof: Vec<[u8; 32]>| h.claim_ix(&cranker.pubkey(), 1, leaf, proof);

    // more than the leaf, another pool as recipient, another epoch, another mint
    let more = RewardLeaf { delegators_amount: 21 * IO, ..mine };
    assert_error(h.send(&[claim(&h, &more, tree.proof(0))], &[&cranker]), GpunetError::InvalidProof);
    let redirected = RewardLeaf { provider: other.provider, ..mine };
    assert_error(h.send(&[claim(&h, &redirected, tree.proof(0))], &[&cranker]), GpunetError::InvalidProof);
    let other_mint = RewardTree::new(vec![mine, tree.leaves[1], tree.leaves[2]], &Pubkey::new_unique());
    h.post_root_ix(&cranker.pubkey(), 1, other_mint.root(), 1, 3); // (not sent: only its proof is used)
    assert_error(h.send(&[claim(&h, &mine, other_mint.proof(0))], &[&cranker]), GpunetError::InvalidProof);
    // the inner node over the first two leaves, offered as a leaf (its proof one level short)
    assert_error(h.send(&[claim(&h, &mine, tree.proof(0)[1..].to_vec())], &[&cranker]), GpunetError::InvalidProof);
    let mut long = tree.proof(0);
    long.resize(usize::from(gpunet::state::MAX_PROOF_LEN) + 1, [0; 32]);
    assert_error(h.send(&[claim(&h, &mine, long)], &[&cranker]), GpunetError::InvalidProof);
    assert_eq!(h.balance(&reward_vault_pda()), reward_vault);

    h.send(&[claim(&h, &mine, tree.proof(0))], &[&cranker]).unwrap(); // control
    assert_eq!(h.balance(&reward_vault_pda()), reward_vault - 30 * IO);
    // twice: the pool's epoch 1 is credited (its reward index exists)
    assert!(matches!(
        instruction_error(h.send(&[claim(&h, &mine, tree.proof(0))], &[&cranker])),
        InstructionError::Custom(0)
    ));
    // a leaf of epoch 1 offered for epoch 2 (the leaf binds its epoch)
    let root: RewardRoot = h.account(&reward_root_pda(1));
    assert_eq!(root.claimed, 30 * IO);
    assert_eq!(h.balance(&reward_vault_pda()), reward_vault - 30 * IO);
}

#[test]
fn a_leaf_of_another_epoch_fails() {
    let World { mut h, s, .. } = world();
    h.next_epoch(10);
    h.next_epoch(10); // epoch 3; the pool's next epoch is 1
    let tree1 = RewardTree::new(vec![leaf(1, s.provider, 1, 1), leaf(1, Pubkey::new_unique(), 1, 1)], &h.mint.clone());
    let tree2 = RewardTree::new(vec![leaf(2, s.provider, 1, 1), leaf(2, Pubkey::new_unique(), 1, 1)], &h.mint.clone());
    h.post_root(1, &tree1).unwrap();
    h.post_root(2, &tree2).unwrap();
    h.advance(ROOT_TIMELOCK_SECONDS);
    // epoch 2 before epoch 1: refused (a pool is credited in order)
    assert_error(h.claim(2, &tree2, 0), GpunetError::WrongRewardEpoch);
    // epoch 1's root with epoch 2's proof: the leaf hashes with epoch 1, so it fails
    let cranker = h.wallet();
    let ix = h.claim_ix(&cranker.pubkey(), 1, &leaf(1, s.provider, 1, 1), tree2.proof(0));
    assert_error(h.send(&[ix], &[&cranker]), GpunetError::InvalidProof);
    h.claim(1, &tree1, 0).unwrap();
    h.claim(2, &tree2, 0).unwrap();
}

#[test]
fn roots_come_only_from_attesters_within_the_emission_and_funds_and_wait_out_the_timelock() {
    let World { mut h, s, .. } = world();
    let tree =
        RewardTree::new(vec![leaf(1, s.provider, 10 * IO, 0), leaf(1, Pubkey::new_unique(), 1, 0)], &h.mint.clone());
    let stranger = h.wallet();
    let attester = h.attester.insecure_clone();
    // an epoch not ended yet
    let ix = h.post_root_ix(&attester.pubkey(), 1, tree.root(), tree.total(), 2);
    assert_error(h.send(&[ix], &[&attester]), GpunetError::EpochNotClaimable);
    h.next_epoch(10);
    let ix = h.post_root_ix(&stranger.pubkey(), 1, tree.root(), tree.total(), 2);
    assert_error(h.send(&[ix], &[&stranger]), GpunetError::NotAttester);
    let ix = h.post_root_ix(&attester.pubkey(), 1, tree.root(), EMISSION + 1, 2);
    assert_error(h.send(&[ix], &[&attester]), GpunetError::OverEmission);

    h.post_root(1, &tree).unwrap();
    // no replacement, even by an attester
    let ix = h.post_root_ix(&attester.pubkey(), 1, [7; 32], 1, 1);
    assert!(matches!(instruction_error(h.send(&[ix], &[&attester])), InstructionError::Custom(0)));
    assert_error(h.claim(1, &tree, 0), GpunetError::RootTimelocked);

    // the admin vetoes it in its timelock; a corrected root may then be posted
    let admin = h.admin.insecure_clone();
    assert_error(h.veto_root(&stranger, 1), GpunetError::NotAdmin);
    h.veto_root(&admin, 1).unwrap();
    assert_eq!(h.staking().reward_reserved, 0);
    h.post_root(1, &tree).unwrap();
    h.advance(ROOT_TIMELOCK_SECONDS);
    assert_error(h.veto_root(&admin, 1), GpunetError::RootAccepted);
    h.claim(1, &tree, 0).unwrap();
}

#[test]
fn a_root_the_vault_cannot_cover_is_refused_and_a_donation_funds_nothing() {
    let mut h = Harness::new();
    let s = h.supplier(1_000 * IO);
    h.open_pool(&s, 0).unwrap();
    h.fund_rewards(100 * IO).unwrap();
    // a plain transfer into the vault: a donation, counted nowhere
    let donor = h.delegator(500 * IO);
    let ix = anchor_spl::token::spl_token::instruction::transfer(
        &anchor_spl::token::spl_token::ID,
        &donor.tokens,
        &reward_vault_pda(),
        &donor.wallet.pubkey(),
        &[],
        500 * IO,
    )
    .unwrap();
    h.send(&[ix], &[&donor.wallet]).unwrap();
    h.next_epoch(10);
    let tree = RewardTree::new(vec![leaf(0, s.provider, 101 * IO, 0)], &h.mint.clone());
    assert_error(h.post_root(0, &tree), GpunetError::RewardsUnfunded);
    let covered = RewardTree::new(vec![leaf(0, s.provider, 100 * IO, 0)], &h.mint.clone());
    h.post_root(0, &covered).unwrap();
    // and nothing is left for another root
    h.next_epoch(10);
    let more = RewardTree::new(vec![leaf(1, s.provider, 1, 0)], &h.mint.clone());
    assert_error(h.post_root(1, &more), GpunetError::RewardsUnfunded);
    let st = h.staking();
    assert_eq!((st.reward_funded, st.reward_reserved, st.reward_paid), (100 * IO, 100 * IO, 0));
    assert_eq!(h.balance(&reward_vault_pda()), 600 * IO);
}

#[test]
fn a_reward_for_a_pool_without_delegators_goes_to_the_supplier() {
    let mut h = Harness::new();
    let s = h.supplier(1_000 * IO);
    h.open_pool(&s, 1_000).unwrap();
    h.fund_rewards(1_000 * IO).unwrap();
    h.next_epoch(10);
    h.next_epoch(10);
    let claimed = credit(&mut h, 1, leaf(1, s.provider, 30 * IO, 70 * IO));
    assert_eq!((claimed.to_supplier, claimed.to_delegators, claimed.eligible_shares), (100 * IO, 0, 0));
    assert_eq!((h.pool(&s).provider_rewards, h.pool(&s).delegator_rewards), (100 * IO, 0));
    h.withdraw_pool_rewards(&s).unwrap();
    assert_eq!(h.balance(&s.vault), h.stake_vault_books(&s.provider));
}

#[test]
fn anyone_cranks_claims_and_returns_what_nobody_claimed() {
    let mut h = Harness::new();
    let (s, other) = (h.supplier(1_000 * IO), h.supplier(1_000 * IO));
    h.open_pool(&s, 0).unwrap();
    h.open_pool(&other, 0).unwrap();
    h.fund_rewards(1_000 * IO).unwrap();
    h.next_epoch(10);
    h.next_epoch(10);
    let tree =
        RewardTree::new(vec![leaf(1, s.provider, 60 * IO, 0), leaf(1, other.provider, 40 * IO, 0)], &h.mint.clone());
    h.post_root(1, &tree).unwrap();
    h.advance(ROOT_TIMELOCK_SECONDS);
    h.claim(1, &tree, 0).unwrap(); // cranked by a stranger
    assert_eq!(h.pool(&s).provider_rewards, 60 * IO);
    // nobody claims the other pool's leaf within the window
    for _ in 0..CLAIM_EPOCHS {
        h.next_epoch(10);
    }
    assert_error(h.claim(1, &tree, 1), GpunetError::EpochNotClaimable);
    let stranger = h.wallet();
    let reserved = h.staking().reward_reserved;
    h.expire_root(&stranger, 1).unwrap();
    assert_eq!(h.staking().reward_reserved, reserved - 40 * IO);
    assert_eq!(h.staking().reward_free().unwrap(), 1_000 * IO - 60 * IO);
    assert!(!h.exists(&reward_root_pda(1)));
    // the pool moves past the epoch it never claimed, and past an epoch without any root
    h.skip_epoch(&other.provider).unwrap();
    assert_eq!(h.account::<gpunet::state::Pool>(&pool_pda(&other.provider)).credited_through, 1);
    assert_error(h.skip_epoch(&other.provider), GpunetError::ClaimWindowOpen);
    h.next_epoch(10);
    h.skip_epoch(&other.provider).unwrap(); // epoch 2: no root, window over
    assert_eq!(h.balance(&reward_vault_pda()), 1_000 * IO - 60 * IO);
}

#[test]
fn a_position_earns_through_its_exit_epoch_and_not_after() {
    let World { mut h, s, early, p_early } = world();
    let stays = h.delegator(1_000 * IO);
    let p_stays = h.delegate(&stays, &s.provider, 1_000 * IO).unwrap(); // earns from epoch 2
    h.next_epoch(10);
    h.undelegate(&early, &p_early).unwrap(); // in epoch 2: earns epochs 1 and 2
    h.next_epoch(10);
    h.next_epoch(10);
    for epoch in 1..=3 {
        credit(&mut h, epoch, leaf(epoch, s.provider, 0, 100 * IO));
    }
    // epoch 1: early alone (90); epoch 2: half each (45); epoch 3: stays alone (90)
    h.withdraw_delegation(&early, &p_early).unwrap();
    assert!(h.exists(&p_early.delegation), "not closed before its rewards are collected");
    let (alone, half) = ((90 * IO, 1_000 * IO), (90 * IO, 2_000 * IO));
    assert_eq!(collected(&mut h, &early, &p_early), earned(1_000 * IO, &[alone, half]));
    assert!(!h.exists(&p_early.delegation));
    assert_eq!(collected(&mut h, &stays, &p_stays), earned(1_000 * IO, &[half, alone]));
    assert_eq!(h.account::<Delegation>(&p_stays.delegation).reward_epoch, 3);
    assert_eq!(h.balance(&s.vault), h.stake_vault_books(&s.provider));
}

#[test]
fn a_slash_takes_the_suppliers_unclaimed_rewards_first() {
    let World { mut h, s, .. } = world();
    let node = h.node(&s, h100_spec(1));
    h.next_epoch(10);
    credit(&mut h, 1, leaf(1, s.provider, 150 * IO, 0));
    // 10 % of own 2,000 (a liveness fault): 200, the 150 unclaimed first, then 50 of own stake
    let ev: ProviderSlashed = event(&h.slash(&node, FaultKind::MissedHeartbeats, None).unwrap());
    assert_eq!((ev.amount, ev.from_rewards, ev.from_own, ev.from_delegated), (200 * IO, 150 * IO, 50 * IO, 0));
    assert_eq!((h.pool(&s).provider_rewards, h.provider(&s).staked), (0, 1_950 * IO));
    assert_eq!(h.provider(&s).delegated, 1_000 * IO);
    assert_eq!(h.balance(&s.vault), h.stake_vault_books(&s.provider));
}

#[test]
fn the_emission_changes_only_from_the_next_epoch() {
    let World { mut h, s, .. } = world();
    h.update_staking(|p| p.emission_per_epoch = EMISSION / 2).unwrap();
    assert_error(h.update_staking(|p| p.epoch_seconds = EPOCH_SECONDS + 1), GpunetError::EpochLengthFixed);
    h.next_epoch(10);
    // epoch 1 ran under the old emission: a root of all of it is accepted
    let full = RewardTree::new(vec![leaf(1, s.provider, EMISSION, 0)], &h.mint.clone());
    h.post_root(1, &full).unwrap();
    h.next_epoch(10);
    let over = RewardTree::new(vec![leaf(2, s.provider, EMISSION / 2 + 1, 0)], &h.mint.clone());
    assert_error(h.post_root(2, &over), GpunetError::OverEmission);
    let at = RewardTree::new(vec![leaf(2, s.provider, EMISSION / 2, 0)], &h.mint.clone());
    h.post_root(2, &at).unwrap();
}
