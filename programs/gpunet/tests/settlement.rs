//! Settlement: signed usage pays the provider minus the protocol fee out of escrow, and
//! every usage-proof attack is refused on chain.

use crate::harness::builders::ed25519_ix;
use crate::harness::*;
use anchor_lang::error::ErrorCode as AnchorError;
use anchor_lang::prelude::{AccountMeta, Pubkey};
use gpunet::errors::GpunetError;
use gpunet::events::UsageSettled;
use gpunet::state::{Lease, Provider, UsageReport};
use solana_signer::Signer;
use solana_transaction_error::TransactionError;

struct Story {
    h: Harness,
    node: GpuNode,
    other: GpuNode,
    client: Client,
    lease: LeaseRef,
}

/// One supplier, two 2-GPU nodes at 2 IO/GPU-hour, a 2-GPU lease on `node`, 60 s later.
fn story() -> Story {
    let mut h = Harness::new();
    let s = h.supplier(1_000 * IO);
    let node = h.node(&s, h100_spec(2));
    let other = h.node(&s, h100_spec(2));
    let client = h.client(1_000 * IO);
    let lease = h.open_lease(&client, 1, terms(2, 1));
    h.assign(&lease, &[(&node, 2)]).unwrap();
    h.advance(60);
    Story { h, node, other, client, lease }
}

fn last_seq(h: &Harness, lease: &LeaseRef) -> u64 {
    h.account::<Lease>(&lease.lease).assignments()[0].last_seq
}

#[test]
fn a_signed_report_pays_the_provider_minus_the_fee() {
    let Story { mut h, node, lease, .. } = story();
    let report = h.full_use_report(&lease, &node, 60);
    assert_eq!(report.gpu_seconds, 120);
    let provider_before = h.balance(&node.payout_tokens);

    let meta = h.settle(&lease, &node, report).unwrap();
    let ev: UsageSettled = event(&meta);
    let amount = 2 * IO * 120 / 3_600; // price x GPU-seconds / 3600
    let fee = (amount * u64::from(FEE_BPS)).div_ceil(10_000); // the fee rounds up
    assert_eq!((ev.amount, ev.fee, ev.payout), (amount, fee, amount - fee));
    assert_eq!((ev.seq, ev.gpu_seconds, ev.node, ev.provider), (1, 120, node.node, node.provider));
    assert_eq!(ev.escrow_left, 6 * IO - amount);

    assert_eq!(h.balance(&node.payout_tokens), provider_before + amount - fee);
    assert_eq!(h.balance(&h.treasury.clone()), fee);
    assert_eq!(h.balance(&lease.vault), 6 * IO - amount);
    let state: Lease = h.account(&lease.lease);
    assert_eq!((state.paid, state.fees), (amount - fee, fee));
    let share = state.assignments()[0];
    assert_eq!((share.last_seq, share.settled_until, share.gpu_seconds), (1, report.period_end, 120));
    assert_eq!(h.account::<Provider>(&node.provider).earned, amount - fee);
}

#[test]
fn several_reports_settle_in_one_transaction() {
    let mut h = Harness::new();
    let s1 = h.supplier(1_000 * IO);
    let s2 = h.supplier(1_000 * IO);
    let a = h.node(&s1, h100_spec(1));
    let b = h.node(&s2, h100_spec(1));
    let client = h.client(1_000 * IO);
    let lease = h.open_lease(&client, 1, terms(2, 1));
    h.assign(&lease, &[(&a, 1), (&b, 1)]).unwrap();
    h.advance(120);
    let first_a = UsageReport { seq: 1, period_start: h.now() - 120, period_end: h.now() - 60, gpu_seconds: 60 };
    let second_a = UsageReport { seq: 2, period_start: h.now() - 60, period_end: h.now(), gpu_seconds: 60 };
    let first_b = UsageReport { seq: 1, period_start: h.now() - 120, period_end: h.now() - 60, gpu_seconds: 45 };
    let mut ixs = Vec::new();
    ixs.extend(h.usage_ixs(&lease, &a, first_a));
    ixs.extend(h.usage_ixs(&lease, &b, first_b));
    ixs.extend(h.usage_ixs(&lease, &a, second_a));
    let attester = h.attester.insecure_clone();
    let meta = h.send(&ixs, &[&attester]).unwrap();
    let settled = events::<UsageSettled>(&meta);
    assert_eq!(
        settled.iter().map(|e| (e.node, e.seq)).collect::<Vec<_>>(),
        vec![(a.node, 1), (b.node, 1), (a.node, 2)]
    );
    let state: Lease = h.account(&lease.lease);
    assert_eq!((state.assignments()[0].last_seq, state.assignments()[1].last_seq), (2, 1));
    assert_eq!((state.assignments()[0].gpu_seconds, state.assignments()[1].gpu_seconds), (120, 45));
}

#[test]
fn usage_stops_at_the_lease_end_so_the_escrow_always_covers_it() {
    let mut h = Harness::new();
    let s = h.supplier(1_000 * IO);
    let mut spec = h100_spec(1);
    spec.price_per_gpu_hour = 3 * IO; // the client's maximum: the escrow is used to the unit
    let node = h.node(&s, spec);
    let client = h.client(1_000 * IO);
    let mut t = terms(1, 1);
    t.duration_seconds = 30; // escrow for 30 GPU-seconds at 3 IO/h = 25,000 base units
    let lease = h.open_lease(&client, 1, t);
    let deposit = h.balance(&lease.vault);
    h.assign(&lease, &[(&node, 1)]).unwrap();
    h.advance(60);
    let past_the_end = h.full_use_report(&lease, &node, 60);
    assert_error(h.settle(&lease, &node, past_the_end), GpunetError::BadPeriod);
    let start = h.now() - 60;
    let to_the_end = UsageReport { seq: 1, period_start: start, period_end: start + 30, gpu_seconds: 30 };
    let ev: UsageSettled = event(&h.settle(&lease, &node, to_the_end).unwrap());
    assert_eq!(ev.amount, deposit);
    assert_eq!((ev.escrow_left, h.balance(&lease.vault)), (0, 0));
    // spent escrow: anyone may close now
    let stranger = h.wallet();
    h.close(&stranger, &lease, &client.tokens).unwrap();
}

#[test]
fn forged_signature_is_refused_by_the_precompile() {
    let Story { mut h, node, lease, .. } = story();
    let report = h.full_use_report(&lease, &node, 60);
    let [mut sig_ix, settle_ix] = h.usage_ixs(&lease, &node, report);
    sig_ix.data[48] ^= 0xff; // corrupt the signature
    let attester = h.attester.insecure_clone();
    let failed = h.send(&[sig_ix, settle_ix], &[&attester]).unwrap_err();
    assert!(matches!(failed.err, TransactionError::InstructionError(0, _)), "got {:?}", failed.err);
    assert_eq!(last_seq(&h, &lease), 0);
}

#[test]
fn a_report_signed_by_another_node_key_is_refused() {
    let Story { mut h, node, other, lease, .. } = story();
    let report = h.full_use_report(&lease, &node, 60);
    let message = report.message(&lease.lease, &node.key.pubkey());
    let sig_ix = ed25519_ix(&other.key, &message);
    let settle_ix = h.settle_usage_ix(&h.attester.pubkey(), &lease, &node, report);
    let attester = h.attester.insecure_clone();
    assert_error(h.send(&[sig_ix, settle_ix], &[&attester]), GpunetError::WrongSigner);
    // and a node not in the lease cannot settle with its own valid signature
    let report = UsageReport { seq: 1, ..report };
    assert_error(h.settle(&lease, &other, report), GpunetError::NodeNotInLease);
}

#[test]
fn replayed_sequence_numbers_are_refused_and_a_skipped_one_is_forfeited() {
    let Story { mut h, node, lease, .. } = story();
    let report = h.full_use_report(&lease, &node, 60);
    h.settle(&lease, &node, report).unwrap();
    assert_error(h.settle(&lease, &node, report), GpunetError::BadSequence);
    // seq 2 was refused by the attester (never sent): seq 3 still settles, so a refused report
    // never blocks the node's later usage
    h.advance(60);
    let refused = h.full_use_report(&lease, &node, 60);
    h.advance(60);
    let next = UsageReport { seq: 3, ..h.full_use_report(&lease, &node, 60) };
    h.settle(&lease, &node, next).unwrap();
    assert_eq!(last_seq(&h, &lease), 3);
    // ...and the skipped report can no longer be paid (its seq and its period are behind)
    assert_error(h.settle(&lease, &node, refused), GpunetError::BadSequence);
    let late = UsageReport { seq: 4, ..refused };
    assert_error(h.settle(&lease, &node, late), GpunetError::BadPeriod);
}

#[test]
fn over_claimed_gpu_seconds_are_refused() {
    let Story { mut h, node, lease, .. } = story();
    let mut report = h.full_use_report(&lease, &node, 60);
    report.gpu_seconds += 1; // 2 GPUs x 60 s = 120 at most
    assert_error(h.settle(&lease, &node, report), GpunetError::OverClaimed);
    assert_eq!(last_seq(&h, &lease), 0);
}

#[test]
fn periods_must_be_past_non_overlapping_and_at_most_one_usage_period() {
    let Story { mut h, node, lease, .. } = story();
    let now = h.now();
    let bad = [
        UsageReport { seq: 1, period_start: now - 30, period_end: now + 30, gpu_seconds: 1 }, // future
        UsageReport { seq: 1, period_start: now, period_end: now, gpu_seconds: 0 },           // empty
        UsageReport { seq: 1, period_start: now - 61, period_end: now, gpu_seconds: 1 },      // before the lease
    ];
    for report in bad {
        assert_error(h.settle(&lease, &node, report), GpunetError::BadPeriod);
    }
    h.advance(120);
    let too_long = UsageReport { seq: 1, period_start: h.now() - 61, period_end: h.now(), gpu_seconds: 1 };
    assert_error(h.settle(&lease, &node, too_long), GpunetError::BadPeriod);
    let first = UsageReport { seq: 1, period_start: h.now() - 60, period_end: h.now(), gpu_seconds: 1 };
    h.settle(&lease, &node, first).unwrap();
    let overlapping = UsageReport { seq: 2, period_start: h.now() - 1, period_end: h.now(), gpu_seconds: 1 };
    h.advance(1);
    let overlapping = UsageReport { period_end: h.now(), ..overlapping };
    assert_error(h.settle(&lease, &node, overlapping), GpunetError::BadPeriod);
}

#[test]
fn a_proof_for_another_lease_is_refused() {
    let Story { mut h, node, client, lease, .. } = story();
    let other_lease = LeaseRef::new(client.wallet.pubkey(), 2);
    let report = h.full_use_report(&lease, &node, 60);
    let message = report.message(&other_lease.lease, &node.key.pubkey());
    let sig_ix = ed25519_ix(&node.key, &message);
    let settle_ix = h.settle_usage_ix(&h.attester.pubkey(), &lease, &node, report);
    let attester = h.attester.insecure_clone();
    assert_error(h.send(&[sig_ix, settle_ix], &[&attester]), GpunetError::MessageMismatch);
}

#[test]
fn a_one_byte_change_to_the_signed_message_is_refused() {
    let Story { mut h, node, lease, .. } = story();
    let report = h.full_use_report(&lease, &node, 60);
    for byte in [0usize, 20, 60, 100, 112, 125, 130, 143] {
        let mut message = report.message(&lease.lease, &node.key.pubkey()).to_vec();
        message[byte] ^= 1;
        let sig_ix = ed25519_ix(&node.key, &message); // validly signed, but not this report
        let settle_ix = h.settle_usage_ix(&h.attester.pubkey(), &lease, &node, report);
        let attester = h.attester.insecure_clone();
        assert_error(h.send(&[sig_ix, settle_ix], &[&attester]), GpunetError::MessageMismatch);
    }
    h.settle(&lease, &node, report).unwrap();
}

#[test]
fn a_missing_or_misplaced_ed25519_instruction_is_refused() {
    let Story { mut h, node, lease, .. } = story();
    let report = h.full_use_report(&lease, &node, 60);
    let [sig_ix, settle_ix] = h.usage_ixs(&lease, &node, report);
    let attester = h.attester.insecure_clone();
    assert_error(h.send(std::slice::from_ref(&settle_ix), &[&attester]), GpunetError::MissingEd25519Instruction);
    // an unrelated instruction between the signature and the settlement
    let noop = solana_system_interface::instruction::transfer(&attester.pubkey(), &attester.pubkey(), 1);
    assert_error(
        h.send(&[sig_ix.clone(), noop, settle_ix.clone()], &[&attester]),
        GpunetError::MissingEd25519Instruction,
    );
    // the right bytes, but the offsets point at data in another instruction
    let mut elsewhere = sig_ix.clone();
    elsewhere.data[2 + 12..2 + 14].copy_from_slice(&1u16.to_le_bytes()); // message_instruction_index = 1
    let failed = h.send(&[elsewhere, settle_ix.clone()], &[&attester]);
    assert!(failed.is_err());
    // two signatures in one Ed25519 instruction: we accept exactly one
    let mut two = sig_ix.clone();
    two.data[0] = 2;
    assert!(h.send(&[two, settle_ix.clone()], &[&attester]).is_err());
    assert_eq!(last_seq(&h, &lease), 0);
    h.send(&[sig_ix, settle_ix], &[&attester]).unwrap();
}

#[test]
fn only_an_attester_settles_and_only_to_the_provider() {
    let Story { mut h, node, lease, .. } = story();
    let report = h.full_use_report(&lease, &node, 60);
    let outsider = h.wallet();
    let message = report.message(&lease.lease, &node.key.pubkey());
    let settle_ix = h.settle_usage_ix(&outsider.pubkey(), &lease, &node, report);
    assert_error(h.send(&[ed25519_ix(&node.key, &message), settle_ix], &[&outsider]), GpunetError::NotAttester);

    // payout redirected to someone else's token account
    let thief_tokens = h.token_account(&outsider.pubkey());
    let [sig_ix, mut settle_ix] = h.usage_ixs(&lease, &node, report);
    settle_ix.accounts[6].pubkey = thief_tokens;
    let attester = h.attester.insecure_clone();
    assert_error(h.send(&[sig_ix, settle_ix], &[&attester]), AnchorError::ConstraintTokenOwner);

    // fake instructions sysvar (an account the attacker controls, with forged content)
    let fake = Pubkey::new_unique();
    let [sig_ix, mut settle_ix] = h.usage_ixs(&lease, &node, report);
    settle_ix.accounts[8] = AccountMeta::new_readonly(fake, false);
    assert_error(h.send(&[sig_ix, settle_ix], &[&attester]), GpunetError::AccountMismatch);
    assert_eq!(last_seq(&h, &lease), 0);
}
