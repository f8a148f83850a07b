//! Co-staking: delegations held as shares, collateral up to the cap, own stake as the first-loss
//! tranche, exits through unbonding cohorts, and which slashes reach delegators.

use crate::harness::*;
use gpunet::errors::GpunetError;
use gpunet::events::{ProviderSlashed, Undelegated};
use gpunet::state::{Cohort, Delegation, FaultKind, Provider};
use solana_signer::Signer;

/// A supplier with `own` IO staked and an open pool at 10 % commission.
fn pooled_supplier(h: &mut Harness, own: u64) -> Supplier {
    let s = h.supplier(own);
    h.open_pool(&s, 1_000).unwrap();
    s
}

fn slash_at(h: &mut Harness, node: &GpuNode, fault: FaultKind, fault_at: i64) -> ProviderSlashed {
    let attester = h.attester.insecure_clone();
    let ix = h.slash_at_ix(&attester.pubkey(), node, fault, None, solana_pubkey(), fault_at);
    event(&h.send(&[ix], &[&attester]).unwrap())
}

fn slash_now(h: &mut Harness, node: &GpuNode, fault: FaultKind) -> ProviderSlashed {
    let now = h.now();
    slash_at(h, node, fault, now)
}

fn solana_pubkey() -> [u8; 32] {
    anchor_lang::prelude::Pubkey::new_unique().to_bytes()
}

#[test]
fn a_delegation_buys_shares_backs_nodes_and_comes_back_whole_after_unbonding() {
    let mut h = Harness::new();
    let s = pooled_supplier(&mut h, 1_000 * IO);
    let d = h.delegator(1_000 * IO);
    let p = h.delegate(&d, &s.provider, 400 * IO).unwrap();
    let position: Delegation = h.account(&p.delegation);
    assert_eq!((position.shares, position.since), (400 * IO, h.epoch() + 1));
    let provider = h.provider(&s);
    assert_eq!(
        (provider.delegated, provider.delegated_shares, provider.collateral()),
        (400 * IO, 400 * IO, 1_400 * IO)
    );

    // 14 GPUs' worth of collateral: own 1,000 + delegated 400, at 100 IO a GPU
    h.node(&s, h100_spec(8));
    h.node(&s, h100_spec(6));
    let key = solana_keypair::Keypair::new();
    let ix = h.register_node_ix(&s, &key.pubkey(), h100_spec(1));
    assert_error(h.send(&[ix], &[&s.wallet, &key]), GpunetError::InsufficientFreeStake);

    // the pool holds at most 1x the supplier's own stake
    let e = h.delegator(1_000 * IO);
    assert!(h.delegate(&e, &s.provider, 600 * IO + 1).is_err());
    h.delegate(&e, &s.provider, 600 * IO).unwrap();

    let undelegated: Undelegated = event(&h.undelegate(&d, &p).unwrap());
    assert_eq!(undelegated.amount, 400 * IO);
    let cohort: Cohort = h.account(&cohort_pda(&s.provider, h.epoch()));
    assert_eq!(cohort.starts_at, h.staking().epoch_start(h.epoch() + 1).unwrap());
    assert_eq!(cohort.ends_at, cohort.starts_at + UNBONDING_SECONDS);
    assert_error(h.undelegate(&d, &p), GpunetError::AlreadyUndelegated);
    h.next_epoch(UNBONDING_SECONDS - 1);
    assert_error(h.withdraw_delegation(&d, &p), GpunetError::StillUnbonding);
    h.advance(1);
    h.withdraw_delegation(&d, &p).unwrap();
    assert_eq!(h.balance(&d.tokens), 1_000 * IO);
    assert!(!h.exists(&p.delegation), "a withdrawn position with nothing left to earn closes");
    assert_eq!(h.balance(&s.vault), h.stake_vault_books(&s.provider));
}

#[test]
fn a_stranger_cannot_move_or_withdraw_anothers_position() {
    let mut h = Harness::new();
    let s = pooled_supplier(&mut h, 1_000 * IO);
    let d = h.delegator(100 * IO);
    let p = h.delegate(&d, &s.provider, 100 * IO).unwrap();
    let thief = h.delegator(0);
    // the thief signs with its own wallet for the victim's position: the PDA and has_one refuse
    assert!(h.undelegate(&thief, &p).is_err());
    assert!(h.account::<Delegation>(&p.delegation).is_active());
    h.undelegate(&d, &p).unwrap();
    h.next_epoch(UNBONDING_SECONDS);
    assert!(h.withdraw_delegation(&thief, &p).is_err());
    assert_eq!(h.balance(&thief.tokens), 0);
    h.withdraw_delegation(&d, &p).unwrap(); // control: the owner can
    assert_eq!(h.balance(&d.tokens), 100 * IO);
}

#[test]
fn a_supplier_cannot_unstake_below_the_stake_its_delegations_rely_on() {
    let mut h = Harness::new();
    let s = pooled_supplier(&mut h, 1_000 * IO);
    let d = h.delegator(800 * IO);
    h.delegate(&d, &s.provider, 800 * IO).unwrap();
    assert_error(h.send(&[h.request_unstake_ix(&s, 200 * IO + 1)], &[&s.wallet]), GpunetError::DelegationsRelyOnStake);
    h.send(&[h.request_unstake_ix(&s, 200 * IO)], &[&s.wallet]).unwrap(); // control: down to 1x
    assert_eq!(h.provider(&s).staked, 800 * IO);
}

#[test]
fn a_liveness_fault_never_reaches_delegated_principal() {
    let mut h = Harness::new();
    h.update_config(|p| p.slash_bps = [10_000, 8_000, 8_000]).unwrap();
    let s = pooled_supplier(&mut h, 1_000 * IO);
    let node = h.node(&s, h100_spec(1));
    let d = h.delegator(1_000 * IO);
    h.delegate(&d, &s.provider, 1_000 * IO).unwrap();

    // missed heartbeats at 100 %: the supplier's own stake goes, the delegators' stays
    let ev = slash_now(&mut h, &node, FaultKind::MissedHeartbeats);
    assert_eq!((ev.amount, ev.from_own, ev.from_delegated), (1_000 * IO, 1_000 * IO, 0));
    assert_eq!(h.provider(&s).delegated, 1_000 * IO);

    // control: a malicious fault at 80 % of all at risk reaches them once own stake is gone
    let t = h.supplier(1_000 * IO);
    h.open_pool(&t, 0).unwrap();
    let bad = h.node(&t, h100_spec(1));
    assert_error(h.delegate(&d, &t.provider, 0).unwrap_err(), GpunetError::ZeroAmount);
    let e = h.delegator(1_000 * IO);
    h.delegate(&e, &t.provider, 1_000 * IO).unwrap();
    let ev = slash_now(&mut h, &bad, FaultKind::InvalidUsage);
    assert_eq!((ev.amount, ev.from_own, ev.from_delegated), (1_600 * IO, 1_000 * IO, 600 * IO));
    assert_eq!(h.provider(&t).delegated, 400 * IO);
    assert_eq!(h.balance(&t.vault), h.stake_vault_books(&t.provider));
}

#[test]
fn unbonding_after_a_fault_still_pays_for_it_and_unbonding_before_does_not() {
    let mut h = Harness::new();
    h.update_config(|p| p.slash_bps = [1_000, 8_000, 8_000]).unwrap();
    let s = pooled_supplier(&mut h, 1_000 * IO);
    let node = h.node(&s, h100_spec(1));
    let (early, stays, late) = (h.delegator(300 * IO), h.delegator(300 * IO), h.delegator(300 * IO));
    let p_early = h.delegate(&early, &s.provider, 300 * IO).unwrap();
    h.delegate(&stays, &s.provider, 300 * IO).unwrap();
    let p_late = h.delegate(&late, &s.provider, 300 * IO).unwrap();
    h.undelegate(&early, &p_early).unwrap(); // its stake stops backing the pool when epoch 0 ends

    h.next_epoch(100);
    let fault_at = h.now(); // committed in epoch 1, after the early cohort began
    h.advance(100);
    h.undelegate(&late, &p_late).unwrap(); // leaves after the fault, before its evidence lands
    h.advance(100);

    // 80 % of own 1,000 + active 300 + the late cohort 300 = 1,280: own first, then 280 pro rata
    let ev = slash_at(&mut h, &node, FaultKind::InvalidUsage, fault_at);
    assert_eq!((ev.amount, ev.from_own, ev.from_delegated, ev.fault_at), (1_280 * IO, 1_000 * IO, 280 * IO, fault_at));
    assert_eq!(h.provider(&s).delegated, 160 * IO);
    let late_cohort: Cohort = h.account(&cohort_pda(&s.provider, 1));
    assert_eq!(late_cohort.stake, 160 * IO);
    let early_cohort: Cohort = h.account(&cohort_pda(&s.provider, 0));
    assert_eq!(early_cohort.stake, 300 * IO, "the cohort that left before the fault is not reached");

    h.next_epoch(UNBONDING_SECONDS);
    h.withdraw_delegation(&early, &p_early).unwrap();
    h.withdraw_delegation(&late, &p_late).unwrap();
    assert_eq!((h.balance(&early.tokens), h.balance(&late.tokens)), (300 * IO, 160 * IO));
    assert_eq!(h.balance(&s.vault), h.stake_vault_books(&s.provider));
}

#[test]
fn a_slash_must_name_every_cohort_it_reaches() {
    let mut h = Harness::new();
    let s = pooled_supplier(&mut h, 1_000 * IO);
    let node = h.node(&s, h100_spec(1));
    let d = h.delegator(300 * IO);
    let p = h.delegate(&d, &s.provider, 300 * IO).unwrap();
    h.undelegate(&d, &p).unwrap();
    let attester = h.attester.insecure_clone();
    let mut ix = h.slash_at_ix(&attester.pubkey(), &node, FaultKind::InvalidUsage, None, solana_pubkey(), h.now());
    let cohort = ix.accounts.pop().unwrap(); // the attester leaves the cohort out
    assert_error(h.send(&[ix.clone()], &[&attester]), GpunetError::CohortsMismatch);
    // or passes the pool's address where the cohort belongs
    ix.accounts.push(anchor_lang::prelude::AccountMeta::new(pool_pda(&s.provider), false));
    assert_error(h.send(&[ix.clone()], &[&attester]), GpunetError::CohortsMismatch);
    ix.accounts.pop();
    ix.accounts.push(cohort);
    h.send(&[ix], &[&attester]).unwrap();
    // and the provider's pool itself can never be left out
    let other = h.node(&s, h100_spec(1));
    let mut ix = h.slash_at_ix(&attester.pubkey(), &other, FaultKind::MissedHeartbeats, None, solana_pubkey(), h.now());
    let pool_index = ix.accounts.iter().position(|a| a.pubkey == pool_pda(&s.provider)).unwrap();
    ix.accounts[pool_index].pubkey = gpunet::ID; // Anchor's "None" for an optional account
    ix.accounts[pool_index].is_writable = false;
    assert_error(h.send(&[ix], &[&attester]), GpunetError::PoolMissing);
}

#[test]
fn slashes_in_one_epoch_are_capped() {
    let mut h = Harness::new();
    h.update_staking(|p| p.slash_cap_bps = 1_500).unwrap();
    let s = pooled_supplier(&mut h, 1_000 * IO);
    let (a, b, c) = (h.node(&s, h100_spec(1)), h.node(&s, h100_spec(1)), h.node(&s, h100_spec(1)));
    assert_eq!(slash_now(&mut h, &a, FaultKind::MissedHeartbeats).amount, 100 * IO);
    // 10 % of the 900 left would be 90, but the epoch's cap (15 % of 1,000) leaves 50
    assert_eq!(slash_now(&mut h, &b, FaultKind::MissedHeartbeats).amount, 50 * IO);
    // a new epoch, a new cap: control
    h.next_epoch(0);
    assert_eq!(slash_now(&mut h, &c, FaultKind::MissedHeartbeats).amount, 85 * IO);
    assert_eq!(h.provider(&s).slashed, 235 * IO);
}

#[test]
fn a_fault_time_in_the_future_is_refused_and_an_older_one_reaches_back_only_to_the_unbonding_period() {
    let mut h = Harness::new();
    let s = pooled_supplier(&mut h, 1_000 * IO);
    let node = h.node(&s, h100_spec(1));
    h.advance(2 * SETTLE_WINDOW_SECONDS.max(UNBONDING_SECONDS));
    let attester = h.attester.insecure_clone();
    let ix = h.slash_at_ix(&attester.pubkey(), &node, FaultKind::MissedHeartbeats, None, solana_pubkey(), h.now() + 1);
    assert_error(h.send(&[ix], &[&attester]), GpunetError::InvalidFaultTime);
    assert_eq!(h.account::<Provider>(&s.provider).slashed, 0);
    let oldest = h.now() - SETTLE_WINDOW_SECONDS.max(UNBONDING_SECONDS);
    // 0: the attester does not know when; the evidence records the oldest time that still matters
    let ev = slash_at(&mut h, &node, FaultKind::MissedHeartbeats, 0);
    assert_eq!(ev.fault_at, oldest);
}

#[test]
fn a_deployment_without_staking_slashes_with_no_epoch_cap() {
    let mut h = Harness::uninitialised();
    let params = h.default_params();
    h.send(&[h.initialize_ix(&params)], &[&h.admin.insecure_clone()]).unwrap();
    let s = h.supplier(1_000 * IO);
    let node = h.node(&s, h100_spec(1));
    assert!(!h.exists(&staking_pda()));
    let ev = slash_now(&mut h, &node, FaultKind::InvalidUsage);
    assert_eq!((ev.amount, ev.from_own), (500 * IO, 500 * IO));
    // and nobody can open a pool before the staking config exists
    assert!(h.open_pool(&s, 0).is_err());
}
