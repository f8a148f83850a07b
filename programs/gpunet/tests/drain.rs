//! Announced maintenance: a supplier drains its node (no new leases; its shares may move away
//! without a slash) and undrains it. Each test plays the hostile party with an honest control.

use crate::harness::*;
use anchor_lang::error::ErrorCode as AnchorError;
use gpunet::errors::GpunetError;
use gpunet::events::{LeaseReassigned, NodeDrainingSet, UsageSettled};
use gpunet::state::{Lease, Node, Provider};
use solana_signer::Signer;

fn draining(h: &Harness, node: &GpuNode) -> bool {
    h.account::<Node>(&node.node).draining
}

#[test]
fn only_the_node_s_provider_drains_and_undrains_it() {
    let mut h = Harness::new();
    let owner = h.supplier(500 * IO);
    let node = h.node(&owner, h100_spec(2));
    assert!(!draining(&h, &node), "a new node is not draining");

    // Another supplier, signing with its own provider account: refused, nothing changes.
    let stranger = h.supplier(500 * IO);
    let ix = h.set_node_draining_ix(&stranger, &node.node, true);
    assert_error(h.send(&[ix], &[&stranger.wallet]), GpunetError::NotNodeProvider);
    // ... or naming the owner's provider account without being its authority.
    let mut ix = h.set_node_draining_ix(&owner, &node.node, true);
    ix.accounts[0].pubkey = stranger.wallet.pubkey();
    assert_error(h.send(&[ix], &[&stranger.wallet]), AnchorError::ConstraintSeeds);
    assert!(!draining(&h, &node));

    // The owner (the control): drains, which is announced, and undrains.
    let meta = h.send(&[h.set_node_draining_ix(&owner, &node.node, true)], &[&owner.wallet]).unwrap();
    let ev: NodeDrainingSet = event(&meta);
    assert_eq!((ev.node, ev.provider, ev.draining), (node.node, owner.provider, true));
    assert!(draining(&h, &node));
    // the stranger cannot undrain it either
    let ix = h.set_node_draining_ix(&stranger, &node.node, false);
    assert_error(h.send(&[ix], &[&stranger.wallet]), GpunetError::NotNodeProvider);
    assert!(draining(&h, &node));
    h.advance(1); // a new blockhash: the same transaction twice would be a duplicate
    let meta = h.send(&[h.set_node_draining_ix(&owner, &node.node, false)], &[&owner.wallet]).unwrap();
    assert!(!event::<NodeDrainingSet>(&meta).draining);
    assert!(!draining(&h, &node));
}

#[test]
fn a_draining_node_gets_no_new_lease_and_undraining_restores_it() {
    let mut h = Harness::new();
    let s = h.supplier(800 * IO);
    let drained = h.node(&s, h100_spec(2));
    let control = h.node(&s, h100_spec(2));
    let client = h.client(1_000 * IO);
    h.send(&[h.set_node_draining_ix(&s, &drained.node, true)], &[&s.wallet]).unwrap();

    let lease = h.open_lease(&client, 1, terms(2, 1));
    assert_error(h.assign(&lease, &[(&drained, 2)]), GpunetError::NodeDraining);
    assert_eq!(h.account::<Node>(&drained.node).gpus_leased, 0);
    assert_eq!(h.account::<Lease>(&lease.lease).node_count, 0, "nothing was assigned");
    // the control: the same lease on a node that is not draining
    let other = h.open_lease(&client, 2, terms(2, 1));
    h.assign(&other, &[(&control, 2)]).unwrap();

    h.send(&[h.set_node_draining_ix(&s, &drained.node, false)], &[&s.wallet]).unwrap();
    h.assign(&lease, &[(&drained, 2)]).unwrap();
    assert_eq!(h.account::<Node>(&drained.node).gpus_leased, 2);
}

#[test]
fn a_draining_node_s_share_moves_without_a_slash_and_a_healthy_one_s_does_not_move() {
    let mut h = Harness::new();
    let (s1, s2, s3) = (h.supplier(800 * IO), h.supplier(800 * IO), h.supplier(800 * IO));
    let drained = h.node(&s1, h100_spec(2));
    let healthy = h.node(&s2, h100_spec(2));
    let spare = h.node(&s3, h100_spec(2));
    let client = h.client(1_000 * IO);
    let lease = h.open_lease(&client, 1, terms(4, 2));
    h.assign(&lease, &[(&drained, 2), (&healthy, 2)]).unwrap();
    h.advance(60);
    let receipt = h.full_use_receipt(&lease, &drained, 60);
    // what it delivered is settled before the move
    let paid: UsageSettled = event(&h.settle(&lease, &drained, receipt).unwrap());
    let staked = h.account::<Provider>(&s1.provider).staked;

    // Neither node is lost nor draining: the attester cannot take a share away.
    assert_error(h.reassign(&lease, &drained, &spare), GpunetError::NodeNotLost);
    assert_error(h.reassign(&lease, &healthy, &spare), GpunetError::NodeNotLost);

    h.send(&[h.set_node_draining_ix(&s1, &drained.node, true)], &[&s1.wallet]).unwrap();
    // a draining node is no target either (its supplier's spare is in maintenance too)
    h.send(&[h.set_node_draining_ix(&s3, &spare.node, true)], &[&s3.wallet]).unwrap();
    assert_error(h.reassign(&lease, &drained, &spare), GpunetError::NodeDraining);
    h.send(&[h.set_node_draining_ix(&s3, &spare.node, false)], &[&s3.wallet]).unwrap();

    let meta = h.reassign(&lease, &drained, &spare).unwrap();
    let ev: LeaseReassigned = event(&meta);
    assert_eq!((ev.from_node, ev.assignment.node, ev.assignment.gpus), (drained.node, spare.node, 2));
    // no slash, no jail: the drained supplier keeps its whole stake and its pay
    let p: Provider = h.account(&s1.provider);
    assert_eq!((p.slashed, p.staked), (0, staked));
    assert!(paid.payout > 0);
    let n: Node = h.account(&drained.node);
    assert_eq!((n.jailed, n.gpus_leased, n.draining), (false, 0, true));
    // the healthy node's share still cannot be moved
    assert_error(h.reassign(&lease, &healthy, &drained), GpunetError::NodeNotLost);
    assert_eq!(h.account::<Lease>(&lease.lease).assignments()[1].node, healthy.node);

    // holding nothing, the drained node can leave
    h.send(&[h.deregister_node_ix(&s1, &drained.node)], &[&s1.wallet]).unwrap();
    assert!(h.account::<Node>(&drained.node).is_deregistered());
}
