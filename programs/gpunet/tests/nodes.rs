//! Nodes: registration bonds stake per GPU, updates, deregistration frees it.

use crate::harness::*;
use anchor_lang::error::ErrorCode as AnchorError;
use gpunet::errors::GpunetError;
use gpunet::events::{NodeDeregistered, NodeRegistered, NodeReleased, NodeUpdated};
use gpunet::state::{Node, NodeSpec, Provider};
use solana_keypair::Keypair;
use solana_signer::Signer;

#[test]
fn register_update_and_deregister_a_node() {
    let mut h = Harness::new();
    let s = h.supplier(800 * IO);
    let key = Keypair::new();
    let spec = h100_spec(8);
    let meta = h.send(&[h.register_node_ix(&s, &key.pubkey(), spec.clone())], &[&s.wallet, &key]).unwrap();
    let ev: NodeRegistered = event(&meta);
    assert_eq!((ev.node_key, ev.spec.clone(), ev.bonded_stake), (key.pubkey(), spec.clone(), 800 * IO));

    let node_addr = node_pda(&key.pubkey());
    let node: Node = h.account(&node_addr);
    assert_eq!(node.spec, spec);
    assert_eq!((node.provider, node.gpus_leased, node.jailed), (s.provider, 0, false));
    let p: Provider = h.account(&s.provider);
    assert_eq!((p.bonded, p.node_count, p.free_collateral()), (800 * IO, 1, 0));

    let meta = h.send(&[h.update_node_ix(&s, &node_addr, US, 5 * IO)], &[&s.wallet]).unwrap();
    let ev: NodeUpdated = event(&meta);
    assert_eq!((ev.region, ev.price_per_gpu_hour, ev.inventory_hash), (US, 5 * IO, [9; 32]));
    assert_eq!(h.account::<Node>(&node_addr).spec.price_per_gpu_hour, 5 * IO);

    // deregistered, the node takes no leases but its stake stays bonded for the unbonding period
    let meta = h.send(&[h.deregister_node_ix(&s, &node_addr)], &[&s.wallet]).unwrap();
    let ev: NodeDeregistered = event(&meta);
    assert_eq!((ev.bonded_stake, ev.deregistered_at), (800 * IO, h.now()));
    assert_eq!(h.account::<Node>(&node_addr).deregistered_at, h.now());
    let p: Provider = h.account(&s.provider);
    assert_eq!((p.bonded, p.node_count, p.free_collateral()), (800 * IO, 1, 0));
    assert_error(h.send(&[h.deregister_node_ix(&s, &node_addr)], &[&s.wallet]), GpunetError::NodeDeregistered);
    h.advance(UNBONDING_SECONDS - 1);
    assert_error(h.send(&[h.release_node_ix(&s, &node_addr)], &[&s.wallet]), GpunetError::NodeStillBonded);
    h.advance(1);

    let rent_before = h.svm.get_balance(&s.wallet.pubkey()).unwrap();
    let meta = h.send(&[h.release_node_ix(&s, &node_addr)], &[&s.wallet]).unwrap();
    assert_eq!(event::<NodeReleased>(&meta).released_stake, 800 * IO);
    assert!(!h.exists(&node_addr));
    assert!(h.svm.get_balance(&s.wallet.pubkey()).unwrap() > rent_before, "rent returned");
    let p: Provider = h.account(&s.provider);
    assert_eq!((p.bonded, p.node_count), (0, 0));
}

#[test]
fn only_a_deregistered_node_is_released_and_a_deregistered_node_takes_no_lease() {
    let mut h = Harness::new();
    let s = h.supplier(500 * IO);
    let node = h.node(&s, h100_spec(1));
    assert_error(h.send(&[h.release_node_ix(&s, &node.node)], &[&s.wallet]), GpunetError::NodeNotDeregistered);
    let client = h.client(1_000 * IO);
    let lease = h.open_lease(&client, 1, terms(1, 1));
    h.send(&[h.deregister_node_ix(&s, &node.node)], &[&s.wallet]).unwrap();
    assert_error(h.assign(&lease, &[(&node, 1)]), GpunetError::NodeDeregistered);
    // another provider cannot release it
    let other = h.supplier(500 * IO);
    h.advance(UNBONDING_SECONDS);
    let mut ix = h.release_node_ix(&other, &node.node);
    ix.accounts[2].pubkey = other.provider;
    assert_error(h.send(&[ix], &[&other.wallet]), GpunetError::NotNodeProvider);
    assert_eq!(h.account::<Provider>(&s.provider).bonded, 100 * IO);
}

#[test]
fn registration_needs_free_stake_for_every_gpu() {
    let mut h = Harness::new();
    let s = h.supplier(MIN_STAKE_PER_GPU * 4 - 1);
    let key = Keypair::new();
    let ix = h.register_node_ix(&s, &key.pubkey(), h100_spec(4));
    assert_error(h.send(&[ix], &[&s.wallet, &key]), GpunetError::InsufficientFreeStake);
    h.node(&s, h100_spec(3));
    let key = Keypair::new();
    let ix = h.register_node_ix(&s, &key.pubkey(), h100_spec(1));
    assert_error(h.send(&[ix], &[&s.wallet, &key]), GpunetError::InsufficientFreeStake);
}

#[test]
fn invalid_specs_are_refused() {
    let mut h = Harness::new();
    let s = h.supplier(5_000 * IO);
    let bad: [fn(&mut NodeSpec); 6] = [
        |s| s.gpu_model = 0,
        |s| s.gpu_count = 0,
        |s| s.gpu_count = 17,
        |s| s.vram_gb = 0,
        |s| s.region = 0,
        |s| s.price_per_gpu_hour = 0,
    ];
    for change in bad {
        let mut spec = h100_spec(1);
        change(&mut spec);
        let key = Keypair::new();
        let ix = h.register_node_ix(&s, &key.pubkey(), spec);
        assert_error(h.send(&[ix], &[&s.wallet, &key]), GpunetError::InvalidNodeSpec);
        assert!(!h.exists(&node_pda(&key.pubkey())));
    }
}

#[test]
fn the_node_key_must_sign_its_registration() {
    let mut h = Harness::new();
    let s = h.supplier(500 * IO);
    let key = Keypair::new();
    let mut ix = h.register_node_ix(&s, &key.pubkey(), h100_spec(1));
    ix.accounts[3].is_signer = false;
    assert_error(h.send(&[ix], &[&s.wallet]), AnchorError::AccountNotSigner);
}

#[test]
fn a_leased_node_cannot_be_deregistered_and_others_cannot_touch_it() {
    let mut h = Harness::new();
    let s = h.supplier(500 * IO);
    let node = h.node(&s, h100_spec(2));
    let client = h.client(1_000 * IO);
    let lease = h.open_lease(&client, 1, terms(1, 1));
    h.assign(&lease, &[(&node, 1)]).unwrap();
    assert_error(h.send(&[h.deregister_node_ix(&s, &node.node)], &[&s.wallet]), GpunetError::NodeLeased);

    let other = h.supplier(500 * IO);
    let mut ix = h.update_node_ix(&other, &node.node, US, 1);
    ix.accounts[1].pubkey = other.provider;
    assert_error(h.send(&[ix], &[&other.wallet]), GpunetError::NotNodeProvider);

    let wallet = client.wallet.insecure_clone();
    h.close(&wallet, &lease, &client.tokens).unwrap();
    assert_eq!(h.account::<Node>(&node.node).gpus_leased, 0);
    h.send(&[h.deregister_node_ix(&s, &node.node)], &[&s.wallet]).unwrap();
}
