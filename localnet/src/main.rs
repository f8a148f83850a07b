//! `gpunet-localnet`: a local Solana JSON-RPC (8899) and PubSub (8900) node that
//! runs the gpunet program natively inside LiteSVM. See node/mod.rs.

mod node;

use {
    clap::Parser,
    gpunet_localnet::ProgramBuild,
    node::{chain, genesis, ledger, pubsub, rpc, Node},
    std::{net::IpAddr, path::PathBuf, sync::Arc, time::Duration},
};

#[derive(Parser, Debug)]
#[command(
    name = "gpunet-localnet",
    version,
    about = "Local Solana JSON-RPC + PubSub node running the gpunet program (LiteSVM)"
)]
struct Args {
    /// Address to listen on (loopback unless asked otherwise).
    #[arg(long, default_value = "127.0.0.1")]
    bind: IpAddr,
    /// JSON-RPC HTTP port.
    #[arg(long, default_value_t = 8899)]
    rpc_port: u16,
    /// PubSub WebSocket port (default: --rpc-port + 1).
    #[arg(long)]
    ws_port: Option<u16>,
    /// Milliseconds per slot.
    #[arg(long, default_value_t = 400, value_parser = clap::value_parser!(u64).range(1..=60_000))]
    slot_ms: u64,
    /// Slots after its own before a transaction is confirmed (its signature status, signatureSubscribe):
    /// 0 confirms at once; 2 with 400 ms slots is about a real cluster's 0.5-1.5 s.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=1_000))]
    confirm_slots: u64,
    /// Keep the chain state in this directory across restarts (default: in memory).
    #[arg(long)]
    ledger: Option<PathBuf>,
    /// Genesis file (JSON): accounts to fund and an IO mint; applied to a new chain only.
    #[arg(long)]
    genesis: Option<PathBuf>,
    /// The gpunet program's upgrade authority, the only key that may `initialize` it (as the
    /// deployer's key is on a real cluster); e.g. the admin wallet's public key.
    #[arg(long)]
    upgrade_authority: Option<String>,
    /// Seconds between ledger snapshots (with --ledger).
    #[arg(long, default_value_t = 5)]
    snapshot_secs: u64,
}

fn fail(msg: String) -> ! {
    eprintln!("gpunet-localnet: {msg}");
    std::process::exit(1)
}

fn build_chain(args: &Args, program: &ProgramBuild) -> chain::Chain {
    let mut chain = chain::Chain::new(chain::node_svm(program).unwrap_or_else(|e| fail(e)));
    let restored = match &args.ledger {
        Some(dir) => ledger::restore(&mut chain, dir).unwrap_or_else(|e| fail(e)),
        None => false,
    };
    if !restored {
        if let Some(file) = &args.genesis {
            genesis::apply(&mut chain, file).unwrap_or_else(|e| fail(e));
        }
    }
    chain.confirm_slots = args.confirm_slots;
    if let Some(authority) = &args.upgrade_authority {
        let authority = authority
            .parse()
            .unwrap_or_else(|e| fail(format!("--upgrade-authority {authority:?} is not a public key: {e}")));
        gpunet_localnet::set_upgrade_authority(&mut chain.svm, &authority).unwrap_or_else(|e| fail(e));
    }
    chain
}

async fn save_ledger(node: &Arc<Node>, dir: &std::path::Path) {
    let bytes = {
        let mut chain = node.chain();
        chain.dirty = false;
        ledger::encode(&chain)
    };
    let dir = dir.to_path_buf();
    let res = match bytes {
        Ok(b) => tokio::task::spawn_blocking(move || ledger::write(&dir, &b).map_err(|e| e.to_string()))
            .await
            .unwrap_or_else(|e| Err(e.to_string())),
        Err(e) => Err(e),
    };
    if let Err(e) = res {
        eprintln!("gpunet-localnet: ledger snapshot failed: {e}");
        node.chain().dirty = true; // try again at the next tick
    }
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = ctrl_c => {},
        _ = term.recv() => {},
    }
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let ws_port = args
        .ws_port
        .unwrap_or_else(|| args.rpc_port.checked_add(1).unwrap_or_else(|| fail("--rpc-port too large".into())));
    let program = ProgramBuild::from_env();
    let node = Arc::new(Node::new(build_chain(&args, &program)));

    let rpc_listener = tokio::net::TcpListener::bind((args.bind, args.rpc_port))
        .await
        .unwrap_or_else(|e| fail(format!("cannot listen on {}:{}: {e}", args.bind, args.rpc_port)));
    let ws_listener = tokio::net::TcpListener::bind((args.bind, ws_port))
        .await
        .unwrap_or_else(|e| fail(format!("cannot listen on {}:{ws_port}: {e}", args.bind)));

    // Block ticker: one slot every --slot-ms.
    let ticker = node.clone();
    let slot_ms = args.slot_ms;
    tokio::spawn(async move {
        let mut interval = tokio::time::interval(Duration::from_millis(slot_ms));
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        interval.tick().await;
        loop {
            interval.tick().await;
            ticker.chain().tick(chain::unix_now());
        }
    });

    if let Some(dir) = args.ledger.clone() {
        let saver = node.clone();
        let every = Duration::from_secs(args.snapshot_secs.max(1));
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                save_ledger(&saver, &dir).await;
            }
        });
    }

    let rpc_app = rpc::router(node.clone());
    let ws_app = pubsub::router(node.clone());
    tokio::spawn(async move { axum::serve(rpc_listener, rpc_app).await });
    tokio::spawn(async move { axum::serve(ws_listener, ws_app).await });

    {
        let chain = node.chain();
        println!(
            "gpunet-localnet: JSON-RPC http://{}:{} PubSub ws://{}:{ws_port} slot {} ({} ms/slot, confirmed after {} slots) ledger {} gpunet program {} ({program})",
            args.bind,
            args.rpc_port,
            args.bind,
            chain.slot,
            args.slot_ms,
            args.confirm_slots,
            args.ledger.as_ref().map_or("in memory".into(), |d| d.display().to_string()),
            gpunet::ID,
        );
    }

    shutdown_signal().await;
    if let Some(dir) = &args.ledger {
        if let Err(e) = ledger::save(&node.chain(), dir) {
            fail(e);
        }
    }
    println!("gpunet-localnet: stopped");
}
