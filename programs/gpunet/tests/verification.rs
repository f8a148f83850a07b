//! Verified supply: an attester records how it verified a node's hardware (`record_verification`);
//! while the config requires a tier, only nodes verified at that tier and not expired are assigned
//! or reassigned leases; a failed verification (slash) or a changed inventory clears it. Each test
//! plays the hostile party with an honest control.

use crate::harness::*;
use gpunet::errors::GpunetError;
use gpunet::events::{NodeUpdated, NodeVerified};
use gpunet::state::{FaultKind, Lease, Node};
use solana_signer::Signer;

/// (tier, verified_until, evidence) of the node on chain.
fn verification(h: &Harness, node: &GpuNode) -> (u8, i64, [u8; 32]) {
    let n: Node = h.account(&node.node);
    (n.verification_tier, n.verified_until, n.verification_evidence)
}

const INVENTORY: [u8; 32] = [7; 32]; // h100_spec's
const EVIDENCE: [u8; 32] = [5; 32];

#[test]
fn only_an_attester_records_a_verification_and_only_within_its_bounds() {
    let mut h = Harness::new();
    let s = h.supplier(500 * IO);
    let node = h.node(&s, h100_spec(2));
    assert_eq!(verification(&h, &node), (0, 0, [0; 32]), "a new node was never verified");
    let attester = h.attester.insecure_clone();
    let now = h.now();
    let until = now + 3_600;

    // Anyone else, the node's own supplier included: refused.
    for signer in [h.wallet(), s.wallet.insecure_clone()] {
        let ix = h.record_verification_ix(&signer.pubkey(), &node.node, 2, until, EVIDENCE, INVENTORY);
        assert_error(h.send(&[ix], &[&signer]), GpunetError::NotAttester);
    }
    // The attester, but a tier outside 1..=3.
    for tier in [0, 4] {
        let ix = h.record_verification_ix(&attester.pubkey(), &node.node, tier, until, EVIDENCE, INVENTORY);
        assert_error(h.send(&[ix], &[&attester]), GpunetError::InvalidVerificationTier);
    }
    // Valid until a time not in the future, or beyond the config's maximum.
    for bad in [now - 1, now, now + MAX_VERIFICATION_SECONDS + 1] {
        let ix = h.record_verification_ix(&attester.pubkey(), &node.node, 2, bad, EVIDENCE, INVENTORY);
        assert_error(h.send(&[ix], &[&attester]), GpunetError::InvalidVerificationExpiry);
    }
    // Hardware other than the inventory the node registered.
    let ix = h.record_verification_ix(&attester.pubkey(), &node.node, 2, until, EVIDENCE, [8; 32]);
    assert_error(h.send(&[ix], &[&attester]), GpunetError::InventoryMismatch);
    assert_eq!(verification(&h, &node), (0, 0, [0; 32]), "nothing refused was recorded");

    // The control: the attester, the registered inventory, at the maximum validity.
    let latest = now + MAX_VERIFICATION_SECONDS;
    let ix = h.record_verification_ix(&attester.pubkey(), &node.node, 2, latest, EVIDENCE, INVENTORY);
    let meta = h.send(&[ix], &[&attester]).unwrap();
    let ev: NodeVerified = event(&meta);
    assert_eq!(
        (ev.node, ev.node_key, ev.provider, ev.tier, ev.valid_until, ev.evidence_hash),
        (node.node, node.key.pubkey(), s.provider, 2, latest, EVIDENCE)
    );
    assert_eq!(verification(&h, &node), (2, latest, EVIDENCE));
    // A new verification replaces the last (a lower tier too: it is what the node proved last).
    h.verify(&node, 1, now + 60).unwrap();
    assert_eq!(verification(&h, &node), (1, now + 60, [1; 32]));

    // A jailed node is not verified.
    h.slash(&node, FaultKind::MissedHeartbeats, None).unwrap();
    assert_error(h.verify(&node, 2, until), GpunetError::NodeJailed);
}

#[test]
fn with_a_tier_required_only_verified_unexpired_nodes_are_assigned() {
    let mut h = Harness::new();
    let s = h.supplier(2_000 * IO);
    let [unverified, lower, expired, verified] = std::array::from_fn(|_| h.node(&s, h100_spec(2)));
    let client = h.client(5_000 * IO);

    // Verification not required (the default): an unverified node is assigned.
    let free = h.open_lease(&client, 1, terms(2, 1));
    h.assign(&free, &[(&unverified, 2)]).unwrap();
    h.close_and_finalize(&client, &free).unwrap();

    h.update_config(|p| p.min_verification_tier = 2).unwrap();
    let now = h.now();
    h.verify(&lower, 1, now + 3_600).unwrap();
    h.verify(&expired, 2, now + 100).unwrap();
    h.verify(&verified, 3, now + 3_600).unwrap();
    h.advance(100); // `expired` is valid until now: no longer

    for (id, node) in [(2, &unverified), (3, &lower), (4, &expired)] {
        let lease = h.open_lease(&client, id, terms(2, 1));
        assert_error(h.assign(&lease, &[(node, 2)]), GpunetError::NodeNotVerified);
        // nor as one share of a cluster beside a verified node
        assert_error(h.assign(&lease, &[(&verified, 1), (node, 1)]), GpunetError::NodeNotVerified);
        assert_eq!(h.account::<Lease>(&lease.lease).node_count, 0);
    }
    // The control: a node verified above the required tier, not expired.
    let lease = h.open_lease(&client, 5, terms(2, 1));
    h.assign(&lease, &[(&verified, 2)]).unwrap();
    assert_eq!(h.account::<Node>(&verified.node).gpus_leased, 2);

    // Verification renewed, the expired node is assigned again.
    let now = h.now();
    h.verify(&expired, 2, now + 3_600).unwrap();
    let lease = h.open_lease(&client, 6, terms(2, 1));
    h.assign(&lease, &[(&expired, 2)]).unwrap();
}

#[test]
fn with_a_tier_required_a_share_moves_only_to_a_verified_unexpired_node() {
    let mut h = Harness::new();
    let s = h.supplier(2_000 * IO);
    let [lost, unverified, lower, expired, verified] = std::array::from_fn(|_| h.node(&s, h100_spec(2)));
    let client = h.client(5_000 * IO);
    h.update_config(|p| p.min_verification_tier = 2).unwrap();
    let now = h.now();
    h.verify(&lost, 2, now + 3_600).unwrap();
    h.verify(&lower, 1, now + 3_600).unwrap();
    h.verify(&expired, 2, now + 100).unwrap();
    h.verify(&verified, 2, now + 3_600).unwrap();
    let lease = h.open_lease(&client, 1, terms(2, 1));
    h.assign(&lease, &[(&lost, 2)]).unwrap();
    h.advance(100);
    h.slash(&lost, FaultKind::MissedHeartbeats, None).unwrap();

    for target in [&unverified, &lower, &expired] {
        assert_error(h.reassign(&lease, &lost, target), GpunetError::NodeNotVerified);
    }
    assert_eq!(h.account::<Lease>(&lease.lease).assignments()[0].node, lost.node);
    // The control: the verified node takes the share.
    h.reassign(&lease, &lost, &verified).unwrap();
    assert_eq!(h.account::<Lease>(&lease.lease).assignments()[0].node, verified.node);
    assert_eq!(h.account::<Node>(&verified.node).gpus_leased, 2);
}

#[test]
fn a_failed_verification_slash_jails_and_clears_the_verification() {
    let mut h = Harness::new();
    let s = h.supplier(1_000 * IO);
    let failed = h.node(&s, h100_spec(1));
    let heartbeat = h.node(&s, h100_spec(1));
    let until = h.now() + 3_600;
    h.verify(&failed, 2, until).unwrap();
    h.verify(&heartbeat, 2, until).unwrap();

    h.slash(&failed, FaultKind::FailedVerification, None).unwrap();
    let n: Node = h.account(&failed.node);
    assert!(n.jailed);
    assert_eq!(verification(&h, &failed), (0, 0, [0; 32]));
    // The control: another fault jails but leaves the hardware's verification alone.
    h.slash(&heartbeat, FaultKind::MissedHeartbeats, None).unwrap();
    assert!(h.account::<Node>(&heartbeat.node).jailed);
    assert_eq!(verification(&h, &heartbeat), (2, until, [2; 32]));

    // Once unjailed, the failed node is not assigned where a tier is required until verified again.
    h.advance(JAIL_SECONDS);
    h.send(&[h.unjail_node_ix(&s, &failed.node)], &[&s.wallet]).unwrap();
    h.update_config(|p| p.min_verification_tier = 2).unwrap();
    let client = h.client(1_000 * IO);
    let lease = h.open_lease(&client, 1, terms(1, 1));
    assert_error(h.assign(&lease, &[(&failed, 1)]), GpunetError::NodeNotVerified);
    let now = h.now();
    h.verify(&failed, 2, now + 3_600).unwrap();
    h.assign(&lease, &[(&failed, 1)]).unwrap();
}

#[test]
fn a_changed_inventory_clears_the_verification() {
    let mut h = Harness::new();
    let s = h.supplier(500 * IO);
    let node = h.node(&s, h100_spec(2));
    let until = h.now() + 3_600;
    h.verify(&node, 2, until).unwrap();

    // The control: a new price with the same inventory keeps the verification.
    let ix = h.update_node_inventory_ix(&s, &node.node, EU, 3 * IO, INVENTORY);
    h.send(&[ix], &[&s.wallet]).unwrap();
    assert_eq!(verification(&h, &node), (2, until, [2; 32]));

    // A new inventory: the verification is gone.
    let ix = h.update_node_inventory_ix(&s, &node.node, EU, 3 * IO, [9; 32]);
    let meta = h.send(&[ix], &[&s.wallet]).unwrap();
    assert_eq!(event::<NodeUpdated>(&meta).inventory_hash, [9; 32]);
    assert_eq!(verification(&h, &node), (0, 0, [0; 32]));
    // The old inventory can no longer be verified; the new one can.
    let attester = h.attester.insecure_clone();
    let ix = h.record_verification_ix(&attester.pubkey(), &node.node, 2, until, EVIDENCE, INVENTORY);
    assert_error(h.send(&[ix], &[&attester]), GpunetError::InventoryMismatch);
    let ix = h.record_verification_ix(&attester.pubkey(), &node.node, 2, until, EVIDENCE, [9; 32]);
    h.send(&[ix], &[&attester]).unwrap();
    assert_eq!(verification(&h, &node), (2, until, EVIDENCE));
}

#[test]
fn the_config_s_verification_settings_are_bounded() {
    let mut h = Harness::new();
    // A tier required with no verification recordable, or a negative validity: refused.
    assert_error(
        h.update_config(|p| {
            p.min_verification_tier = 1;
            p.max_verification_seconds = 0;
        }),
        GpunetError::InvalidDuration,
    );
    assert_error(h.update_config(|p| p.max_verification_seconds = -1), GpunetError::InvalidDuration);
    // No tier required and none recordable: fine (a verification is then refused).
    h.update_config(|p| p.max_verification_seconds = 0).unwrap();
    let s = h.supplier(500 * IO);
    let node = h.node(&s, h100_spec(1));
    let until = h.now() + 1;
    assert_error(h.verify(&node, 2, until), GpunetError::InvalidVerificationExpiry);
}
