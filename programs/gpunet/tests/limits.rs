//! The limits the IDL publishes (its `constants`, which clients such as the Python SDK read
//! instead of copying numbers) are the ones the program enforces: each is accepted at its bound
//! and refused one step past it. The values come from the committed IDL, not from the crate, so
//! an IDL that advertised a different limit than the program checks fails here.
use std::collections::BTreeMap;

use crate::harness::*;
use anchor_lang::prelude::Pubkey;
use gpunet::errors::GpunetError;
use gpunet::state::{Lease, Node, NodeSpec, ANY};
use solana_keypair::Keypair;
use solana_signer::Signer;

/// The committed IDL's constants, by name, as integers.
fn idl_constants() -> BTreeMap<String, u64> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../gpunet/idl/gpunet.json");
    let idl: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    idl["constants"]
        .as_array()
        .expect("the IDL has constants")
        .iter()
        .map(|c| (c["name"].as_str().unwrap().to_string(), c["value"].as_str().unwrap().parse().unwrap()))
        .collect()
}

struct Limits(BTreeMap<String, u64>);

impl Limits {
    fn get<T: TryFrom<u64>>(&self, name: &str) -> T {
        let value = *self.0.get(name).unwrap_or_else(|| panic!("{name} is not in the IDL"));
        T::try_from(value).unwrap_or_else(|_| panic!("{name} = {value} does not fit its type"))
    }
}

#[test]
fn every_idl_constant_is_checked_here() {
    let names: Vec<String> = idl_constants().into_keys().collect();
    assert_eq!(
        names,
        [
            "ANY",
            "BPS_DENOMINATOR",
            "DELEGATION_CAP_BPS",
            "MAX_ATTESTERS",
            "MAX_COHORTS",
            "MAX_COMMISSION_BPS",
            "MAX_DOWNTIME_TOLERANCE_SECONDS",
            "MAX_GPUS_PER_NODE",
            "MAX_LEASE_GPUS",
            "MAX_LEASE_NODES",
            "MAX_PROOF_LEN",
            "MAX_PROTOCOL_FEE_BPS",
            "MAX_VERIFICATION_SECONDS",
            "MAX_VERIFICATION_TIER",
            "MIN_DOWNTIME_TOLERANCE_SECONDS",
        ],
        "a new constant in the IDL needs its check in this file"
    );
}

#[test]
fn config_limits() {
    let limits = Limits(idl_constants());
    let mut h = Harness::new();

    let max_fee: u16 = limits.get("MAX_PROTOCOL_FEE_BPS");
    assert_error(h.update_config(|p| p.protocol_fee_bps = max_fee + 1), GpunetError::FeeTooHigh);
    h.update_config(|p| p.protocol_fee_bps = max_fee).unwrap();

    let whole: u16 = limits.get("BPS_DENOMINATOR");
    assert_error(h.update_config(|p| p.slash_bps[0] = whole + 1), GpunetError::InvalidBasisPoints);
    assert_error(h.update_config(|p| p.slash_client_share_bps = whole + 1), GpunetError::InvalidBasisPoints);
    h.update_config(|p| {
        p.slash_bps = [whole; 3];
        p.slash_client_share_bps = whole;
    })
    .unwrap();

    let max_attesters: usize = limits.get("MAX_ATTESTERS");
    let attester = h.attester.pubkey();
    let keys = move |n: usize| std::iter::once(attester).chain((1..n).map(|_| Pubkey::new_unique())).collect();
    assert_error(h.update_config(|p| p.attesters = keys(max_attesters + 1)), GpunetError::InvalidAttesters);
    h.update_config(|p| p.attesters = keys(max_attesters)).unwrap();
}

#[test]
fn verification_limits() {
    let limits = Limits(idl_constants());
    let mut h = Harness::new();
    let s = h.supplier(500 * IO);
    let node = h.node(&s, h100_spec(1));

    // The config's longest validity, and so a verification's.
    let max_seconds: i64 = limits.get("MAX_VERIFICATION_SECONDS");
    assert_error(h.update_config(|p| p.max_verification_seconds = max_seconds + 1), GpunetError::InvalidDuration);
    h.update_config(|p| p.max_verification_seconds = max_seconds).unwrap();
    let now = h.now();
    assert_error(h.verify(&node, 1, now + max_seconds + 1), GpunetError::InvalidVerificationExpiry);
    h.verify(&node, 1, now + max_seconds).unwrap();
    assert_eq!(h.account::<Node>(&node.node).verified_until, now + max_seconds);

    // The highest tier, recorded and required.
    let max_tier: u8 = limits.get("MAX_VERIFICATION_TIER");
    assert_error(h.verify(&node, max_tier + 1, now + 60), GpunetError::InvalidVerificationTier);
    h.verify(&node, max_tier, now + 60).unwrap();
    assert_eq!(h.account::<Node>(&node.node).verification_tier, max_tier);
    assert_error(h.update_config(|p| p.min_verification_tier = max_tier + 1), GpunetError::InvalidVerificationTier);
    h.update_config(|p| p.min_verification_tier = max_tier).unwrap();
    let client = h.client(1_000 * IO);
    let lease = h.open_lease(&client, 1, terms(1, 1));
    h.assign(&lease, &[(&node, 1)]).unwrap();
}

#[test]
fn node_and_lease_limits() {
    let limits = Limits(idl_constants());
    let mut h = Harness::new();

    let max_gpus: u8 = limits.get("MAX_GPUS_PER_NODE");
    let s = h.supplier(2 * (u64::from(max_gpus) + 1) * MIN_STAKE_PER_GPU);
    let key = Keypair::new();
    let ix = h.register_node_ix(&s, &key.pubkey(), h100_spec(max_gpus + 1));
    assert_error(h.send(&[ix], &[&s.wallet, &key]), GpunetError::InvalidNodeSpec);
    let big = h.node(&s, h100_spec(max_gpus));
    assert_eq!(h.account::<Node>(&big.node).spec.gpu_count, max_gpus);

    // ANY is the "any model, any region" of a lease's terms, never a node's model or region
    let any: u16 = limits.get("ANY");
    assert_eq!(any, ANY);
    let key = Keypair::new();
    let ix = h.register_node_ix(&s, &key.pubkey(), NodeSpec { gpu_model: any, ..h100_spec(1) });
    assert_error(h.send(&[ix], &[&s.wallet, &key]), GpunetError::InvalidNodeSpec);

    let client = h.client(1_000_000 * IO);
    let max_lease_gpus: u8 = limits.get("MAX_LEASE_GPUS");
    let lease = LeaseRef::new(client.wallet.pubkey(), 1);
    let ix = h.open_lease_ix(&client, &lease, terms(max_lease_gpus + 1, 1));
    assert_error(h.send(&[ix], &[&client.wallet]), GpunetError::InvalidLeaseTerms);
    let lease = h.open_lease(&client, 2, terms(max_lease_gpus, 1));
    assert_eq!(h.account::<Lease>(&lease.lease).terms.gpu_count, max_lease_gpus);

    let min_tolerance: u32 = limits.get("MIN_DOWNTIME_TOLERANCE_SECONDS");
    let max_tolerance: u32 = limits.get("MAX_DOWNTIME_TOLERANCE_SECONDS");
    for (id, tolerance, ok) in [
        (3, min_tolerance - 1, false),
        (4, max_tolerance + 1, false),
        (5, min_tolerance, true),
        (6, max_tolerance, true),
    ] {
        let lease = LeaseRef::new(client.wallet.pubkey(), id);
        let result = h.send(&[h.open_lease_tolerant_ix(&client, &lease, terms(1, 1), tolerance)], &[&client.wallet]);
        if ok {
            result.unwrap();
            assert_eq!(h.account::<Lease>(&lease.lease).downtime_tolerance_seconds, tolerance);
        } else {
            assert_error(result, GpunetError::InvalidDowntimeTolerance);
        }
    }

    // One GPU on each of MAX_LEASE_NODES + 1 nodes is refused; on MAX_LEASE_NODES it is placed.
    let max_nodes: u8 = limits.get("MAX_LEASE_NODES");
    let nodes: Vec<GpuNode> = (0..=max_nodes).map(|_| h.node(&s, h100_spec(1))).collect();
    let too_many = h.open_lease(&client, 7, terms(max_nodes + 1, 1));
    let shares: Vec<(&GpuNode, u8)> = nodes.iter().map(|n| (n, 1)).collect();
    assert_error(h.assign(&too_many, &shares), GpunetError::InvalidAssignment);
    let cluster = h.open_lease(&client, 8, terms(max_nodes, 1));
    h.assign(&cluster, &shares[..usize::from(max_nodes)]).unwrap();
    assert_eq!(h.account::<Lease>(&cluster.lease).node_count, max_nodes);
}

#[test]
fn staking_limits() {
    let limits = Limits(idl_constants());
    let mut h = Harness::new();
    // the commission bound
    let max_commission: u16 = limits.get("MAX_COMMISSION_BPS");
    assert_error(h.update_staking(|p| p.max_commission_bps = max_commission + 1), GpunetError::InvalidBasisPoints);
    h.update_staking(|p| p.max_commission_bps = max_commission).unwrap();

    // the pool holds at most DELEGATION_CAP_BPS of its supplier's own stake
    let s = h.supplier(1_000 * IO);
    h.open_pool(&s, max_commission).unwrap();
    let cap = 1_000 * IO * limits.get::<u64>("DELEGATION_CAP_BPS") / gpunet::state::BPS_DENOMINATOR;
    let d = h.delegator(10_000 * IO);
    assert_error(h.delegate(&d, &s.provider, cap + 1).unwrap_err(), GpunetError::DelegationCapExceeded);

    // a proof of MAX_PROOF_LEN + 1 hashes is refused before it is hashed
    let max_proof: usize = limits.get("MAX_PROOF_LEN");
    h.fund_rewards(IO).unwrap();
    h.next_epoch(10);
    h.next_epoch(10);
    let leaf = gpunet::merkle::RewardLeaf { epoch: 1, provider: s.provider, supplier_amount: 1, delegators_amount: 0 };
    let tree = RewardTree::new(vec![leaf], &h.mint.clone());
    h.post_root(1, &tree).unwrap();
    h.advance(ROOT_TIMELOCK_SECONDS);
    let cranker = h.wallet();
    let ix = h.claim_ix(&cranker.pubkey(), 1, &leaf, vec![[0; 32]; max_proof + 1]);
    assert_error(h.send(&[ix], &[&cranker]), GpunetError::InvalidProof);
    h.claim(1, &tree, 0).unwrap(); // control: its own (empty) proof

    // MAX_COHORTS epochs of exits may unbond at once, not one more
    let cohorts: usize = limits.get("MAX_COHORTS");
    h.update_config(|p| p.unbonding_seconds = (cohorts as i64 + 1) * EPOCH_SECONDS).unwrap();
    let positions: Vec<Position> = (0..=cohorts).map(|_| h.delegate(&d, &s.provider, IO).unwrap()).collect();
    for position in &positions[..cohorts] {
        h.undelegate(&d, position).unwrap();
        h.next_epoch(10);
    }
    assert_error(h.undelegate(&d, &positions[cohorts]), GpunetError::TooManyCohorts);
}
