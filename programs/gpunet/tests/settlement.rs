//! Settlement: a node's signed cumulative receipt pays the provider the cost of its increment over
//! what is settled, minus the protocol fee, out of escrow; the fee stays in the lease until swept;
//! every usage-proof attack is refused on chain (each next to an honest control that passes).

use crate::harness::builders::ed25519_ix;
use crate::harness::*;
use anchor_lang::error::ErrorCode as AnchorError;
use anchor_lang::prelude::{AccountMeta, Pubkey};
use gpunet::errors::GpunetError;
use gpunet::events::{FeesSwept, LeaseFinalized, UsageSettled};
use gpunet::state::{Lease, Receipt};
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

/// The cumulative GPU-seconds of the share's last settled receipt.
fn settled(h: &Harness, lease: &LeaseRef) -> u64 {
    h.account::<Lease>(&lease.lease).assignments()[0].receipt_gpu_seconds
}

/// What `gpu_seconds` cost at the story's 2 IO per GPU-hour, and its fee.
fn cost(gpu_seconds: u64) -> (u64, u64) {
    let amount = 2 * IO * gpu_seconds / 3_600;
    (amount, (amount * u64::from(FEE_BPS)).div_ceil(10_000)) // the fee rounds up
}

#[test]
fn a_signed_receipt_pays_the_provider_and_keeps_the_fee_in_the_lease() {
    let Story { mut h, node, lease, .. } = story();
    let receipt = h.full_use_receipt(&lease, &node, 60);
    assert_eq!((receipt.epoch, receipt.gpu_seconds, receipt.through), (1, 120, h.now()));
    let provider_before = h.balance(&node.payout_tokens);

    let ev: UsageSettled = event(&h.settle(&lease, &node, receipt).unwrap());
    let (amount, fee) = cost(120);
    assert_eq!((ev.amount, ev.fee, ev.payout), (amount, fee, amount - fee));
    assert_eq!((ev.epoch, ev.receipt_gpu_seconds, ev.through, ev.gpu_seconds), (1, 120, h.now(), 120));
    assert_eq!((ev.node, ev.provider, ev.escrow_left), (node.node, node.provider, 6 * IO - amount));

    assert_eq!(h.balance(&node.payout_tokens), provider_before + amount - fee);
    // no treasury write: the fee stays in the lease's vault
    assert_eq!(h.balance(&h.treasury.clone()), 0);
    assert_eq!(h.balance(&lease.vault), 6 * IO - amount + fee);
    let state: Lease = h.account(&lease.lease);
    assert_eq!((state.paid, state.fees, state.fees_swept), (amount - fee, fee, 0));
    let share = state.assignments()[0];
    assert_eq!((share.settled_until, share.receipt_gpu_seconds, share.gpu_seconds), (h.now(), 120, 120));
}

#[test]
fn a_later_receipt_pays_only_its_increment_and_the_total_is_the_cost_of_the_total() {
    let Story { mut h, node, lease, .. } = story();
    let provider_before = h.balance(&node.payout_tokens);
    // 1 GPU-second costs 555.5 base units: settled in uneven pieces, no unit is lost to rounding
    let mut paid = 0;
    for seconds in [1, 7, 13, 39] {
        h.advance(seconds);
        let receipt = h.full_use_receipt(&lease, &node, seconds);
        let ev: UsageSettled = event(&h.settle(&lease, &node, receipt).unwrap());
        assert_eq!(ev.gpu_seconds, 2 * seconds as u64);
        paid += ev.amount;
    }
    let total = 2 * (1 + 7 + 13 + 39);
    assert_eq!(settled(&h, &lease), total);
    assert_eq!(paid, 2 * IO * total / 3_600);
    let state: Lease = h.account(&lease.lease);
    assert_eq!(state.paid + state.fees, paid);
    assert_eq!(h.balance(&node.payout_tokens), provider_before + state.paid);
}

#[test]
fn a_settlement_writes_no_treasury_and_no_provider_account() {
    let Story { mut h, node, lease, .. } = story();
    let receipt = h.full_use_receipt(&lease, &node, 60);
    let ixs = h.usage_ixs(&lease, &node, receipt);
    let attester = h.attester.pubkey();
    // the transaction's writable set: its fee payer and every account an instruction marks writable
    let mut writable: Vec<Pubkey> = vec![attester];
    writable.extend(ixs.iter().flat_map(|ix| ix.accounts.iter().filter(|m| m.is_writable).map(|m| m.pubkey)));
    writable.sort();
    writable.dedup();
    let mut expected = vec![attester, lease.lease, lease.vault, node.payout_tokens];
    expected.sort();
    assert_eq!(writable, expected, "only the lease, its vault and the supplier's own token account");
    assert!(!writable.contains(&h.treasury) && !writable.contains(&node.provider));
    assert!(!writable.contains(&config_pda()) && !writable.contains(&node.node));
    // ...and it settles as built
    let attester = h.attester.insecure_clone();
    h.send(&ixs, &[&attester]).unwrap();
    assert_eq!(settled(&h, &lease), 120);
}

#[test]
fn several_receipts_settle_in_one_transaction() {
    let mut h = Harness::new();
    let s1 = h.supplier(1_000 * IO);
    let s2 = h.supplier(1_000 * IO);
    let a = h.node(&s1, h100_spec(1));
    let b = h.node(&s2, h100_spec(1));
    let client = h.client(1_000 * IO);
    let lease = h.open_lease(&client, 1, terms(2, 1));
    h.assign(&lease, &[(&a, 1), (&b, 1)]).unwrap();
    h.advance(120);
    let (ea, eb) = (h.share(&lease, &a).epoch, h.share(&lease, &b).epoch);
    assert_eq!((ea, eb), (1, 2));
    let first_a = Receipt { epoch: ea, gpu_seconds: 60, through: h.now() - 60 };
    let second_a = Receipt { epoch: ea, gpu_seconds: 120, through: h.now() };
    let first_b = Receipt { epoch: eb, gpu_seconds: 45, through: h.now() - 60 };
    let mut ixs = Vec::new();
    ixs.extend(h.usage_ixs_accepting(&lease, &a, first_a, 60));
    ixs.extend(h.usage_ixs_accepting(&lease, &b, first_b, 45));
    ixs.extend(h.usage_ixs_accepting(&lease, &a, second_a, 60));
    let attester = h.attester.insecure_clone();
    let meta = h.send(&ixs, &[&attester]).unwrap();
    let settled = events::<UsageSettled>(&meta);
    assert_eq!(
        settled.iter().map(|e| (e.node, e.receipt_gpu_seconds)).collect::<Vec<_>>(),
        vec![(a.node, 60), (b.node, 45), (a.node, 120)]
    );
    let state: Lease = h.account(&lease.lease);
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
    let past_the_end = h.full_use_receipt(&lease, &node, 60);
    assert_error(h.settle(&lease, &node, past_the_end), GpunetError::BadPeriod);
    let to_the_end = Receipt { through: h.now() - 30, ..h.full_use_receipt(&lease, &node, 30) };
    let ev: UsageSettled = event(&h.settle(&lease, &node, to_the_end).unwrap());
    assert_eq!(ev.amount, deposit);
    assert_eq!(ev.escrow_left, 0);
    assert_eq!(h.balance(&lease.vault), ev.fee, "only the fee is left, for the treasury");
    // spent escrow: anyone may close now
    let stranger = h.wallet();
    h.close(&stranger, &lease, &client.tokens).unwrap();
}

/// Rewrites the lease's bookkeeping so that only `left` of its escrow remains (as if refunded).
/// The honest arithmetic never gets here (the escrow covers the maximum price x GPUs x duration
/// and the wall-time bound holds every share inside it): the cap is a safety net, exercised by hand.
fn shrink_escrow(h: &mut Harness, lease: &LeaseRef, left: u64) {
    use anchor_lang::AccountSerialize;
    let mut state: Lease = h.account(&lease.lease);
    state.refunded += state.escrow_left().unwrap() - left;
    let mut account = h.svm.get_account(&lease.lease).unwrap();
    let mut data = Vec::new();
    state.try_serialize(&mut data).unwrap();
    account.data[..data.len()].copy_from_slice(&data);
    h.svm.set_account(lease.lease, account).unwrap();
}

#[test]
fn a_settlement_capped_by_the_escrow_is_never_paid_again() {
    let Story { mut h, node, client, lease, .. } = story();
    h.settle(&lease, &node, h.full_use_receipt(&lease, &node, 30)).unwrap();
    h.advance(30);
    let left = 10_000; // 120 GPU-seconds cost 66,666
    shrink_escrow(&mut h, &lease, left);
    let capped = h.full_use_receipt(&lease, &node, 60);
    let ev: UsageSettled = event(&h.settle(&lease, &node, capped).unwrap());
    assert_eq!((ev.amount, ev.escrow_left, ev.gpu_seconds), (left, 0, 120));
    // the whole receipt counts as settled: with escrow again, the next receipt pays only the
    // seconds after the capped one, never the capped receipt's shortfall
    assert_eq!(h.share(&lease, &node).gpu_seconds, 180);
    h.send(&[h.top_up_lease_ix(&client, &lease, 600)], &[&client.wallet]).unwrap();
    assert_error(h.settle(&lease, &node, capped), GpunetError::BadSequence);
    h.advance(10);
    let ev: UsageSettled = event(&h.settle(&lease, &node, h.full_use_receipt(&lease, &node, 10)).unwrap());
    assert_eq!(ev.amount, cost(200).0 - cost(180).0);
}

#[test]
fn the_attester_pays_only_what_it_accepts_and_the_rest_is_forfeited() {
    let Story { mut h, node, lease, .. } = story();
    let receipt = h.full_use_receipt(&lease, &node, 60);
    // the attester saw the node offline for half the time: it accepts 60 of the 120 GPU-seconds
    let attester = h.attester.insecure_clone();
    let over = h.usage_ixs_accepting(&lease, &node, receipt, 121);
    assert_error(h.send(&over, &[&attester]), GpunetError::OverClaimed);
    let ev: UsageSettled = event(&h.send(&h.usage_ixs_accepting(&lease, &node, receipt, 60), &[&attester]).unwrap());
    assert_eq!((ev.gpu_seconds, ev.amount, ev.receipt_gpu_seconds), (60, cost(60).0, 120));
    let share = h.share(&lease, &node);
    assert_eq!((share.receipt_gpu_seconds, share.gpu_seconds), (120, 60));
    // the next receipt pays its own increment only
    h.advance(30);
    let ev: UsageSettled = event(&h.settle(&lease, &node, h.full_use_receipt(&lease, &node, 30)).unwrap());
    assert_eq!((ev.gpu_seconds, ev.amount), (60, cost(120).0 - cost(60).0));
}

#[test]
fn forged_signature_is_refused_by_the_precompile() {
    let Story { mut h, node, lease, .. } = story();
    let receipt = h.full_use_receipt(&lease, &node, 60);
    let [mut sig_ix, settle_ix] = h.usage_ixs(&lease, &node, receipt);
    sig_ix.data[48] ^= 0xff; // corrupt the signature
    let attester = h.attester.insecure_clone();
    let failed = h.send(&[sig_ix, settle_ix], &[&attester]).unwrap_err();
    assert!(matches!(failed.err, TransactionError::InstructionError(0, _)), "got {:?}", failed.err);
    assert_eq!(settled(&h, &lease), 0);
    h.settle(&lease, &node, receipt).unwrap(); // control
}

#[test]
fn another_nodes_receipt_is_refused() {
    let Story { mut h, node, other, lease, .. } = story();
    let receipt = h.full_use_receipt(&lease, &node, 60);
    // signed by another node's key
    let message = receipt.message(&lease.lease, &node.key.pubkey());
    let sig_ix = ed25519_ix(&other.key, &message);
    let settle_ix = h.settle_usage_ix(&h.attester.pubkey(), &lease, &node, receipt, 120);
    let attester = h.attester.insecure_clone();
    assert_error(h.send(&[sig_ix, settle_ix], &[&attester]), GpunetError::WrongSigner);
    // a node not in the lease cannot settle with its own valid signature
    assert_error(h.settle(&lease, &other, receipt), GpunetError::NodeNotInLease);
    // the node's own receipt settles
    h.settle(&lease, &node, receipt).unwrap();
    assert_eq!(settled(&h, &lease), 120);
}

#[test]
fn a_repeated_or_decreasing_receipt_is_refused() {
    let Story { mut h, node, lease, .. } = story();
    let receipt = h.full_use_receipt(&lease, &node, 60);
    h.settle(&lease, &node, receipt).unwrap();
    assert_error(h.settle(&lease, &node, receipt), GpunetError::BadSequence); // a repeat
    h.advance(30);
    let lower = Receipt { gpu_seconds: 100, through: h.now(), ..receipt };
    assert_error(h.settle(&lease, &node, lower), GpunetError::BadSequence); // decreasing
    let same = Receipt { through: h.now(), ..receipt };
    assert_error(h.settle(&lease, &node, same), GpunetError::BadSequence); // later, no more seconds
    let same_time = Receipt { gpu_seconds: 121, ..receipt };
    assert_error(h.settle(&lease, &node, same_time), GpunetError::BadPeriod); // more, not later
    let next = h.full_use_receipt(&lease, &node, 30); // control
    h.settle(&lease, &node, next).unwrap();
    assert_eq!(settled(&h, &lease), 180);
}

#[test]
fn a_receipt_ahead_of_the_clock_is_refused() {
    let Story { mut h, node, lease, .. } = story();
    let ahead = Receipt { through: h.now() + 1, ..h.full_use_receipt(&lease, &node, 60) };
    assert_error(h.settle(&lease, &node, ahead), GpunetError::BadPeriod);
    let now = h.full_use_receipt(&lease, &node, 60); // control
    h.settle(&lease, &node, now).unwrap();
}

#[test]
fn a_receipt_claiming_more_than_wall_time_times_gpus_is_refused() {
    let Story { mut h, node, lease, .. } = story();
    let mut receipt = h.full_use_receipt(&lease, &node, 60);
    receipt.gpu_seconds += 1; // 2 GPUs x 60 s since the assignment = 120 at most
    assert_error(h.settle(&lease, &node, receipt), GpunetError::OverClaimed);
    // the bound is since the assignment, so settling in pieces never lifts it
    h.settle(&lease, &node, h.full_use_receipt(&lease, &node, 30)).unwrap();
    h.advance(1);
    let catch_up = h.full_use_receipt(&lease, &node, 32); // 60 + 64 = 124 > 2 x 61
    assert_error(h.settle(&lease, &node, catch_up), GpunetError::OverClaimed);
    let honest = h.full_use_receipt(&lease, &node, 31); // control: 122 = 2 x 61
    h.settle(&lease, &node, honest).unwrap();
    assert_eq!(settled(&h, &lease), 122);
}

#[test]
fn another_leases_receipt_is_refused() {
    let Story { mut h, node, client, lease, .. } = story();
    // the node's receipt, signed for another lease of the same client
    let other_lease = LeaseRef::new(client.wallet.pubkey(), 2);
    let receipt = h.full_use_receipt(&lease, &node, 60);
    let message = receipt.message(&other_lease.lease, &node.key.pubkey());
    let sig_ix = ed25519_ix(&node.key, &message);
    let settle_ix = h.settle_usage_ix(&h.attester.pubkey(), &lease, &node, receipt, 120);
    let attester = h.attester.insecure_clone();
    assert_error(h.send(&[sig_ix, settle_ix], &[&attester]), GpunetError::MessageMismatch);
    h.settle(&lease, &node, receipt).unwrap(); // control
}

#[test]
fn an_earlier_assignments_receipt_is_refused() {
    let mut h = Harness::new();
    let s1 = h.supplier(1_000 * IO);
    let s2 = h.supplier(1_000 * IO);
    let a = h.node(&s1, h100_spec(1));
    let b = h.node(&s2, h100_spec(1));
    let client = h.client(1_000 * IO);
    let lease = h.open_lease(&client, 1, terms(1, 1));
    h.assign(&lease, &[(&a, 1)]).unwrap();
    h.advance(100);
    // a's receipt of its first assignment (epoch 1), never settled; its share moves to b and back
    let first = h.full_use_receipt(&lease, &a, 100);
    assert_eq!(first.epoch, 1);
    h.send(&[h.set_node_draining_ix(&s1, &a.node, true)], &[&s1.wallet]).unwrap();
    h.reassign(&lease, &a, &b).unwrap();
    h.send(&[h.set_node_draining_ix(&s1, &a.node, false)], &[&s1.wallet]).unwrap();
    h.send(&[h.set_node_draining_ix(&s2, &b.node, true)], &[&s2.wallet]).unwrap();
    h.reassign(&lease, &b, &a).unwrap();
    assert_eq!(h.share(&lease, &a).epoch, 3);
    h.advance(100);
    // epoch 1's receipt (signed, within the new assignment's bounds) does not count for epoch 3
    let replay = Receipt { through: h.now(), ..first };
    assert_error(h.settle(&lease, &a, replay), GpunetError::WrongAssignment);
    let current = h.full_use_receipt(&lease, &a, 100); // control
    assert_eq!(current.epoch, 3);
    h.settle(&lease, &a, current).unwrap();
}

#[test]
fn the_final_receipt_settles_in_the_closing_window_and_never_after_finalization() {
    let Story { mut h, node, client, lease, .. } = story();
    h.settle(&lease, &node, h.full_use_receipt(&lease, &node, 30)).unwrap();
    h.advance(20);
    let wallet = client.wallet.insecure_clone();
    h.close(&wallet, &lease, &client.tokens).unwrap();
    let billable_until = h.now();
    h.advance(30); // the worker learns of the close later; its last receipt runs to the close
    let beyond = h.full_use_receipt(&lease, &node, 50);
    assert_error(h.settle(&lease, &node, Receipt { through: h.now(), ..beyond }), GpunetError::BadPeriod);
    let last = Receipt { through: billable_until, ..h.full_use_receipt(&lease, &node, 50) };
    let ev: UsageSettled = event(&h.settle(&lease, &node, last).unwrap());
    assert_eq!((ev.receipt_gpu_seconds, ev.amount), (2 * 80, cost(160).0 - cost(60).0));
    // fully settled: the client finalizes; the fees go to the treasury, the rest to the client
    let state: Lease = h.account(&lease.lease);
    let done: LeaseFinalized = event(&h.finalize(&wallet, &lease, &client.tokens).unwrap());
    assert_eq!(done.fees_to_treasury, state.fees);
    assert_eq!(h.balance(&h.treasury.clone()), state.fees);
    assert_eq!(h.balance(&client.tokens), 1_000 * IO - state.paid - state.fees);
    // after finalization nothing settles (the vault is gone, and the lease is closed)
    h.advance(1);
    let after = Receipt { through: billable_until, gpu_seconds: 221, ..last };
    assert_error(h.settle(&lease, &node, after), AnchorError::AccountNotInitialized);
}

#[test]
fn anyone_sweeps_a_leases_fees_to_the_treasury() {
    let Story { mut h, node, client, lease, .. } = story();
    let ev: UsageSettled = event(&h.settle(&lease, &node, h.full_use_receipt(&lease, &node, 60)).unwrap());
    let stranger = h.wallet();
    let swept: FeesSwept = event(&h.send(&[h.sweep_fees_ix(&stranger.pubkey(), &lease)], &[&stranger]).unwrap());
    assert_eq!((swept.amount, swept.fees_swept), (ev.fee, ev.fee));
    assert_eq!(h.balance(&h.treasury.clone()), ev.fee);
    assert_eq!(h.balance(&lease.vault), 6 * IO - ev.amount);
    // a second sweep moves nothing; a later settlement's fee waits for the next sweep or the end
    h.advance(1); // a new blockhash: the same sweep again is a new transaction
    let again: FeesSwept = event(&h.send(&[h.sweep_fees_ix(&stranger.pubkey(), &lease)], &[&stranger]).unwrap());
    assert_eq!(again.amount, 0);
    h.advance(30);
    let later: UsageSettled = event(&h.settle(&lease, &node, h.full_use_receipt(&lease, &node, 30)).unwrap());
    let wallet = client.wallet.insecure_clone();
    h.close(&wallet, &lease, &client.tokens).unwrap();
    let done: LeaseFinalized = event(&h.finalize(&wallet, &lease, &client.tokens).unwrap());
    assert_eq!(done.fees_to_treasury, later.fee);
    assert_eq!(h.balance(&h.treasury.clone()), ev.fee + later.fee);
}

#[test]
fn a_one_byte_change_to_the_signed_message_is_refused() {
    let Story { mut h, node, lease, .. } = story();
    let receipt = h.full_use_receipt(&lease, &node, 60);
    for byte in [0usize, 20, 60, 100, 112, 125, 130, 135] {
        let mut message = receipt.message(&lease.lease, &node.key.pubkey()).to_vec();
        message[byte] ^= 1;
        let sig_ix = ed25519_ix(&node.key, &message); // validly signed, but not this receipt
        let settle_ix = h.settle_usage_ix(&h.attester.pubkey(), &lease, &node, receipt, 120);
        let attester = h.attester.insecure_clone();
        assert_error(h.send(&[sig_ix, settle_ix], &[&attester]), GpunetError::MessageMismatch);
    }
    h.settle(&lease, &node, receipt).unwrap();
}

#[test]
fn a_missing_or_misplaced_ed25519_instruction_is_refused() {
    let Story { mut h, node, lease, .. } = story();
    let receipt = h.full_use_receipt(&lease, &node, 60);
    let [sig_ix, settle_ix] = h.usage_ixs(&lease, &node, receipt);
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
    assert_eq!(settled(&h, &lease), 0);
    h.send(&[sig_ix, settle_ix], &[&attester]).unwrap();
}

#[test]
fn only_an_attester_settles_and_only_to_the_provider() {
    let Story { mut h, node, lease, .. } = story();
    let receipt = h.full_use_receipt(&lease, &node, 60);
    let outsider = h.wallet();
    let message = receipt.message(&lease.lease, &node.key.pubkey());
    let settle_ix = h.settle_usage_ix(&outsider.pubkey(), &lease, &node, receipt, 120);
    assert_error(h.send(&[ed25519_ix(&node.key, &message), settle_ix], &[&outsider]), GpunetError::NotAttester);

    // payout redirected to someone else's token account
    let thief_tokens = h.token_account(&outsider.pubkey());
    let [sig_ix, mut settle_ix] = h.usage_ixs(&lease, &node, receipt);
    settle_ix.accounts[6].pubkey = thief_tokens;
    let attester = h.attester.insecure_clone();
    assert_error(h.send(&[sig_ix, settle_ix], &[&attester]), AnchorError::ConstraintTokenOwner);

    // fake instructions sysvar (an account the attacker controls, with forged content)
    let fake = Pubkey::new_unique();
    let [sig_ix, mut settle_ix] = h.usage_ixs(&lease, &node, receipt);
    settle_ix.accounts[7] = AccountMeta::new_readonly(fake, false);
    assert_error(h.send(&[sig_ix, settle_ix], &[&attester]), GpunetError::AccountMismatch);
    assert_eq!(settled(&h, &lease), 0);
    h.settle(&lease, &node, receipt).unwrap(); // control
}
