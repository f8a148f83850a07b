//! Benchmark (not a test): what each gpunet instruction costs in compute units on the SBF
//! build, and the largest `settle_usage` batch that fits one transaction.
//!
//!     scripts/build-sbf && cargo run -p gpunet --example cu [-- path/to/gpunet.so]
//!
//! The program runs as the SBF ELF (default target/deploy/gpunet.so, or GPUNET_PROGRAM_SO) in
//! LiteSVM, so every figure is the runtime's metering of real SBF code; the native build has no
//! metering and is refused. Each instruction is sent alone in its own transaction and the
//! figure is the transaction's total (its CPIs into SPL Token and the System program included).
//! Instructions whose cost grows with the number of nodes (assign_lease, close_lease) are
//! measured with 1 node and with MAX_LEASE_NODES. Instructions that create an account at a PDA
//! (register_provider, register_node, open_lease) search its bump seed on chain, 1,500 CU per
//! seed tried, so their cost depends on the key: they are measured several times (median, range).
//!
//! Settlement batches are legacy transactions, as the coordinator sends them (no compute-budget
//! instruction, the attester paying): each receipt is the node's Ed25519 instruction followed
//! by settle_usage. A batch fits when its wire size is at most 1,232 bytes and its compute at
//! most the default limit the runtime gives it (200,000 per non-builtin instruction, capped
//! at 1,400,000). Two shapes: the nodes of one cluster lease (shared lease accounts), and
//! receipts of unrelated leases (nothing shared but the config and programs, both read only).
#[path = "../../programs/gpunet/tests/harness/mod.rs"]
mod harness;

use std::path::PathBuf;

use anchor_lang::solana_program::instruction::Instruction;
use gpunet::state::{FaultKind, MAX_LEASE_NODES};
use gpunet_localnet::{ProgramBuild, PROGRAM_SO_ENV};
use harness::*;
use solana_keypair::Keypair;
use solana_signer::Signer;
use solana_transaction::Transaction;

/// The most bytes a transaction may take on the wire (solana_packet::PACKET_DATA_SIZE).
const PACKET_BYTES: usize = 1_232;
/// The runtime's compute limits when a transaction sets none.
const DEFAULT_INSTRUCTION_CU: u64 = 200_000;
const MAX_TRANSACTION_CU: u64 = 1_400_000;

fn main() {
    let elf = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .or_else(|| std::env::var_os(PROGRAM_SO_ENV).filter(|p| !p.is_empty()).map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/deploy/gpunet.so"));
    if !elf.is_file() {
        eprintln!("bench/cu: no SBF build at {}; run scripts/build-sbf first (or pass the .so)", elf.display());
        std::process::exit(2);
    }
    // The harness builds its SVM through gpunet_svm(), which reads this variable (one place
    // selects the build for tests and benchmarks alike).
    std::env::set_var(PROGRAM_SO_ENV, &elf);
    let build = ProgramBuild::from_env();
    println!("gpunet compute units, {build} ({} bytes)\n", std::fs::metadata(&elf).map_or(0, |m| m.len()));

    let rows = per_instruction();
    println!("{:<34} {:>9} {:>8} {:>15}", "instruction", "CU", "of 200k", "range (n)");
    for (name, samples) in &rows {
        let mut sorted = samples.clone();
        sorted.sort_unstable();
        let median = sorted[sorted.len() / 2];
        let range = match sorted.len() {
            1 => String::new(),
            n => format!("{}-{} ({n})", sorted[0], sorted[n - 1]),
        };
        println!("{name:<34} {median:>9} {:>7.1}% {range:>15}", median as f64 * 100.0 / DEFAULT_INSTRUCTION_CU as f64);
    }
    let (worst, worst_cu) = rows
        .iter()
        .map(|(name, samples)| (name, samples.iter().copied().max().unwrap_or(0)))
        .max_by_key(|(_, cu)| *cu)
        .expect("rows");
    println!(
        "\nmost expensive: {worst} at {worst_cu} CU ({}% of the 200,000 an instruction gets by default)",
        worst_cu * 100 / DEFAULT_INSTRUCTION_CU
    );

    println!("\nlargest settle_usage batch in one transaction (limits: {PACKET_BYTES} bytes, default compute)");
    for shape in [Shape::OneClusterLease, Shape::SeparateLeases] {
        settle_batches(shape);
    }
}

fn consumed(result: TxResult, what: &str) -> u64 {
    match result {
        Ok(meta) => meta.compute_units_consumed,
        Err(failed) => panic!("{what} failed: {:?}\n{:#?}", failed.err, failed.meta.logs),
    }
}

/// Sends each instruction alone through a story that reaches all of them; (name, CU samples)
/// in the order first seen.
fn per_instruction() -> Vec<(String, Vec<u64>)> {
    let mut rows: Vec<(String, Vec<u64>)> = Vec::new();
    let mut record = |name: &str, cu: u64| match rows.iter_mut().find(|(n, _)| n == name) {
        Some((_, samples)) => samples.push(cu),
        None => rows.push((name.to_string(), vec![cu])),
    };

    let mut h = Harness::uninitialised();
    let params = h.default_params();
    let admin = h.admin.insecure_clone();
    record("initialize", consumed(h.send(&[h.initialize_ix(&params)], &[&admin]), "initialize"));
    record(
        "update_config",
        consumed(h.send(&[h.update_config_ix(&admin.pubkey(), &params)], &[&admin]), "update_config"),
    );

    // One supplier per node, as a cluster lease across suppliers is the costlier case.
    let mut suppliers = Vec::new();
    let mut nodes = Vec::new();
    for i in 0..MAX_LEASE_NODES {
        let wallet = h.wallet();
        let tokens = h.token_account(&wallet.pubkey());
        h.mint_to(&tokens, 10_000 * IO);
        let provider = provider_pda(&wallet.pubkey());
        let s = Supplier { tokens, provider, vault: stake_vault_pda(&provider), wallet };
        let register = h.send(&[h.register_provider_ix(&s.wallet.pubkey())], &[&s.wallet]);
        let stake = h.send(&[h.stake_ix(&s, 1_000 * IO)], &[&s.wallet]);
        let key = Keypair::new();
        let node_ix = h.register_node_ix(&s, &key.pubkey(), h100_spec(2));
        let node_cu = h.send(&[node_ix], &[&s.wallet, &key]);
        let node = GpuNode { node: node_pda(&key.pubkey()), key, provider: s.provider, payout_tokens: s.tokens };
        record("register_provider", consumed(register, "register_provider"));
        record("stake", consumed(stake, "stake"));
        record("register_node", consumed(node_cu, "register_node"));
        if i == 0 {
            let update = h.send(&[h.update_node_ix(&s, &node.node, EU, 2 * IO)], &[&s.wallet]);
            record("update_node", consumed(update, "update_node"));
        }
        suppliers.push(s);
        nodes.push(node);
    }
    let spare_supplier = h.supplier(1_000 * IO);
    let spare = h.node(&spare_supplier, h100_spec(2));
    let valid_until = h.now() + 3_600;
    record("record_verification", consumed(h.verify(&spare, 2, valid_until), "record_verification"));

    let client = h.client(1_000_000 * IO);
    let single = LeaseRef::new(client.wallet.pubkey(), 1);
    record(
        "open_lease",
        consumed(h.send(&[h.open_lease_ix(&client, &single, terms(2, 1))], &[&client.wallet]), "open_lease"),
    );
    record("assign_lease (1 node)", consumed(h.assign(&single, &[(&nodes[0], 2)]), "assign_lease"));
    record(
        "top_up_lease",
        consumed(h.send(&[h.top_up_lease_ix(&client, &single, 3_600)], &[&client.wallet]), "top_up_lease"),
    );
    h.advance(USAGE_PERIOD_SECONDS);
    let receipt = h.full_use_receipt(&single, &nodes[0], USAGE_PERIOD_SECONDS);
    record("settle_usage (+ Ed25519 check)", consumed(h.settle(&single, &nodes[0], receipt), "settle_usage"));
    let sweep = h.send(&[h.sweep_fees_ix(&client.wallet.pubkey(), &single)], &[&client.wallet]);
    record("sweep_fees", consumed(sweep, "sweep_fees"));
    // a share moves only away from a node found lost (slashed, so jailed)
    h.slash(&nodes[0], FaultKind::MissedHeartbeats, None).expect("slash");
    record("reassign_lease", consumed(h.reassign(&single, &nodes[0], &spare), "reassign_lease"));
    h.advance(2 * 3_600);
    let close = h.close(&client.wallet, &single, &client.tokens);
    record("close_lease (1 node)", consumed(close, "close_lease"));
    h.advance(SETTLE_WINDOW_SECONDS + 1);
    record("finalize_lease", consumed(h.finalize(&client.wallet, &single, &client.tokens), "finalize_lease"));
    h.send(&[h.unjail_node_ix(&suppliers[0], &nodes[0].node)], &[&suppliers[0].wallet]).expect("unjail");

    let cluster_gpus = 2 * MAX_LEASE_NODES;
    let cluster = LeaseRef::new(client.wallet.pubkey(), 2);
    let open = h.send(&[h.open_lease_ix(&client, &cluster, terms(cluster_gpus, 1))], &[&client.wallet]);
    record("open_lease", consumed(open, "open_lease"));
    let shares: Vec<(&GpuNode, u8)> = nodes.iter().map(|n| (n, 2)).collect();
    record(&format!("assign_lease ({MAX_LEASE_NODES} nodes)"), consumed(h.assign(&cluster, &shares), "assign_lease"));
    h.advance(2 * 3_600);
    record(
        &format!("close_lease ({MAX_LEASE_NODES} nodes)"),
        consumed(h.close(&client.wallet, &cluster, &client.tokens), "close_lease"),
    );

    let victim = LeaseRef::new(client.wallet.pubkey(), 3);
    let open = h.send(&[h.open_lease_ix(&client, &victim, terms(2, 1))], &[&client.wallet]);
    record("open_lease", consumed(open, "open_lease"));
    h.assign(&victim, &[(&nodes[1], 2)]).expect("assign");
    let slash = h.slash(&nodes[1], FaultKind::MissedHeartbeats, Some((&victim, &client.tokens)));
    record("slash_provider (with client share)", consumed(slash, "slash_provider"));
    h.advance(JAIL_SECONDS);
    let unjail = h.send(&[h.unjail_node_ix(&suppliers[1], &nodes[1].node)], &[&suppliers[1].wallet]);
    record("unjail_node", consumed(unjail, "unjail_node"));

    let s = &suppliers[2];
    let deregister = h.send(&[h.deregister_node_ix(s, &nodes[2].node)], &[&s.wallet]);
    record("deregister_node", consumed(deregister, "deregister_node"));
    record("request_unstake", consumed(h.send(&[h.request_unstake_ix(s, 500 * IO)], &[&s.wallet]), "request_unstake"));
    h.advance(UNBONDING_SECONDS); // the node's bond is held as long (here longer than the settlement window)
    record("withdraw_unstaked", consumed(h.send(&[h.withdraw_unstaked_ix(s)], &[&s.wallet]), "withdraw_unstaked"));
    let release = h.send(&[h.release_node_ix(s, &nodes[2].node)], &[&s.wallet]);
    record("release_node", consumed(release, "release_node"));
    rows
}

#[derive(Clone, Copy, Debug)]
enum Shape {
    /// Reports of the nodes of one cluster lease, each node from its own supplier.
    OneClusterLease,
    /// One receipt per lease, each lease on its own supplier's node.
    SeparateLeases,
}

/// Grows a batch one receipt at a time until it no longer fits, printing each size.
fn settle_batches(shape: Shape) {
    let receipts = MAX_LEASE_NODES; // enough to pass the size limit in both shapes
    let mut h = Harness::new();
    let client = h.client(1_000_000 * IO);
    let mut pairs: Vec<(LeaseRef, GpuNode)> = Vec::new();
    match shape {
        Shape::OneClusterLease => {
            let nodes: Vec<GpuNode> = (0..receipts)
                .map(|_| {
                    let s = h.supplier(1_000 * IO);
                    h.node(&s, h100_spec(1))
                })
                .collect();
            let lease = h.open_lease(&client, 1, terms(receipts, 1));
            h.assign(&lease, &nodes.iter().map(|n| (n, 1)).collect::<Vec<_>>()).expect("assign");
            pairs.extend(nodes.into_iter().map(|n| (lease, n)));
        }
        Shape::SeparateLeases => {
            for id in 0..receipts as u64 {
                let s = h.supplier(1_000 * IO);
                let node = h.node(&s, h100_spec(1));
                let lease = h.open_lease(&client, id + 1, terms(1, 1));
                h.assign(&lease, &[(&node, 1)]).expect("assign");
                pairs.push((lease, node));
            }
        }
    }
    // Each batch settles a newer receipt for every pair in it.
    let attester = h.attester.insecure_clone();
    let mut best = None;
    let mut stopped_by = None;
    println!("  {shape:?}:");
    for k in 1..=pairs.len() {
        h.advance(USAGE_PERIOD_SECONDS);
        let ixs: Vec<Instruction> = pairs[..k]
            .iter()
            .flat_map(|(lease, node)| h.usage_ixs(lease, node, h.full_use_receipt(lease, node, USAGE_PERIOD_SECONDS)))
            .collect();
        let tx =
            Transaction::new_signed_with_payer(&ixs, Some(&attester.pubkey()), &[&attester], h.svm.latest_blockhash());
        let bytes = bincode::serialize(&tx).expect("serialize").len();
        let cu = consumed(h.send(&ixs, &[&attester]), "settle batch");
        // Precompiles and builtins get a small reservation, not 200k; counting only the
        // settle_usage instructions keeps this conservative.
        let cu_limit = (DEFAULT_INSTRUCTION_CU * k as u64).min(MAX_TRANSACTION_CU);
        let fits_size = bytes <= PACKET_BYTES;
        let fits_cu = cu <= cu_limit;
        println!(
            "    {k} receipt(s): {bytes:>5} bytes{} {cu:>7} CU of {cu_limit}{}",
            if fits_size { "" } else { " (too large)" },
            if fits_cu { "" } else { " (over compute)" },
        );
        if !(fits_size && fits_cu) {
            stopped_by = Some(if fits_size { "compute" } else { "the wire size" });
            break;
        }
        best = Some((k, bytes, cu));
    }
    match best {
        Some((k, bytes, cu)) => println!(
            "    largest: {k} receipt(s) per transaction ({bytes} bytes, {cu} CU, {}% of its compute); {} stops the next",
            cu * 100 / (DEFAULT_INSTRUCTION_CU * k as u64).min(MAX_TRANSACTION_CU),
            stopped_by.unwrap_or("nothing (every prepared receipt fit)"),
        ),
        None => println!("    not even one receipt fits"),
    }
}
