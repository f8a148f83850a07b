//! Slashing and jail: an attester takes the configured fraction of stake (part to the
//! affected client, up to what its lease lost), the node is jailed until its provider unjails it
//! after the cool-down.

use crate::harness::*;
use gpunet::errors::GpunetError;
use gpunet::events::{NodeUnjailed, ProviderSlashed};
use gpunet::state::{FaultKind, Lease, Node, Provider};
use solana_signer::Signer;

#[test]
fn slash_pays_treasury_and_client_and_jails_the_node() {
    let mut h = Harness::new();
    let s = h.supplier(1_000 * IO);
    let node = h.node(&s, h100_spec(2));
    let client = h.client(1_000 * IO);
    let lease = h.open_lease(&client, 1, terms(2, 1));
    h.assign(&lease, &[(&node, 2)]).unwrap();
    h.advance(3_600); // the share ran its whole hour
    let client_before = h.balance(&client.tokens);

    let meta = h.slash(&node, FaultKind::MissedHeartbeats, Some((&lease, &client.tokens))).unwrap();
    let ev: ProviderSlashed = event(&meta);
    // 10% of 1,000 IO
    let amount = 1_000 * IO * u64::from(SLASH_BPS[0]) / 10_000;
    // the client's share (half the slash) is capped by what the share was worth over the time it
    // ran: 2 GPUs x 2 IO/h x 1 h
    let to_client = (amount * u64::from(SLASH_CLIENT_SHARE_BPS) / 10_000).min(4 * IO);
    assert_eq!(to_client, 4 * IO);
    assert_eq!((ev.amount, ev.to_client, ev.to_treasury), (amount, to_client, amount - to_client));
    assert_eq!((ev.fault, ev.lease), (FaultKind::MissedHeartbeats, Some(lease.lease)));
    assert_eq!(ev.jail_ends_at, h.now() + JAIL_SECONDS);

    assert_eq!(h.balance(&s.vault), 1_000 * IO - amount);
    assert_eq!(h.balance(&client.tokens), client_before + to_client);
    assert_eq!(h.balance(&h.treasury.clone()), amount - to_client);
    let p: Provider = h.account(&s.provider);
    assert_eq!((p.staked, p.slashed), (1_000 * IO - amount, amount));
    let n: Node = h.account(&node.node);
    assert!(n.jailed);
}

#[test]
fn a_jailed_node_gets_no_work_until_unjailed_after_the_cool_down() {
    let mut h = Harness::new();
    let s = h.supplier(1_000 * IO);
    let node = h.node(&s, h100_spec(1));
    h.slash(&node, FaultKind::FailedVerification, None).unwrap();
    let client = h.client(1_000 * IO);
    let lease = h.open_lease(&client, 1, terms(1, 1));
    assert_error(h.assign(&lease, &[(&node, 1)]), GpunetError::NodeJailed);
    assert_error(h.send(&[h.deregister_node_ix(&s, &node.node)], &[&s.wallet]), GpunetError::NodeJailed);

    h.advance(JAIL_SECONDS - 1);
    assert_error(h.send(&[h.unjail_node_ix(&s, &node.node)], &[&s.wallet]), GpunetError::JailNotOver);
    h.advance(1);
    let meta = h.send(&[h.unjail_node_ix(&s, &node.node)], &[&s.wallet]).unwrap();
    assert_eq!(event::<NodeUnjailed>(&meta).node, node.node);
    assert_error(h.send(&[h.unjail_node_ix(&s, &node.node)], &[&s.wallet]), GpunetError::NodeNotJailed);
    h.assign(&lease, &[(&node, 1)]).unwrap();
}

#[test]
fn an_undercollateralised_provider_gets_no_new_work_until_it_restakes() {
    let mut h = Harness::new();
    let s = h.supplier(MIN_STAKE_PER_GPU);
    let node = h.node(&s, h100_spec(1));
    let neighbour = h.supplier(MIN_STAKE_PER_GPU);
    let spare = h.node(&neighbour, h100_spec(1));
    h.slash(&spare, FaultKind::InvalidUsage, None).unwrap(); // another provider: no effect on `s`
    h.slash(&node, FaultKind::InvalidUsage, None).unwrap();
    h.advance(JAIL_SECONDS);
    h.send(&[h.unjail_node_ix(&s, &node.node)], &[&s.wallet]).unwrap();
    let client = h.client(1_000 * IO);
    let lease = h.open_lease(&client, 1, terms(1, 1));
    assert_error(h.assign(&lease, &[(&node, 1)]), GpunetError::ProviderUndercollateralised);
    h.send(&[h.stake_ix(&s, MIN_STAKE_PER_GPU / 2)], &[&s.wallet]).unwrap();
    h.assign(&lease, &[(&node, 1)]).unwrap();
}

#[test]
fn unbonding_stake_is_still_slashable() {
    let mut h = Harness::new();
    let s = h.supplier(1_000 * IO);
    let node = h.node(&s, h100_spec(1)); // bonds 100
    h.send(&[h.request_unstake_ix(&s, 850 * IO)], &[&s.wallet]).unwrap(); // 150 active, 850 unbonding
    h.slash(&node, FaultKind::InvalidUsage, None).unwrap(); // 50% of 1,000 = 500
    let p: Provider = h.account(&s.provider);
    assert_eq!((p.staked, p.unbonding, p.slashed), (0, 500 * IO, 500 * IO));
    assert_eq!(h.balance(&s.vault), 500 * IO);
}

#[test]
fn only_attesters_slash_and_the_client_share_needs_the_lease() {
    let mut h = Harness::new();
    let s = h.supplier(1_000 * IO);
    let node = h.node(&s, h100_spec(1));
    let other = h.node(&s, h100_spec(1));
    let outsider = h.wallet();
    let ix = h.slash_ix(&outsider.pubkey(), &node, FaultKind::InvalidUsage, None);
    assert_error(h.send(&[ix], &[&outsider]), GpunetError::NotAttester);

    let client = h.client(1_000 * IO);
    let lease = h.open_lease(&client, 1, terms(1, 1));
    h.assign(&lease, &[(&node, 1)]).unwrap();
    // a lease the slashed node is not part of cannot collect the client share
    assert_error(
        h.slash(&other, FaultKind::MissedHeartbeats, Some((&lease, &client.tokens))),
        GpunetError::NodeNotInLease,
    );
    // the client share goes to the lease's client only
    let thief_tokens = h.token_account(&outsider.pubkey());
    assert_error(
        h.slash(&node, FaultKind::MissedHeartbeats, Some((&lease, &thief_tokens))),
        GpunetError::WrongTokenOwner,
    );
    assert_eq!(h.balance(&s.vault), 1_000 * IO);
    assert_eq!(h.account::<Provider>(&s.provider).slashed, 0);
}

/// The client's share of a slash of its node 2 GPUs x 2 IO/h, `ran` seconds after the assignment,
/// with the lease closed by its client first (`closed`) or still running. Returns the share and
/// what the client has gained over its starting balance once the lease is finalized.
fn client_share_after(ran: i64, closed: bool) -> (u64, i128) {
    let mut h = Harness::new();
    let s = h.supplier(1_000 * IO);
    let node = h.node(&s, h100_spec(2));
    let client = h.client(1_000 * IO);
    let lease = h.open_lease(&client, 1, terms(2, 1)); // escrows 6 IO
    h.assign(&lease, &[(&node, 2)]).unwrap();
    if ran > 0 {
        h.advance(ran);
        let receipt = h.full_use_receipt(&lease, &node, ran);
        h.settle(&lease, &node, receipt).unwrap();
    }
    let wallet = client.wallet.insecure_clone();
    if closed {
        h.close(&wallet, &lease, &client.tokens).unwrap();
    }
    let ev: ProviderSlashed =
        event(&h.slash(&node, FaultKind::MissedHeartbeats, Some((&lease, &client.tokens))).unwrap());
    assert_eq!(ev.amount, 100 * IO);
    assert_eq!(ev.to_client + ev.to_treasury, ev.amount);
    if !closed {
        h.close(&wallet, &lease, &client.tokens).unwrap();
    }
    h.advance(SETTLE_WINDOW_SECONDS + 1);
    let stranger = h.wallet();
    h.finalize(&stranger, &lease, &client.tokens).unwrap();
    let state: Lease = h.account(&lease.lease);
    assert_eq!(state.deposited, state.paid + state.fees + state.refunded);
    assert_eq!(state.compensated, ev.to_client);
    (ev.to_client, i128::from(h.balance(&client.tokens)) - i128::from(1_000 * IO))
}

#[test]
fn a_lease_closed_at_once_earns_its_client_nothing_from_a_slash() {
    // the attack: the lease is closed as soon as it is placed; its node's slash pays the client nothing
    let (to_client, gained) = client_share_after(0, true);
    assert_eq!((to_client, gained), (0, 0));
    // the control: after 30 min of use (2 IO paid) the client gets that back, no more
    let (to_client, gained) = client_share_after(1_800, true);
    assert_eq!((to_client, gained), (2 * IO, 0));
    // and a running lease is capped the same way, by the time its share has run
    let (to_client, gained) = client_share_after(1_800, false);
    assert_eq!((to_client, gained), (2 * IO, 0));
}

#[test]
fn a_client_refunded_everything_gets_no_client_share() {
    // the node was offline for all of its 30 min (the attester accepted none of it): the close
    // refunds the whole escrow, so nothing of the client's was at risk
    let mut h = Harness::new();
    let s = h.supplier(1_000 * IO);
    let node = h.node(&s, h100_spec(2));
    let client = h.client(1_000 * IO);
    let lease = h.open_lease(&client, 1, terms(2, 1));
    h.assign(&lease, &[(&node, 2)]).unwrap();
    h.advance(1_800);
    let receipt = h.full_use_receipt(&lease, &node, 1_800);
    let attester = h.attester.insecure_clone();
    h.send(&h.usage_ixs_accepting(&lease, &node, receipt, 0), &[&attester]).unwrap();
    let wallet = client.wallet.insecure_clone();
    h.close(&wallet, &lease, &client.tokens).unwrap();
    assert_eq!(h.balance(&client.tokens), 1_000 * IO);
    let ev: ProviderSlashed =
        event(&h.slash(&node, FaultKind::MissedHeartbeats, Some((&lease, &client.tokens))).unwrap());
    assert_eq!((ev.to_client, ev.to_treasury), (0, 100 * IO));
    assert_eq!(h.balance(&client.tokens), 1_000 * IO);
}
