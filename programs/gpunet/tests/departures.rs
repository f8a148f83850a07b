//! Nodes that leave: a deregistered node stays slashable, and its stake bonded, for the unbonding
//! period (a supplier cannot escape a slash on its way by deregistering), and what a node's share
//! earned or cost stays with the provider the share was assigned to, even once the node's key is
//! registered again by another provider.

use crate::harness::*;
use anchor_lang::error::ErrorCode as AnchorError;
use gpunet::errors::GpunetError;
use gpunet::events::{ProviderSlashed, UnstakeWithdrawn, UsageSettled};
use gpunet::state::{FaultKind, Lease, Node, Provider};
use solana_signer::Signer;

/// What became of the money when a node's missed heartbeats are slashed in its lease's settlement
/// window, after its supplier deregistered it (`deregister`) or not.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    slashed: u64,
    to_client: u64,
    withdrawn: u64,
    client_balance: u64,
}

fn slash_in_the_settlement_window(deregister: bool) -> Outcome {
    let mut h = Harness::new();
    let s = h.supplier(1_000 * IO);
    let node = h.node(&s, h100_spec(1)); // bonds 100 IO
    let client = h.client(1_000 * IO);
    let lease = h.open_lease(&client, 1, terms(1, 1)); // escrows 3 IO
    h.assign(&lease, &[(&node, 1)]).unwrap();
    h.advance(1_800);
    let receipt = h.full_use_receipt(&lease, &node, 1_800);
    h.settle(&lease, &node, receipt).unwrap(); // 1 GPU x 30 min x 2 IO/h = 1 IO
    let wallet = client.wallet.insecure_clone();
    h.close(&wallet, &lease, &client.tokens).unwrap();
    if deregister {
        h.send(&[h.deregister_node_ix(&s, &node.node)], &[&s.wallet]).unwrap();
        assert_error(h.send(&[h.release_node_ix(&s, &node.node)], &[&s.wallet]), GpunetError::NodeStillBonded);
    }
    // the node's bond stays bonded either way: only the rest unbonds
    assert_error(h.send(&[h.request_unstake_ix(&s, 901 * IO)], &[&s.wallet]), GpunetError::InsufficientFreeStake);
    h.send(&[h.request_unstake_ix(&s, 900 * IO)], &[&s.wallet]).unwrap();

    h.advance(60); // the attester's evidence lands inside the settlement window
    let ev: ProviderSlashed =
        event(&h.slash(&node, FaultKind::MissedHeartbeats, Some((&lease, &client.tokens))).unwrap());
    h.advance(SETTLE_WINDOW_SECONDS);
    let stranger = h.wallet();
    h.finalize(&stranger, &lease, &client.tokens).unwrap();
    let state: Lease = h.account(&lease.lease);
    assert_eq!(state.deposited, state.paid + state.fees + state.refunded, "the lease's escrow is all accounted for");

    h.advance(UNBONDING_SECONDS);
    let withdrawn = event::<UnstakeWithdrawn>(&h.send(&[h.withdraw_unstaked_ix(&s)], &[&s.wallet]).unwrap()).amount;
    assert_eq!(withdrawn + ev.amount, 1_000 * IO, "the stake is all accounted for");
    assert_eq!(h.balance(&s.vault), 0);
    if deregister {
        // jailed by the slash: unjailed after the cool-down, then released
        h.send(&[h.unjail_node_ix(&s, &node.node)], &[&s.wallet]).unwrap();
        h.send(&[h.release_node_ix(&s, &node.node)], &[&s.wallet]).unwrap();
        assert!(!h.exists(&node.node));
        assert_eq!(h.account::<Provider>(&s.provider).bonded, 0);
    }
    Outcome { slashed: ev.amount, to_client: ev.to_client, withdrawn, client_balance: h.balance(&client.tokens) }
}

#[test]
fn deregistering_in_the_settlement_window_does_not_escape_the_slash() {
    let honest = slash_in_the_settlement_window(false);
    // 10 % of the 1,000 IO in the vault; the client's half is capped by the 30 min its share ran
    // (1 IO), so the client ends where it began: 3 IO escrowed, 1 IO paid, 2 IO refunded, 1 IO back
    let expected = Outcome { slashed: 100 * IO, to_client: IO, withdrawn: 900 * IO, client_balance: 1_000 * IO };
    assert_eq!(honest, expected, "the control: the node stays registered");
    assert_eq!(slash_in_the_settlement_window(true), expected, "the node deregistered right after the close");
}

#[test]
fn an_idle_deregistered_node_stays_slashable_for_the_unbonding_period_and_no_longer() {
    let mut h = Harness::new();
    let s = h.supplier(1_000 * IO);
    let node = h.node(&s, h100_spec(2)); // bonds 200 IO
    h.send(&[h.deregister_node_ix(&s, &node.node)], &[&s.wallet]).unwrap();
    h.send(&[h.request_unstake_ix(&s, 800 * IO)], &[&s.wallet]).unwrap();
    h.advance(UNBONDING_SECONDS - 1);
    // a failed verification found while it was registered lands at the last moment: 20 % of 1,000
    let ev: ProviderSlashed = event(&h.slash(&node, FaultKind::FailedVerification, None).unwrap());
    assert_eq!((ev.amount, ev.to_client, ev.to_treasury), (200 * IO, 0, 200 * IO));
    let p: Provider = h.account(&s.provider);
    assert_eq!((p.staked, p.bonded, p.unbonding, p.slashed), (0, 200 * IO, 800 * IO, 200 * IO));
    h.advance(1);
    let withdrawn = event::<UnstakeWithdrawn>(&h.send(&[h.withdraw_unstaked_ix(&s)], &[&s.wallet]).unwrap()).amount;
    assert_eq!((withdrawn, h.balance(&s.vault)), (800 * IO, 0));

    // jailed, it is released only after its cool-down; then it is gone and the window is over
    assert_error(h.send(&[h.release_node_ix(&s, &node.node)], &[&s.wallet]), GpunetError::NodeJailed);
    h.advance(JAIL_SECONDS);
    h.send(&[h.unjail_node_ix(&s, &node.node)], &[&s.wallet]).unwrap();
    h.send(&[h.release_node_ix(&s, &node.node)], &[&s.wallet]).unwrap();
    assert_eq!(h.account::<Provider>(&s.provider).bonded, 0);
    assert_error(h.slash(&node, FaultKind::FailedVerification, None), AnchorError::AccountNotInitialized);
}

#[test]
fn the_bond_stays_for_the_settlement_window_when_it_is_longer_than_the_unbonding_period() {
    let mut h = Harness::new();
    h.update_config(|p| {
        p.unbonding_seconds = 60;
        p.settle_window_seconds = 600;
    })
    .unwrap();
    let s = h.supplier(500 * IO);
    let node = h.node(&s, h100_spec(1));
    h.send(&[h.deregister_node_ix(&s, &node.node)], &[&s.wallet]).unwrap();
    h.advance(599);
    assert_error(h.send(&[h.release_node_ix(&s, &node.node)], &[&s.wallet]), GpunetError::NodeStillBonded);
    h.slash(&node, FaultKind::MissedHeartbeats, None).unwrap(); // a fault of its last lease, late in the window
    h.advance(JAIL_SECONDS);
    h.send(&[h.unjail_node_ix(&s, &node.node)], &[&s.wallet]).unwrap();
    h.send(&[h.release_node_ix(&s, &node.node)], &[&s.wallet]).unwrap();
}

#[test]
fn a_receipt_pays_the_provider_its_share_was_assigned_to_after_the_node_key_changes_hands() {
    let mut h = Harness::new();
    h.update_config(|p| p.settle_window_seconds = 600).unwrap();
    let old = h.supplier(500 * IO);
    let node = h.node(&old, h100_spec(1));
    let client = h.client(1_000 * IO);
    let lease = h.open_lease(&client, 1, terms(1, 1)); // escrows 3 IO
    h.assign(&lease, &[(&node, 1)]).unwrap();
    h.advance(1_800);
    let last = h.full_use_receipt(&lease, &node, 1_800); // signed by the node, not settled yet
    let wallet = client.wallet.insecure_clone();
    h.close(&wallet, &lease, &client.tokens).unwrap(); // keeps 1 IO for it, settled until close + 600 s
    h.send(&[h.deregister_node_ix(&old, &node.node)], &[&old.wallet]).unwrap();
    // the admin shortens both periods: the key can change hands inside the lease's settlement window
    h.update_config(|p| {
        p.unbonding_seconds = 60;
        p.settle_window_seconds = 60;
    })
    .unwrap();
    h.advance(60);
    h.send(&[h.release_node_ix(&old, &node.node)], &[&old.wallet]).unwrap();

    // another provider registers the same key
    let new = h.supplier(500 * IO);
    let ix = h.register_node_ix(&new, &node.key.pubkey(), h100_spec(1));
    h.send(&[ix], &[&new.wallet, &node.key]).unwrap();
    assert_eq!(h.account::<Node>(&node.node).provider, new.provider);
    let newcomer =
        GpuNode { key: node.key.insecure_clone(), node: node.node, provider: new.provider, payout_tokens: new.tokens };
    let new_before = h.balance(&new.tokens);
    assert_error(h.settle(&lease, &newcomer, last), GpunetError::AccountMismatch);
    assert_eq!(h.balance(&new.tokens), new_before);
    // nor does the newcomer answer, to the old lease's client, for the old share
    assert_error(
        h.slash(&newcomer, FaultKind::MissedHeartbeats, Some((&lease, &client.tokens))),
        GpunetError::NodeNotInLease,
    );
    assert_eq!(h.balance(&new.vault), 500 * IO);

    // the control: the share's own provider is paid, exactly 1 GPU x 30 min x 2 IO/h less 5 %
    let old_before = h.balance(&old.tokens);
    let ev: UsageSettled = event(&h.settle(&lease, &node, last).unwrap());
    assert_eq!((ev.provider, ev.amount, ev.payout, ev.fee), (old.provider, IO, 950_000, 50_000));
    assert_eq!(h.balance(&old.tokens), old_before + 950_000);
    let stranger = h.wallet();
    h.finalize(&stranger, &lease, &client.tokens).unwrap();
    let state: Lease = h.account(&lease.lease);
    assert_eq!((state.deposited, state.paid, state.fees, state.refunded), (3 * IO, 950_000, 50_000, 2 * IO));
    assert_eq!(h.balance(&client.tokens), 1_000 * IO - IO);
}
