//! Leases: opening escrows the full price, assignment (single node and cluster),
//! top-up, reassignment after a node loss, close, refund and finalization.

use crate::harness::*;
use anchor_lang::error::ErrorCode as AnchorError;
use gpunet::errors::GpunetError;
use gpunet::events::{LeaseAssigned, LeaseClosed, LeaseFinalized, LeaseOpened, LeaseReassigned, LeaseToppedUp};
use gpunet::state::{Lease, LeaseStatus, Node};
use solana_signer::Signer;

#[test]
fn open_escrows_the_full_price_and_assign_starts_the_lease() {
    let mut h = Harness::new();
    let s = h.supplier(800 * IO);
    let node = h.node(&s, h100_spec(8));
    let client = h.client(1_000 * IO);

    let lease = LeaseRef::new(client.wallet.pubkey(), 7);
    let t = terms(2, 3);
    let meta = h.send(&[h.open_lease_ix(&client, &lease, t)], &[&client.wallet]).unwrap();
    let deposit = gpunet::math::escrow_for(3 * IO, 2, 3 * 3_600).unwrap();
    assert_eq!(deposit, 18 * IO); // max price x GPUs x hours
    let ev: LeaseOpened = event(&meta);
    assert_eq!((ev.lease, ev.lease_id, ev.deposit, ev.terms), (lease.lease, 7, deposit, t));
    assert_eq!(h.balance(&lease.vault), deposit);
    assert_eq!(h.balance(&client.tokens), 1_000 * IO - deposit);
    let state: Lease = h.account(&lease.lease);
    assert_eq!((state.status, state.deposited, state.escrow_left().unwrap()), (LeaseStatus::Open, deposit, deposit));

    let meta = h.assign(&lease, &[(&node, 2)]).unwrap();
    let ev: LeaseAssigned = event(&meta);
    assert_eq!(ev.assignments.len(), 1);
    assert_eq!((ev.assignments[0].node, ev.assignments[0].gpus), (node.node, 2));
    assert_eq!(ev.assignments[0].price_per_gpu_hour, 2 * IO, "the node's price, not the client's maximum");
    let state: Lease = h.account(&lease.lease);
    assert_eq!((state.status, state.started_at, state.node_count), (LeaseStatus::Active, h.now(), 1));
    assert_eq!(h.account::<Node>(&node.node).gpus_leased, 2);

    // an active lease cannot be assigned again
    assert_error(h.assign(&lease, &[(&node, 2)]), GpunetError::LeaseNotOpen);
}

#[test]
fn a_cluster_lease_takes_all_its_nodes_at_once_or_none() {
    let mut h = Harness::new();
    let s1 = h.supplier(800 * IO);
    let s2 = h.supplier(800 * IO);
    let a = h.node(&s1, h100_spec(4));
    let b = h.node(&s2, h100_spec(4));
    let busy = h.node(&s2, h100_spec(2));
    let client = h.client(10_000 * IO);

    // `busy` has only 2 GPUs: a 10-GPU split asking 4 of it fails, and nothing is taken
    let lease = h.open_lease(&client, 1, terms(10, 1));
    assert_error(h.assign(&lease, &[(&a, 4), (&b, 2), (&busy, 4)]), GpunetError::NotEnoughFreeGpus);
    for n in [&a, &b, &busy] {
        assert_eq!(h.account::<Node>(&n.node).gpus_leased, 0, "all or none");
    }
    assert_error(h.assign(&lease, &[(&a, 4), (&b, 4)]), GpunetError::InvalidAssignment); // 8 != 10
    assert_error(h.assign(&lease, &[(&a, 4), (&a, 4), (&busy, 2)]), GpunetError::DuplicateNode);

    let meta = h.assign(&lease, &[(&a, 4), (&b, 4), (&busy, 2)]).unwrap();
    assert_eq!(event::<LeaseAssigned>(&meta).assignments.len(), 3);
    let state: Lease = h.account(&lease.lease);
    let shares: Vec<_> = state.assignments().iter().map(|x| (x.node, x.gpus, x.provider)).collect();
    assert_eq!(shares, vec![(a.node, 4, s1.provider), (b.node, 4, s2.provider), (busy.node, 2, s2.provider)]);
}

#[test]
fn nodes_that_do_not_meet_the_terms_are_refused() {
    let mut h = Harness::new();
    let s = h.supplier(5_000 * IO);
    let node = h.node(&s, h100_spec(4));
    let client = h.client(100_000 * IO);
    let mut id = 0;
    let mut refused = |h: &mut Harness, change: fn(&mut gpunet::state::LeaseTerms)| {
        let mut t = terms(1, 1);
        change(&mut t);
        id += 1;
        let lease = h.open_lease(&client, id, t);
        assert_error(h.assign(&lease, &[(&node, 1)]), GpunetError::NodeDoesNotQualify);
    };
    refused(&mut h, |t| t.gpu_model = RTX4090);
    refused(&mut h, |t| t.min_vram_gb = 81);
    refused(&mut h, |t| t.region = US);
    refused(&mut h, |t| t.max_price_per_gpu_hour = 2 * IO - 1);
    // the exact match qualifies
    let mut t = terms(1, 1);
    (t.gpu_model, t.min_vram_gb, t.region, t.max_price_per_gpu_hour) = (H100, 80, EU, 2 * IO);
    let lease = h.open_lease(&client, 100, t);
    h.assign(&lease, &[(&node, 1)]).unwrap();
}

#[test]
fn invalid_terms_are_refused_and_nothing_is_escrowed() {
    let mut h = Harness::new();
    let client = h.client(1_000 * IO);
    for (id, t) in [
        (1, {
            let mut t = terms(1, 1);
            t.gpu_count = 0;
            t
        }),
        (2, {
            let mut t = terms(1, 1);
            t.gpu_count = 129;
            t
        }),
        (3, {
            let mut t = terms(1, 1);
            t.duration_seconds = 0;
            t
        }),
        (4, {
            let mut t = terms(1, 1);
            t.duration_seconds = -5;
            t
        }),
        (5, {
            let mut t = terms(1, 1);
            t.max_price_per_gpu_hour = 0;
            t
        }),
    ] {
        let lease = LeaseRef::new(client.wallet.pubkey(), id);
        assert_error(h.send(&[h.open_lease_ix(&client, &lease, t)], &[&client.wallet]), GpunetError::InvalidLeaseTerms);
        assert!(!h.exists(&lease.lease));
    }
    // more than the wallet holds: the token transfer fails, no lease exists
    let lease = LeaseRef::new(client.wallet.pubkey(), 9);
    assert!(h.send(&[h.open_lease_ix(&client, &lease, terms(8, 1_000))], &[&client.wallet]).is_err());
    assert!(!h.exists(&lease.lease));
    assert_eq!(h.balance(&client.tokens), 1_000 * IO);
}

#[test]
fn top_up_extends_the_lease_at_its_maximum_price() {
    let mut h = Harness::new();
    let client = h.client(1_000 * IO);
    let lease = h.open_lease(&client, 1, terms(2, 1));
    let meta = h.send(&[h.top_up_lease_ix(&client, &lease, 1_800)], &[&client.wallet]).unwrap();
    let ev: LeaseToppedUp = event(&meta);
    assert_eq!((ev.amount, ev.extra_seconds, ev.deposited), (3 * IO, 1_800, 9 * IO));
    let state: Lease = h.account(&lease.lease);
    assert_eq!((state.terms.duration_seconds, state.deposited), (5_400, 9 * IO));
    assert_eq!(h.balance(&lease.vault), 9 * IO);
    assert_error(h.send(&[h.top_up_lease_ix(&client, &lease, 0)], &[&client.wallet]), GpunetError::ZeroAmount);
}

#[test]
fn a_lost_node_is_replaced_and_the_new_node_starts_a_new_epoch() {
    let mut h = Harness::new();
    let s1 = h.supplier(800 * IO);
    let s2 = h.supplier(800 * IO);
    let lost = h.node(&s1, h100_spec(2));
    let spare = h.node(&s2, h100_spec(2));
    let client = h.client(1_000 * IO);
    let lease = h.open_lease(&client, 1, terms(2, 2));
    h.assign(&lease, &[(&lost, 2)]).unwrap();
    h.advance(60);
    let receipt = h.full_use_receipt(&lease, &lost, 60);
    h.settle(&lease, &lost, receipt).unwrap();

    h.advance(30);
    assert_error(h.reassign(&lease, &lost, &spare), GpunetError::NodeNotLost);
    h.slash(&lost, gpunet::state::FaultKind::MissedHeartbeats, None).unwrap();
    let meta = h.reassign(&lease, &lost, &spare).unwrap();
    let ev: LeaseReassigned = event(&meta);
    assert_eq!(
        (ev.from_node, ev.assignment.node, ev.assignment.gpus, ev.assignment.epoch),
        (lost.node, spare.node, 2, 2)
    );
    assert_eq!((ev.assignment.assigned_at, ev.assignment.receipt_gpu_seconds), (h.now(), 0));
    assert_eq!(h.account::<Node>(&lost.node).gpus_leased, 0);
    assert_eq!(h.account::<Node>(&spare.node).gpus_leased, 2);

    // the lost node can no longer settle; the spare counts from the reassignment, in epoch 2
    let late = h.full_use_receipt(&lease, &spare, 30);
    assert_error(h.settle(&lease, &lost, late), GpunetError::NodeNotInLease);
    h.advance(60);
    let receipt = h.full_use_receipt(&lease, &spare, 60);
    assert_eq!((receipt.epoch, receipt.gpu_seconds), (2, 120));
    h.settle(&lease, &spare, receipt).unwrap();
    assert_error(h.reassign(&lease, &lost, &spare), GpunetError::NodeNotInLease);
}

#[test]
fn the_client_closes_any_time_and_gets_every_unsettled_unit_back() {
    let mut h = Harness::new();
    let s = h.supplier(800 * IO);
    let node = h.node(&s, h100_spec(2));
    let client = h.client(1_000 * IO);
    let lease = h.open_lease(&client, 1, terms(2, 1));
    h.assign(&lease, &[(&node, 2)]).unwrap();
    h.advance(60);
    let receipt = h.full_use_receipt(&lease, &node, 60);
    let settled = event::<gpunet::events::UsageSettled>(&h.settle(&lease, &node, receipt).unwrap());

    // everything delivered is settled: the close keeps nothing back and frees the node
    let wallet = client.wallet.insecure_clone();
    let meta = h.close(&wallet, &lease, &client.tokens).unwrap();
    let ev: LeaseClosed = event(&meta);
    let deposit = 6 * IO;
    assert_eq!((ev.refund, ev.retained), (deposit - settled.amount, 0));
    assert_eq!((ev.paid, ev.fees), (settled.payout, settled.fee));
    assert_eq!((ev.billable_until, ev.settle_deadline), (h.now(), h.now() + SETTLE_WINDOW_SECONDS));
    assert_eq!(h.balance(&client.tokens), 1_000 * IO - settled.amount);
    assert_eq!(h.account::<Node>(&node.node).gpus_leased, 0);
    let state: Lease = h.account(&lease.lease);
    assert_eq!((state.status, state.refunded, state.closed_at), (LeaseStatus::Closing, ev.refund, h.now()));

    // all settled: the client finalizes at once; the empty vault is closed
    let done: LeaseFinalized = event(&h.finalize(&wallet, &lease, &client.tokens).unwrap());
    assert_eq!((done.refund, done.donations, done.refunded), (0, 0, ev.refund));
    assert!(!h.exists(&lease.vault), "the empty vault is closed");
    let state: Lease = h.account(&lease.lease);
    assert_eq!((state.status, state.finalized_at), (LeaseStatus::Closed, h.now()));
    assert_eq!(state.deposited, state.paid + state.fees + state.refunded);

    // closed is final: no second close, top-up or settlement
    assert_error(h.close(&wallet, &lease, &client.tokens), AnchorError::AccountNotInitialized); // the vault is gone
    let receipt = h.full_use_receipt(&lease, &node, 1);
    assert_error(h.settle(&lease, &node, receipt), AnchorError::AccountNotInitialized);
    assert_error(h.send(&[h.top_up_lease_ix(&client, &lease, 60)], &[&wallet]), AnchorError::AccountNotInitialized);
}

#[test]
fn strangers_close_only_after_the_end_and_its_grace() {
    let mut h = Harness::new();
    let s = h.supplier(800 * IO);
    let node = h.node(&s, h100_spec(1));
    let client = h.client(1_000 * IO);
    let lease = h.open_lease(&client, 1, terms(1, 1));
    h.advance(120);
    h.assign(&lease, &[(&node, 1)]).unwrap();
    let stranger = h.wallet();
    h.advance(3_600 + CLOSE_GRACE_SECONDS - 1);
    assert_error(h.close(&stranger, &lease, &client.tokens), GpunetError::LeaseNotExpired);
    h.advance(1);
    // the refund still goes to the client's account, never the closer's
    let stranger_tokens = h.token_account(&stranger.pubkey());
    let ix = h.close_lease_ix(&stranger.pubkey(), &lease, &stranger_tokens);
    assert_error(h.send(&[ix], &[&stranger]), AnchorError::ConstraintTokenOwner);
    h.close(&stranger, &lease, &client.tokens).unwrap();
    h.advance(SETTLE_WINDOW_SECONDS + 1);
    h.finalize(&stranger, &lease, &client.tokens).unwrap();
    assert_eq!(h.balance(&client.tokens), 1_000 * IO);
}

#[test]
fn an_unplaced_lease_has_no_end_and_only_its_client_closes_it() {
    let mut h = Harness::new();
    let client = h.client(1_000 * IO);
    let lease = h.open_lease(&client, 1, terms(1, 1)); // escrows 3 IO
    let stranger = h.wallet();
    let attester = h.attester.insecure_clone();
    // long past its open time plus its duration and the grace: it still waits to be placed
    h.advance(3 * 3_600 + CLOSE_GRACE_SECONDS);
    for closer in [&stranger, &attester] {
        assert_error(h.close(closer, &lease, &client.tokens), GpunetError::LeaseNotPlaced);
    }
    let state: Lease = h.account(&lease.lease);
    assert_eq!((state.status, state.refunded), (LeaseStatus::Open, 0));
    assert_eq!(h.balance(&lease.vault), 3 * IO);
    // placed now, it ends its duration later, as the client was told
    let s = h.supplier(800 * IO);
    let node = h.node(&s, h100_spec(1));
    h.assign(&lease, &[(&node, 1)]).unwrap();
    assert_eq!(h.account::<Lease>(&lease.lease).ends_at(), Some(h.now() + 3_600));

    // the control: its client closes an unplaced lease any time, and gets it all back
    let unplaced = h.open_lease(&client, 2, terms(1, 1));
    let wallet = client.wallet.insecure_clone();
    let ev: LeaseClosed = event(&h.close(&wallet, &unplaced, &client.tokens).unwrap());
    assert_eq!((ev.refund, ev.retained, ev.billable_until), (3 * IO, 0, h.now()));
    h.finalize(&stranger, &unplaced, &client.tokens).unwrap();
    assert_eq!(h.balance(&client.tokens), 1_000 * IO - 3 * IO);
}

#[test]
fn closing_must_free_exactly_the_lease_nodes() {
    let mut h = Harness::new();
    let s = h.supplier(800 * IO);
    let a = h.node(&s, h100_spec(1));
    let b = h.node(&s, h100_spec(1));
    let client = h.client(1_000 * IO);
    let lease = h.open_lease(&client, 1, terms(1, 1));
    h.assign(&lease, &[(&a, 1)]).unwrap();
    let wallet = client.wallet.insecure_clone();
    let mut ix = h.close_lease_ix(&wallet.pubkey(), &lease, &client.tokens);
    ix.accounts.last_mut().unwrap().pubkey = b.node;
    assert_error(h.send(&[ix.clone()], &[&wallet]), GpunetError::LeaseNodesMismatch);
    ix.accounts.pop();
    assert_error(h.send(&[ix], &[&wallet]), GpunetError::LeaseNodesMismatch);
    h.close(&wallet, &lease, &client.tokens).unwrap();
}
