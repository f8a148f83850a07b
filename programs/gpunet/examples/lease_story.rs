//! The gpunet story on the program alone: suppliers stake and register nodes, a client
//! leases a 2-node cluster, signed usage is settled every period, a node is lost (slashed,
//! its share moved to a spare), the lease closes and every token is accounted for.
//!
//! Runs the real program natively inside LiteSVM with the real SPL Token program and
//! Ed25519 precompile. Run it with `scripts/demo`.
#[path = "../tests/harness/mod.rs"]
mod harness;

use gpunet::events::{LeaseClosed, ProviderSlashed, UsageSettled};
use gpunet::state::{FaultKind, Lease, Provider};
use harness::*;
use litesvm::types::TransactionMetadata;

fn io(units: u64) -> String {
    format!("{}.{:06} IO", units / IO, units % IO)
}

fn sig(meta: &TransactionMetadata) -> String {
    let s = meta.signature.to_string();
    format!("{}…{}", &s[..8], &s[s.len() - 4..])
}

fn step(title: &str) {
    println!("\n── {title}");
}

/// One usage period: each node signs a report of full use, the attester settles it.
fn settle_period<'a>(
    h: &mut Harness,
    lease: &LeaseRef,
    period: u32,
    nodes: &[(&'a str, &GpuNode)],
    settlements: &mut Vec<(&'a str, UsageSettled)>,
) {
    h.advance(USAGE_PERIOD_SECONDS);
    for (name, node) in nodes {
        let report = h.full_use_report(lease, node, USAGE_PERIOD_SECONDS);
        let meta = h.settle(lease, node, report).expect("settle_usage");
        let ev: UsageSettled = event(&meta);
        println!(
            "  period {period} {name}: seq {} {:>4} GPU-s → paid {:>14}, fee {:>12}  tx {}",
            ev.seq, ev.gpu_seconds, io(ev.payout), io(ev.fee), sig(&meta)
        );
        settlements.push((name, ev));
    }
}

fn main() {
    let mut h = Harness::new();
    println!("gpunet lease story — program running natively in LiteSVM (real SPL Token + Ed25519 precompile)");
    println!("config: fee {} bps, min stake {} per GPU, usage period {} s", FEE_BPS, io(MIN_STAKE_PER_GPU), USAGE_PERIOD_SECONDS);

    step("Suppliers stake IO and register nodes");
    let names = ["ada (4x H100)", "bob (2x H100)", "cyd (2x H100, spare)"];
    let alice = h.supplier(800 * IO);
    let bob = h.supplier(400 * IO);
    let cyd = h.supplier(400 * IO);
    let a = h.node(&alice, h100_spec(4));
    let b = h.node(&bob, h100_spec(2));
    let c = h.node(&cyd, h100_spec(2));
    for (name, s) in names.iter().zip([&alice, &bob, &cyd]) {
        let p: Provider = h.account(&s.provider);
        println!("  {name:<22} staked {:>16}, bonded {:>16}", io(p.staked), io(p.bonded));
    }

    step("A client opens a 4-GPU cluster lease for 1 hour (escrow at its max price of 3 IO/GPU-hour)");
    let client = h.client(1_000 * IO);
    let lease = h.open_lease(&client, 1, terms(4, 1));
    println!("  lease {}  escrow {}", lease.lease, io(h.balance(&lease.vault)));

    step("The coordinator (attester) places it on ada (2 GPUs) and bob (2 GPUs)");
    let meta = h.assign(&lease, &[(&a, 2), (&b, 2)]).unwrap();
    println!("  assigned in tx {}", sig(&meta));

    step("Workers sign usage every period; the coordinator settles it on chain");
    let mut settlements: Vec<(&str, UsageSettled)> = Vec::new();
    for period in 1..=3 {
        settle_period(&mut h, &lease, period, &[("ada", &a), ("bob", &b)], &mut settlements);
    }

    step("bob's node stops heartbeating: slashed, jailed, its share moved to cyd");
    h.advance(20);
    let meta = h.slash(&b, FaultKind::MissedHeartbeats, Some((&lease, &client.tokens))).unwrap();
    let slash: ProviderSlashed = event(&meta);
    println!("  slashed {} ({} to the client, {} to the treasury)  tx {}", io(slash.amount), io(slash.to_client), io(slash.to_treasury), sig(&meta));
    let meta = h.reassign(&lease, &b, &c).unwrap();
    println!("  reassigned bob → cyd  tx {}", sig(&meta));
    for period in 4..=5 {
        settle_period(&mut h, &lease, period, &[("ada", &a), ("cyd", &c)], &mut settlements);
    }

    step("The client closes the lease; the unspent escrow is refunded");
    let wallet = client.wallet.insecure_clone();
    let meta = h.close(&wallet, &lease, &client.tokens).unwrap();
    let closed: LeaseClosed = event(&meta);
    println!("  refund {}  tx {}", io(closed.refund), sig(&meta));

    step("Summary");
    println!("  {:<10} {:>16} {:>14} {:>16}", "supplier", "paid", "fees", "slashed");
    for (name, provider) in [("ada", &alice.provider), ("bob", &bob.provider), ("cyd", &cyd.provider)] {
        let paid: u64 = settlements.iter().filter(|(n, _)| *n == name).map(|(_, e)| e.payout).sum();
        let fees: u64 = settlements.iter().filter(|(n, _)| *n == name).map(|(_, e)| e.fee).sum();
        let p: Provider = h.account(provider);
        println!("  {name:<10} {:>16} {:>14} {:>16}", io(paid), io(fees), io(p.slashed));
    }
    let state: Lease = h.account(&lease.lease);
    println!("  client deposited {}, refunded {}", io(state.deposited), io(state.refunded));
    let balanced = state.deposited == state.paid + state.fees + state.refunded;
    println!(
        "  conservation: deposited {} == paid {} + fees {} + refunded {}  → {}",
        state.deposited, state.paid, state.fees, state.refunded,
        if balanced { "OK" } else { "MISMATCH" }
    );
    println!("  treasury holds {} (fees + slash share)", io(h.balance(&h.treasury.clone())));
    if !balanced {
        std::process::exit(1);
    }
}
